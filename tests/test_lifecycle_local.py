"""Pause and resume on the local backend: a real server, real kernels, checked value by value."""
from __future__ import annotations

import asyncio
import gzip
import json
import zipfile

import pytest

from serverkit import open_notebook, post, run_cell, status, wait_for

pytest.importorskip("torch", reason="the torch extra is installed by make test")

SESSION = r'''
import numpy as np, torch
torch.manual_seed(0)
class Scaler:
    def __init__(self, k): self.k = k
    def __call__(self, x): return x * self.k
def affine(x, a=3, b=1): return a * x + b
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 4))
probe_in = torch.linspace(-1, 1, 64 * 5).reshape(5, 64)
grid = np.random.default_rng(7).standard_normal((300, 400))
column = grid[:, 3]
scale = Scaler(2.5)
meta = {"run": "baseline", "epochs": [1, 2, 3]}
words = set("the quick brown fox jumps over a lazy dog".split())  # iterated in the order of the string hashes
print("ready")
'''
CHECK = r'''
print(__import__("json").dumps({
  "out": model(probe_in).detach().tolist(),
  "grid": float(grid.sum()), "column_is_view": bool(np.shares_memory(column, grid)),
  "scaled": scale(4.0), "is_scaler": isinstance(scale, Scaler), "affine": affine(2),
  "meta": meta, "vocabulary": {w: i for i, w in enumerate(words)}, "pid": __import__("os").getpid()}))
'''


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gkews": True}, "allow_unauthenticated_access": False},
            "GkewsApp": {"checkpoint_root": str(tmp_path / "ckpt"), "state_dir": str(tmp_path / "state"),
                         "busy_timeout": 2.0}}


async def test_a_pause_keeps_what_the_notebook_wrote_to_files_it_has_open(jp_fetch, jp_serverapp, jp_root_dir):
    """The released kernel exited from its hold without what Python does at exit: a log it appends to came
    out empty, a gzip and a zip archive it was writing unreadable. Jupyter's own shutdown keeps them."""
    s = await open_notebook(jp_fetch, jp_root_dir, "work/files.ipynb")
    await run_cell(jp_serverapp, s["kernel"]["id"], (
        "import gzip, logging, zipfile\n"
        "log = open('train.log', 'a'); log.write('epoch 1 loss 0.5\\n')\n"
        "gz = gzip.open('results.csv.gz', 'wt'); gz.write('a,b\\n1,2\\n')\n"
        "zf = zipfile.ZipFile('artifacts.zip', 'w'); zf.writestr('model.txt', 'weights')\n"
        "handler = logging.FileHandler('run.log', delay=False); handler.stream.write('started\\n')"))
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    work = jp_root_dir / "work"
    assert (work / "train.log").read_text() == "epoch 1 loss 0.5\n"
    with gzip.open(work / "results.csv.gz", "rt") as f:
        assert f.read() == "a,b\n1,2\n"
    with zipfile.ZipFile(work / "artifacts.zip") as z:
        assert z.read("model.txt") == b"weights"
    assert (work / "run.log").read_text() == "started\n"


async def test_a_cell_sent_as_the_resume_starts_the_kernel_runs_after_its_restore(
        jp_fetch, jp_serverapp, jp_root_dir):
    """A cell sent the moment the resumed kernel was up (a client that reconnects and runs at once) ran on an
    empty namespace and answered ok, and the restore then undid what it did. The kernel now starts held:
    the cell waits for the restore, then runs on the restored state, and what it does stays."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "work/early.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 'checkpointed'; counter = 10")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    km = jp_serverapp.kernel_manager
    assert (await post(jp_fetch, "resume")).code == 202
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while kid not in km:  # as soon as the kernel exists, as a client that reconnects sees it
        assert loop.time() < deadline, "the resume started no kernel"
        await asyncio.sleep(0.01)
    out = await run_cell(jp_serverapp, kid, "print('x' in globals(), globals().get('x'))\n"
                                            "counter += 1; x = 'set by the cell'")
    assert out.strip() == "True checkpointed"
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    assert resumed["notebooks"][0].get("warnings", []) == []  # nothing of the cell's was replaced
    assert (await run_cell(jp_serverapp, kid, "print(x, counter)")).strip() == "set by the cell 11"


async def test_pause_and_resume_round_trip(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/train.ipynb")
    kid = s["kernel"]["id"]
    assert "ready" in await run_cell(jp_serverapp, kid, SESSION)
    before = json.loads(await run_cell(jp_serverapp, kid, CHECK))

    r = await post(jp_fetch, "pause")
    assert r.code == 202 and json.loads(r.body)["state"] == "pausing"
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    assert paused["paused_by"] == "user"
    nb = paused["notebooks"][0]
    assert nb["path"] == "work/train.ipynb" and nb["status"] == "released" and nb["checkpoint"]
    assert kid not in jp_serverapp.kernel_manager  # the kernel is gone: its memory is freed
    t = paused["timeline"]
    assert t["pause_requested"] <= t["checkpoint_done"] <= t["environment_stopped"]

    r = await post(jp_fetch, "resume")
    assert r.code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    nb = resumed["notebooks"][0]
    assert nb["verdict"] == "restored-from-checkpoint"
    assert sorted(nb["restored"]) == ["Scaler", "affine", "column", "grid", "meta", "model", "np",
                                      "probe_in", "scale", "torch", "words"]
    assert nb["failed"] == {}
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    assert [(x["id"], x["kernel"]["id"]) for x in sessions] == [(s["id"], kid)]  # same session, same kernel id

    after = json.loads(await run_cell(jp_serverapp, kid, CHECK))
    assert after.pop("pid") != before.pop("pid")  # a fresh process...
    assert after == before                         # ...holding the same values, bit for bit, and a set of
    # strings iterated in the same order (the kernels of a project share one PYTHONHASHSEED)
    usable = await wait_for(jp_fetch, ("active",))
    for _ in range(50):
        if "kernel_usable" in usable["timeline"]:
            break
        await asyncio.sleep(0.1)
        usable = await status(jp_fetch)
    t = usable["timeline"]
    assert t["resume_requested"] <= t["capacity_obtained"] <= t["kernels_started"] <= t["restore_done"]
    assert t["restore_done"] <= t["kernel_usable"]
    events = json.loads((await jp_fetch("gkews", "events")).body)["events"]
    names = [e["event"] for e in events]
    for expected in ("pause-requested", "notebook-checkpointed", "releasing", "paused", "resume-requested",
                     "restoring", "notebook-resumed", "resumed", "kernel-usable"):
        assert expected in names
    listed = json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]
    assert [c["notebook"] for c in listed] == ["work/train.ipynb"]

    # and it pauses again (its small tensors, read back from the packs the restore read, were taken for
    # damaged: every pause after a resume failed), then resumes with the same values
    assert (await post(jp_fetch, "pause")).code == 202
    again = await wait_for(jp_fetch, ("paused", "failed"))
    assert again["state"] == "paused", again["message"]
    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    final = json.loads(await run_cell(jp_serverapp, kid, CHECK))
    final.pop("pid")
    assert final == before
