"""A state directory the extension cannot use: it says so loudly and every route answers 503 with the
reason (not 404); and a second server on the same state directory is refused instead of adopting the
first one's pause (issue 11, problems 11 and 12)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from serverproc import Server

ROUTES = [("GET", ("gkews", "status")), ("POST", ("gkews", "pause")), ("POST", ("gkews", "resume")),
          ("GET", ("gkews", "checkpoints")), ("GET", ("gkews", "events")),
          ("POST", ("gkews", "checkpoints", "now")),
          ("DELETE", ("gkews", "checkpoints", "20260101-000000-000-abcd"))]


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


@pytest.fixture
def jp_server_config(tmp_path, state_dir, monkeypatch, request):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    if "unwritable" in request.node.name:
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory")
        state_dir = blocker / "state"  # cannot be created, whoever runs the test (root too)
    root = tmp_path / "ckpt"
    if "users_folder" in request.node.name:  # another tool's state.json, and a log linked from elsewhere
        state_dir.mkdir()
        (state_dir / "state.json").write_text('{"theme": "dark"}')
        (tmp_path / "my.log").write_text("mine\n")
        (state_dir / "events.jsonl").symlink_to(tmp_path / "my.log")
    if "damaged_by_hand" in request.node.name:
        state_dir.mkdir()
        (state_dir / "state.json").write_text(json.dumps({"state": "paused", "phase": None, "notebooks": 5}))
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gkews": True}, "allow_unauthenticated_access": False},
            "GkewsApp": {"checkpoint_root": str(root), "state_dir": str(state_dir)}}


async def test_an_unwritable_state_directory_is_reported_on_every_route(jp_fetch, jp_serverapp):
    for method, parts in ROUTES:
        r = await jp_fetch(*parts, method=method, body="{}" if method == "POST" else None, raise_error=False)
        assert r.code == 503, (method, parts, r.code)
        body = json.loads(r.body)
        assert body["reason"] == "ExtensionUnavailable"
        assert "cannot be written" in body["message"] and "c.GkewsApp.state_dir" in body["message"], body
    # still behind the token: the reason is not told to strangers
    r = await jp_fetch("gkews", "status", headers={"Authorization": "token wrong"}, raise_error=False)
    assert r.code == 403


class Volume:
    """A folder whose file system can be made read-only: a tmpfs remounted read-only where this user may
    mount (CI runs as root), else a folder this user may no longer write."""

    def __init__(self, folder):
        self.folder, self.mounted = folder, False
        folder.mkdir()
        if os.geteuid() == 0:
            mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
                                     capture_output=True, text=True)
            if mounted.returncode != 0:
                pytest.skip(f"root, but no tmpfs can be mounted here: {mounted.stderr.strip()}")
            self.mounted = True

    def make_read_only(self):
        if self.mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(self.folder)], check=True)
        else:
            self.folder.chmod(0o500)

    def remove(self):
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.folder)])
        else:
            self.folder.chmod(0o700)


@pytest.fixture
def volume(tmp_path):
    v = Volume(tmp_path / "volume")
    yield v
    v.remove()


def test_a_checkpoint_root_that_cannot_be_written_is_reported_on_every_route(volume, tmp_path):
    """A checkpoint root on a read-only mount answered 200 "active" and took the pause, which failed only after
    waiting for every kernel (the idle policy's pause at night too): the extension is off, saying why."""
    volume.make_read_only()
    read_only_folder = volume.folder
    server = Server(tmp_path / "server")
    server.checkpoint_root = read_only_folder / "ckpt"
    try:
        with pytest.raises(AssertionError, match="503"):  # it starts, and its routes say why they are off
            server.start()
        for method, parts in ROUTES:
            code, body = server.request(method, "/".join(parts), {} if method == "POST" else None)
            assert code == 503 and body["reason"] == "ExtensionUnavailable", (method, parts, code, body)
            assert f"the checkpoint root {read_only_folder / 'ckpt'} cannot be written" in body["message"], body
            assert f"at {read_only_folder}" in body["message"] and "c.GkewsApp.checkpoint_root" in body["message"]
    finally:
        server.stop()


def test_a_paused_notebook_resumes_from_a_checkpoint_root_made_read_only_since(volume, tmp_path):
    """...but a paused notebook's checkpoint can still be read: the server restarted on it resumes it (the
    next pause fails, naming the volume), rather than turning off with the notebook paused."""
    server = Server(tmp_path / "server")
    server.checkpoint_root = volume.folder / "ckpt"
    server.start()
    try:
        kid = server.open_notebook("a.ipynb")["kernel"]["id"]
        server.run_cell(kid, "x = 41")
        server.post_ok("gkews/pause")
        assert server.wait_for(("paused", "failed"))["state"] == "paused"
        server.stop()
        volume.make_read_only()
        server.start()
        assert server.status()["state"] == "paused"
        server.post_ok("gkews/resume")
        resumed = server.wait_for(("active", "failed"))
        assert resumed["notebooks"][0]["verdict"] == "restored-from-checkpoint", resumed
        assert server.run_cell(kid, "print(x + 1)").strip() == "42"
        assert "cannot be written" in server.log_tail(100_000)  # said in the log at the start
    finally:
        server.stop()


async def test_a_second_server_on_the_same_state_directory_is_refused(jp_fetch, jp_serverapp, state_dir, tmp_path):
    assert (await jp_fetch("gkews", "status")).code == 200  # the first server owns the state directory
    second = Server(tmp_path / "second")
    second.state_dir = state_dir
    try:
        with pytest.raises(AssertionError, match="503"):  # it starts, and its routes say why they are off
            second.start()
        code, body = second.request("GET", "gkews/status")
        assert code == 503 and "in use by another running jupyter-gkews server" in body["message"], body
        assert "jupyter-gkews is off" in second.log_tail()  # in the server's log too, at CRITICAL
    finally:
        second.kill()
    # the first one never noticed
    assert json.loads((await jp_fetch("gkews", "status")).body)["state"] == "active"


async def test_a_state_directory_set_to_a_users_folder_is_refused_and_left_as_it_was(
        jp_fetch, jp_serverapp, state_dir, tmp_path):
    """state_dir at a folder of the user's: the server replaced their state.json and appended its events
    through their events.jsonl link into a file elsewhere. Now nothing is written and the routes say why."""
    r = await jp_fetch("gkews", "status", raise_error=False)
    assert r.code == 503
    message = json.loads(r.body)["message"]
    assert f"the state directory {state_dir} holds files jupyter-gkews did not write (state.json)" in message
    assert "Point c.GkewsApp.state_dir at an empty or new directory" in message
    assert (state_dir / "state.json").read_text() == '{"theme": "dark"}'
    assert (tmp_path / "my.log").read_text() == "mine\n"
    assert sorted(p.name for p in state_dir.iterdir()) == ["events.jsonl", "state.json"]


async def test_a_state_document_damaged_by_hand_turns_the_extension_off_with_the_reason(jp_fetch, state_dir):
    """A state.json whose notebooks are no list (edited by hand): every route answers 503 naming the file and
    what to do, not Jupyter's 404 of an extension that failed to load; the file is left as it was."""
    r = await jp_fetch("gkews", "status", raise_error=False)
    body = json.loads(r.body)
    assert r.code == 503 and body["reason"] == "ExtensionUnavailable", (r.code, body)
    assert "could not be loaded" in body["message"] and str(state_dir / "state.json") in body["message"], body
    assert json.loads((state_dir / "state.json").read_text())["notebooks"] == 5
