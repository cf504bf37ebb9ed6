"""Two project folders, each with its own `train.ipynb`, served one after the other by real `jupyter server`
processes with the extension's default directories (one Jupyter data directory for both, as on a laptop): each
folder keeps its own pause, checkpoints, retention and renames (jupyter_gkews/projects.py)."""
from __future__ import annotations

import pytest
from serverproc import Server

pytestmark = pytest.mark.timeout(600)


def project(tmp_path, name: str) -> Server:
    server = Server(tmp_path / name)
    server.own_dirs, server.data_dir = False, tmp_path / "jupyter-data"
    return server


def test_two_folders_with_a_notebook_of_one_name_keep_their_own_pause_and_checkpoints(tmp_path):
    a, b = project(tmp_path, "projA"), project(tmp_path, "projB")
    a.start()
    try:
        kid = a.open_notebook("train.ipynb")["kernel"]["id"]
        a.run_cell(kid, "owner = 'project A'")
        code, _ = a.post("gkews/pause")
        assert code == 202 and a.wait_for(("paused", "failed"))["state"] == "paused"
        paused = a.status()["notebooks"][0]["checkpoint"]
    finally:
        a.stop()

    b.start()
    try:
        # project B's own train.ipynb: not paused, A's checkpoint not its own to list, restore or retire
        s = b.status()
        assert (s["state"], s["notebooks"]) == ("active", []), s
        assert b.get("gkews/checkpoints")["checkpoints"] == []
        kid_b = b.open_notebook("train.ipynb")["kernel"]["id"]
        b.run_cell(kid_b, "owner = 'project B'")
        for _ in range(6):  # past keep_last (5): retention runs among B's checkpoints
            code, saved = b.post("gkews/checkpoints/now", {"notebook": "train.ipynb"})
            assert code == 201, saved
        assert paused not in [c["id"] for c in b.get("gkews/checkpoints")["checkpoints"]]
        code, renamed = b.request("PATCH", "api/contents/train.ipynb", {"path": "renamed.ipynb"})
        assert code == 200, renamed
    finally:
        b.stop()

    a.start()
    try:
        s = a.status()
        assert s["state"] == "paused" and [nb["path"] for nb in s["notebooks"]] == ["train.ipynb"], s
        assert [c["id"] for c in a.get("gkews/checkpoints")["checkpoints"]] == [paused]
        code, _ = a.post("gkews/resume")
        assert code == 202
        s = a.wait_for(("active", "failed"))
        assert s["notebooks"][0]["verdict"] == "restored-from-checkpoint", s["notebooks"]
        assert a.run_cell(kid, "print(owner)") == "project A\n"
    finally:
        a.stop()


def test_a_server_says_where_an_earlier_version_kept_every_folders_state(tmp_path):
    """Earlier versions shared <data>/gkews/state and .../checkpoints between folders: a pause made before the
    upgrade is there. The server says so at its start, with the setting that goes on with it."""
    server = project(tmp_path, "proj")
    shared = server.data_dir / "gkews" / "state"
    shared.mkdir(parents=True)
    (shared / "state.json").write_text("{}")
    server.start()
    try:
        assert server.status()["state"] == "active"
        log = server.log_tail(20000)
        assert f"{shared} holds what an earlier version kept there for every project folder" in log, log
        assert f"c.GkewsApp.state_dir = '{shared}'" in log
    finally:
        server.stop()


def test_a_kernel_no_server_started_keeps_its_checkpoints_with_its_project_folder(tmp_path):
    """A plain kernel (`jupyter console`, a script's KernelManager) wrote to <data>/gkews/checkpoints, the store
    earlier versions shared: every later server start then warned of "what an earlier version kept there", and
    advised pointing the server at it. It takes the folder it started in as its project folder now, as the
    server does, and a %cd does not move its store."""
    from kernels import Kernel
    from jupyter_gkews.projects import project_dir
    server = project(tmp_path, "proj")
    server.root.mkdir(parents=True, exist_ok=True)
    env = {"JUPYTER_DATA_DIR": str(server.data_dir), "GKEWS_CHECKPOINT_ROOT": "", "GKEWS_CONTENTS_ROOT": ""}
    with Kernel(tmp_path / "unused", extra_env=env, cwd=server.root) as kernel:
        kernel.run("x = 42\nimport os\nos.chdir('/')")
        kernel.run("%gkews_checkpoint save")
        root = kernel.call({"op": "status"})["result"]["root"]
    assert root == str(tmp_path / "jupyter-data" / "gkews" / "projects" / project_dir(server.root).split("/")[-1]
                       / "checkpoints"), root
    assert not (server.data_dir / "gkews" / "checkpoints").exists()
    server.start()
    try:
        assert "earlier version" not in server.log_tail(20000)
        assert len(server.get("gkews/checkpoints")["checkpoints"]) == 1  # the project's store: the server's too
    finally:
        server.stop()
