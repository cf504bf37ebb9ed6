"""A real `jupyter server` process killed in the middle of a pause, and one stopped while paused, then
started again on the same state and checkpoint directories.

A server killed in the middle of a pause and started again says where it was and finishes or rolls back
cleanly, losing no checkpoint; a server that starts and finds the state paused recovers per its backend
(local: stays paused, resume works).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
from serverproc import Server

pytestmark = pytest.mark.timeout(600)

SMALL = "work/small.ipynb"
BIG = "work/big.ipynb"
SMALL_CELL = r'''
import numpy as np
small = np.arange(1000, dtype=np.int64) * 3
label = "first notebook"
cfg = {"lr": 0.01, "layers": [4, 8]}
print("ready")
'''
SMALL_NAMES = ["cfg", "label", "np", "small"]
SMALL_CHECK = ('print(__import__("json").dumps({"sum": int(small.sum()), "label": label, "cfg": cfg, '
               '"pid": __import__("os").getpid()}))')
# 600 MB of float64 that does not compress or dedup: its checkpoint takes seconds on this disk
BIG_CELL = r'''
import numpy as np
big = np.random.default_rng(1).standard_normal(75_000_000)
print("ready")
'''
RECOVERED_PAUSE = "the server stopped during a pause; completed on restart: "
LOCAL_PAUSED = "paused; the kernels are stopped: resume to restore them from their checkpoints"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pids(pids) -> None:
    for pid in pids:
        if pid and alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_gone(pids, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def event_names(server: Server) -> list[str]:
    return [e["event"] for e in server.get("gkews/events")["events"]]


def test_killed_during_pause_finishes_on_restart(tmp_path):
    server = Server(tmp_path)
    pids: list[int] = []
    try:
        server.start()
        small = server.open_notebook(SMALL)
        big = server.open_notebook(BIG)
        small_kid, big_kid = small["kernel"]["id"], big["kernel"]["id"]
        assert {k["id"] for k in server.get("api/kernels")} == {small_kid, big_kid}
        assert "ready" in server.run_cell(small_kid, SMALL_CELL)
        assert "ready" in server.run_cell(big_kid, BIG_CELL)
        before = json.loads(server.run_cell(small_kid, SMALL_CHECK))
        pids = [before["pid"], server.pid_of(big_kid)]

        code, s = server.post("gkews/pause", {"notebooks": [SMALL, BIG]})
        assert code == 202 and s["state"] == "pausing", (code, s)
        deadline = time.monotonic() + 120
        while True:
            s = server.status()
            assert s["state"] == "pausing", f"the pause ended before the kill: {s['state']}: {s['message']}"
            first, second = s["notebooks"]
            # progress moves to the second notebook only after the first one's checkpoint was persisted
            if first["status"] == "checkpointed" and (s["progress"] or {}).get("notebook") == BIG:
                break
            assert time.monotonic() < deadline, f"the first checkpoint did not finish: {s}"
            time.sleep(0.02)
        assert second["status"] == "running", f"the second notebook is no longer being saved: {second}"
        first_checkpoint = first["checkpoint"]
        assert first_checkpoint
        killed = time.time()
        server.signal(signal.SIGKILL)

        # The kernels outlive the server only until their parent poller notices (about a second); one still
        # alive after that is stopped here, so that no writer is left when the new server reads the store.
        if not wait_gone(pids, 15):
            kill_pids(pids)
            assert wait_gone(pids, 15)
        on_disk = [c["id"] for c in _checkpoints_on_disk(tmp_path / "ckpt", BIG)]
        print(f"orphaned kernel finished its save: {bool(on_disk)}")

        restarted = time.time()
        server.start()
        s = server.status()
        assert s["state"] == "paused", s
        assert s["phase"] is None and s["error"] is None
        assert s["message"].startswith(RECOVERED_PAUSE), s["message"]
        # the GPU was free once the killed server's kernels ended, not from the restart on: the hours count
        # from the last the server wrote before the kill
        timeline = s["timeline"]
        assert timeline["pause_requested"] <= timeline["environment_stopped"] <= killed < restarted, timeline
        first, second = s["notebooks"]
        assert first["path"] == SMALL and first["status"] == "released"
        assert first["checkpoint"] == first_checkpoint  # the committed checkpoint is the one kept
        assert second["path"] == BIG
        if on_disk:  # the orphaned kernel finished its save: it counts
            assert second["status"] == "released" and second["checkpoint"] == on_disk[0], second
            assert s["message"] == RECOVERED_PAUSE + "2 notebook(s) paused"
        else:
            assert second["status"] == "lost", second
            assert second["error"] == "the server stopped before this notebook's checkpoint was written"
            assert s["message"] == (RECOVERED_PAUSE + "1 notebook(s) paused; not checkpointed "
                                    f"(re-run their cells): {BIG}")
        assert s["timeline"]["pause_requested"] <= s["timeline"]["environment_stopped"]

        names = event_names(server)
        assert "pause-requested" in names and "recovered-interrupted-pause" in names
        assert names.index("pause-requested") < names.index("notebook-checkpointed") \
            < names.index("recovered-interrupted-pause")
        assert "paused" not in names  # the first server never finished
        listed = server.get("gkews/checkpoints")["checkpoints"]
        assert first_checkpoint in [c["id"] for c in listed if c["notebook"] == SMALL]
        assert [c["id"] for c in listed if c["notebook"] == BIG] == on_disk
        # the pause this server finished counts as a pause (it counted in neither process, and the resume after
        # it counted resumes of no pause)
        metrics = server.metrics()
        assert metrics[("gkews_pauses_total", (("reason", "user"), ("result", "paused")))] == 1, metrics
        assert metrics[("gkews_last_checkpoint_bytes", ())] == sum(nb.get("bytes") or 0 for nb in s["notebooks"]
                                                                   if nb["status"] == "released")

        code, r = server.post("gkews/resume")
        assert code == 202 and r["state"] == "resuming", (code, r)
        s = server.wait_for(("active", "failed"))
        assert s["state"] == "active", s["message"]
        first = s["notebooks"][0]
        assert first["verdict"] == "restored-from-checkpoint", first
        assert sorted(first["restored"]) == SMALL_NAMES and first["failed"] == {}
        if on_disk:
            assert s["notebooks"][1]["verdict"] == "restored-from-checkpoint"
            assert "big" in s["notebooks"][1]["restored"]
        else:  # named, with what brings it back (the resume said only "resumed: 1 restored-from-checkpoint")
            assert s["notebooks"][1]["status"] == "lost"
            assert s["message"] == (f"resumed: 1 restored-from-checkpoint; not resumed: {BIG} (the server stopped "
                                    "before this notebook's checkpoint was written; open it and re-run its cells, "
                                    "or restore an earlier checkpoint: %gkews_checkpoint list)"), s["message"]
        sessions = {x["path"]: x for x in server.get("api/sessions")}
        assert sessions[SMALL]["id"] == small["id"] and sessions[SMALL]["kernel"]["id"] == small_kid
        after = json.loads(server.run_cell(small_kid, SMALL_CHECK))
        pids.append(after["pid"])
        assert after.pop("pid") != before.pop("pid")
        assert after == before
        names = event_names(server)
        assert names.index("recovered-interrupted-pause") < names.index("resume-requested") \
            < names.index("resumed")
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGKILL)
        kill_pids(pids)


def test_recovered_interrupted_pause_clears_progress(tmp_path):
    """After the restart the state is paused, not in a step: its progress must be null (docs/rest-api.md)."""
    server = Server(tmp_path)
    pids: list[int] = []
    try:
        server.start()
        small = server.open_notebook(SMALL)
        big = server.open_notebook(BIG)
        server.run_cell(small["kernel"]["id"], SMALL_CELL)
        server.run_cell(big["kernel"]["id"], BIG_CELL)
        pids = [server.pid_of(small["kernel"]["id"]), server.pid_of(big["kernel"]["id"])]
        server.post("gkews/pause", {"notebooks": [SMALL, BIG]})
        deadline = time.monotonic() + 120
        while (server.status()["progress"] or {}).get("notebook") != BIG:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        server.signal(signal.SIGKILL)
        kill_pids(pids)
        assert wait_gone(pids, 15)
        server.start()
        s = server.status()
        assert s["state"] == "paused"
        assert s["progress"] is None, f"a paused state still shows a step in progress: {s['progress']}"
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGKILL)
        kill_pids(pids)


def test_server_started_while_paused_stays_paused_and_resumes(tmp_path):
    server = Server(tmp_path)
    pids: list[int] = []
    try:
        server.start()
        small = server.open_notebook(SMALL)
        kid = small["kernel"]["id"]
        assert "ready" in server.run_cell(kid, SMALL_CELL)
        before = json.loads(server.run_cell(kid, SMALL_CHECK))
        pids.append(before["pid"])
        code, _ = server.post("gkews/pause")
        assert code == 202
        s = server.wait_for(("paused", "failed"))
        assert s["state"] == "paused", s["message"]
        checkpoint = s["notebooks"][0]["checkpoint"]
        assert s["notebooks"][0]["status"] == "released" and checkpoint
        assert server.signal(signal.SIGTERM) is not None  # a clean stop

        server.start()
        s = server.status()
        assert s["state"] == "paused" and s["phase"] is None and s["error"] is None, s
        assert s["message"] == LOCAL_PAUSED
        nb = s["notebooks"][0]
        assert nb["path"] == SMALL and nb["status"] == "released" and nb["checkpoint"] == checkpoint
        assert server.get("api/kernels") == []  # local: nothing was started behind the user's back
        names = event_names(server)
        assert names.index("paused") < names.index("recovered-paused")
        assert checkpoint in [c["id"] for c in server.get("gkews/checkpoints")["checkpoints"]]
        code, r = server.post("gkews/pause")
        assert code == 409, (code, r)  # still paused: a pause is refused

        code, r = server.post("gkews/resume")
        assert code == 202, (code, r)
        s = server.wait_for(("active", "failed"))
        assert s["state"] == "active", s["message"]
        nb = s["notebooks"][0]
        assert nb["verdict"] == "restored-from-checkpoint" and sorted(nb["restored"]) == SMALL_NAMES
        assert nb["failed"] == {}
        after = json.loads(server.run_cell(kid, SMALL_CHECK))
        pids.append(after["pid"])
        assert after.pop("pid") != before.pop("pid")
        assert after == before
        names = event_names(server)
        assert names.index("recovered-paused") < names.index("resume-requested") < names.index("resumed")
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGKILL)
        kill_pids(pids)


def _checkpoints_on_disk(root: Path, notebook: str) -> list[dict]:
    """What the store holds for a notebook, read the way the server reads it (manifests only)."""
    from kernel_state.store import Store
    return [r for r in Store(str(root)).list(notebook) if "error" not in r]


@contextlib.contextmanager
def running_server(tmp_path):
    """A started Server, and a list for the kernel pids the test makes: all killed at the end."""
    server, pids = Server(tmp_path), []
    try:
        server.start()
        yield server, pids
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGKILL)
        kill_pids(pids)


def small_notebook(server: Server, pids: list[int]) -> str:
    """SMALL opened with SMALL_CELL run in its kernel; the kernel's id."""
    kid = server.open_notebook(SMALL)["kernel"]["id"]
    server.run_cell(kid, SMALL_CELL)
    pids.append(server.pid_of(kid))
    return kid


def test_next_transition_accepted_as_soon_as_status_says_done(tmp_path):
    """docs/rest-api.md: poll GET status until state leaves pausing/resuming. A client that then asks for
    the next transition at once must be accepted, not refused with 409 "a paused transition is running"."""
    with running_server(tmp_path) as (server, pids):
        kid = small_notebook(server, pids)
        for _ in range(3):
            for action, done in (("pause", "paused"), ("resume", "active")):
                code, r = server.post(f"gkews/{action}")
                assert code == 202, (action, code, r)
                deadline = time.monotonic() + 300
                s = server.status()
                while s["state"] in ("pausing", "resuming"):  # tight polling, as a quick client would
                    assert time.monotonic() < deadline, s
                    s = server.status()
                assert s["state"] == done, (action, s["state"], s["message"], s.get("notebooks"))
        pids.append(server.pid_of(kid))


def test_a_resumed_kernel_shows_and_saves_what_a_fresh_one_would(tmp_path):
    """The resumed kernel's namespace looks as the notebook's did: its restored variables in %who and in the
    next pause's checkpoint, and what an IPython startup file defines hidden from both, as in a fresh kernel."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-helpers.py").write_text("startup_helper = 41\n")
    who = 'print(sorted(get_ipython().run_line_magic("who_ls", "")))'
    with running_server(tmp_path) as (server, pids):
        kid = server.open_notebook(SMALL)["kernel"]["id"]
        pids.append(server.pid_of(kid))
        server.run_cell(kid, "x = 1\ny = [startup_helper]")
        assert server.run_cell(kid, who).strip() == "['x', 'y']"
        for _ in range(2):  # the second pause saves what the first resume restored
            assert server.post("gkews/pause")[0] == 202
            s = server.wait_for(("paused", "failed"))
            assert s["state"] == "paused", s["message"]
            assert s["notebooks"][0]["saved"] == ["x", "y"], s["notebooks"][0]
            assert server.post("gkews/resume")[0] == 202
            s = server.wait_for(("active", "failed"))
            assert s["state"] == "active", s["message"]
            pids.append(server.pid_of(kid))
            assert server.run_cell(kid, who).strip() == "['x', 'y']"
            assert server.run_cell(kid, "print(x, y, startup_helper)").strip() == "1 [41] 41"


def test_a_server_restarted_on_a_damaged_event_log_still_resumes(tmp_path):
    """A line of events.jsonl changed by hand (`null`, bytes that are no UTF-8) made the extension fail to load
    on the next start: every gkews route answered 404 and the paused notebook could not be resumed. The
    damaged lines are skipped, named in the log, and the resume brings the notebook back."""
    with running_server(tmp_path) as (server, pids):
        small_notebook(server, pids)
        assert server.post("gkews/pause")[0] == 202
        assert server.wait_for(("paused", "failed"))["state"] == "paused"
        server.stop()
        events = server.state_dir / "events.jsonl"
        lines = events.read_bytes().count(b"\n")
        with open(events, "ab") as f:
            f.write(b"null\n\xff\xfe\n")
        server.start()
        assert server.status()["state"] == "paused"
        assert f"2 line(s) are no event and were skipped (line {lines + 1}, {lines + 2})" in server.log_tail(20000)
        assert server.post("gkews/resume")[0] == 202
        s = server.wait_for(("active", "failed"))
        assert s["state"] == "active" and sorted(s["notebooks"][0]["restored"]) == SMALL_NAMES, s
        assert len(server.get("gkews/events")["events"]) > lines


def test_a_server_asked_to_stop_during_a_pause_lets_its_checkpoints_finish(tmp_path):
    """SIGTERM (`jupyter server stop`, a Pod's eviction) while a pause checkpointed: the pause was cancelled at
    once and the server shut the kernels down, so every notebook not saved yet was lost, though its checkpoint
    would have taken moments. The stopping server now lets the pause go on for a while (Lifecycle.stop_wait)."""
    import threading

    from serverkit import SLOW_SAVE
    server = Server(tmp_path)
    gate = tmp_path / "gate"
    try:
        server.start()
        kid = server.open_notebook(SMALL)["kernel"]["id"]
        server.run_cell(kid, "x = 41\n" + SLOW_SAVE.format(gate=str(gate)) + "\nprint('ready')")
        code, s = server.post("gkews/pause", {})
        assert code == 202, s
        saving = Path(str(gate) + ".saving")
        deadline = time.monotonic() + 120
        while not saving.exists():
            assert time.monotonic() < deadline, "the checkpoint did not begin"
            time.sleep(0.05)
        threading.Timer(2.0, gate.touch).start()  # the save ends 2 s into the server's stop
        server.signal(signal.SIGTERM)
        server.start()
        s = server.status()
        assert s["state"] == "paused", s
        [nb] = s["notebooks"]
        assert nb["status"] == "released" and nb["checkpoint"], nb
        assert "recovered-interrupted-pause" not in event_names(server)  # the pause itself finished
        code, _ = server.post("gkews/resume", {})
        assert code == 202
        deadline = time.monotonic() + 180
        while server.status()["state"] != "active":
            assert time.monotonic() < deadline, server.status()
            time.sleep(0.2)
        [nb] = server.status()["notebooks"]
        assert "42" in server.run_cell(nb["kernel_id"], "print(x + 1)")
    finally:
        gate.touch()
        server.kill()


def test_a_checkpoint_taken_just_before_the_pause_is_not_taken_for_the_pauses(tmp_path):
    """A server killed while the pause saved a.ipynb, before b.ipynb: b's "checkpoint now" taken just before the
    pause, in the same second, was taken for the pause's (whole seconds compared), and the resume brought back
    its older values as "restored-from-checkpoint". The pause committed nothing, and says so."""
    server = Server(tmp_path)
    gate = tmp_path / "gate"
    pids: list[int] = []
    try:
        server.start()
        a = server.open_notebook("a.ipynb")["kernel"]["id"]
        b = server.open_notebook("b.ipynb")["kernel"]["id"]
        pids = [server.pid_of(a), server.pid_of(b)]
        # a's checkpoint waits for the gate, which never opens: the server is killed while it saves a
        server.run_cell(a, f"import os, time\nclass Slow:\n    def __reduce__(self):\n"
                           f"        while not os.path.exists({str(gate)!r}):\n            time.sleep(0.05)\n"
                           f"        return (int, (0,))\nslow = Slow()")
        server.run_cell(b, "v = 'old'")
        code, before = server.post("gkews/checkpoints/now", {"notebook": "b.ipynb"})
        assert code == 201, before
        server.run_cell(b, "v = 'new'")
        code, _ = server.post("gkews/pause")
        assert code == 202
        deadline = time.monotonic() + 120
        while (server.status().get("progress") or {}).get("notebook") != "a.ipynb":  # a's save is held at the gate
            assert time.monotonic() < deadline, server.status()
            time.sleep(0.02)
        server.signal(signal.SIGKILL)
        kill_pids(pids)
        # the same second as that checkpoint, a moment after it (what a quick click gives, made certain here)
        state = json.loads((tmp_path / "state" / "state.json").read_text())
        from kernel_state.store import id_seconds
        state["timeline"]["pause_requested"] = id_seconds(before["id"]) + 0.0005
        (tmp_path / "state" / "state.json").write_text(json.dumps(state))

        server.start()
        s = server.status()
        a_nb, b_nb = s["notebooks"]
        assert b_nb["status"] == "lost" and b_nb.get("checkpoint") != before["id"], b_nb
        # nothing of the pause was committed: it failed, and says how to get that checkpoint back by hand
        assert s["state"] == "failed" and "before any checkpoint was written" in s["message"], s["message"]
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGKILL)
        kill_pids(pids)


def test_a_kernel_the_killed_server_was_restoring_ends_with_it(tmp_path):
    """A server killed while it restored a kernel it had just started: the kernel waits in its start hold,
    which comes before ipykernel watches its parent, and lived on for the hold's whole bound (10 minutes),
    holding the restored memory while the restarted server said "paused". It ends with its server now."""
    from jupyter_gkews.bridge import hold_file
    server = Server(tmp_path)
    gate = tmp_path / "gate"
    pids: list[int] = []
    try:
        server.start()
        kid = server.open_notebook("a.ipynb")["kernel"]["id"]
        pids.append(server.pid_of(kid))
        # a value whose restore waits for the gate: the resume stays in the kernel's start hold
        server.run_cell(kid, f"import os, time\ndef back(v):\n    while not os.path.exists({str(gate)!r}):\n"
                             f"        time.sleep(0.05)\n    return v\nclass Slow:\n    def __reduce__(self):\n"
                             f"        return (back, (7,))\nslow = Slow()")
        code, _ = server.post("gkews/pause")
        assert code == 202 and server.wait_for(("paused", "failed"))["state"] == "paused"
        code, _ = server.post("gkews/resume")
        assert code == 202
        held = Path(hold_file(str(server.runtime), kid))
        while not (held.exists() and held.read_text().strip().isdigit()):  # signed: the new kernel holds
            time.sleep(0.02)
        pids.append(int(held.read_text()))
        # the restore call handed to the held kernel (waiting for "restoring" missed that short phase on a fast
        # run: the resume was verifying by the next look, and the loop waited for ever)
        call, deadline = Path(f"{held}.call"), time.monotonic() + 120
        while not call.exists():
            assert time.monotonic() < deadline, f"no restore call reached the held kernel: {server.status()}"
            time.sleep(0.02)
        server.signal(signal.SIGKILL)
        gate.touch()  # the restore call ends; the hold goes on, and its server is gone
        assert wait_gone(pids[1:], 30), "the kernel in its start hold outlived its server"
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGKILL)
        kill_pids(pids)
