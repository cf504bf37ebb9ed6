"""Local GPU suspend against a simulated GPU (c.LocalBackend.gpu_api = "fake"): a real server, real kernels,
the real suspend policy; only the driver and NVML are the fake's JSON file, in which the test says which
kernel "holds" device memory and what other users hold. The same path on a real GPU: tests/test_gpu_suspend.py.
"""
from __future__ import annotations

import asyncio
import json
import os

import pytest
from serverkit import gkews_server_config, open_notebook, post, run_cell, status, wait_for
from test_lifecycle_holes import printed, start_cell

from jupyter_gkews.gpu_suspend import fake

MIB = 1024 ** 2
CELL = 'import os\nweights = [i * i for i in range(1000)]\nlabel = "live"\nprint(os.getpid())'
CHECK = 'print(sum(weights), label, os.getpid())'


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    path = str(tmp_path / "fake-gpu.json")
    with fake.edit(path) as data:
        data["devices"] = {"0": 4096 * MIB}
    monkeypatch.setenv(fake.ENV, path)
    return path


@pytest.fixture
def jp_server_config(tmp_path):
    config = gkews_server_config(tmp_path, busy_timeout=5.0)
    config["LocalBackend"] = {"release_mode": "suspend", "gpu_api": "fake", "capacity_timeout": 300.0,
                              "capacity_poll_interval": 0.1, "host_memory_reserve": 0}
    return config


def hold(path: str, pid: int, mib: int) -> None:
    """The kernel pid now holds mib of device memory (as if it had a CUDA context)."""
    with fake.edit(path) as data:
        data["processes"][str(pid)] = {"device": 0, "bytes": mib * MIB, "state": "running"}


async def start(jp_fetch, jp_serverapp, jp_root_dir, path: str) -> tuple[str, int]:
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    pid = int((await run_cell(jp_serverapp, kid, CELL)).strip())
    return kid, pid


async def transition(jp_fetch, action: str, done: str) -> dict:
    """POST the action, wait until it is done; the notebooks by path, and the whole status under ""."""
    r = await post(jp_fetch, action)
    assert r.code == 202, r.body
    s = await wait_for(jp_fetch, (done, "failed"))
    assert s["state"] == done, s["message"]
    return {nb["path"]: nb for nb in s["notebooks"]} | {"": s}


async def pause(jp_fetch) -> dict:
    return await transition(jp_fetch, "pause", "paused")


async def resume(jp_fetch) -> dict:
    return await transition(jp_fetch, "resume", "active")


async def test_suspend_and_resume_live(jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    gpu_kid, gpu_pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "gpu.ipynb")
    cpu_kid, cpu_pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "cpu.ipynb")
    hold(fake_gpu, gpu_pid, 1536)

    paused = await pause(jp_fetch)
    gpu, cpu = paused["gpu.ipynb"], paused["cpu.ipynb"]
    assert gpu["status"] == "suspended" and gpu["message"] == "suspended in host memory (1.5 GiB)", gpu
    assert gpu["gpu"]["bytes"] == 1536 * MIB and gpu["gpu"]["kernel_pid"] == gpu_pid
    assert cpu["status"] == "kept-running" and "no CUDA context" in cpu["message"] \
        and "its cells wait until the resume" in cpu["message"], cpu
    assert "gpu.ipynb: suspended in host memory (1.5 GiB)" in paused[""]["message"]
    # both processes live on; the GPU one is checkpointed and its memory is free
    km = jp_serverapp.kernel_manager
    assert gpu_kid in km and cpu_kid in km
    state = fake.read(fake_gpu)
    assert state["processes"][str(gpu_pid)]["state"] == "checkpointed"
    assert [c for c in state["calls"] if c[0] in ("lock", "checkpoint")] == [["lock", gpu_pid], ["checkpoint", gpu_pid]]
    assert fake.FakeGpu(fake_gpu).free() == {0: 4096 * MIB}

    resumed = await resume(jp_fetch)
    for path, kid, pid in (("gpu.ipynb", gpu_kid, gpu_pid), ("cpu.ipynb", cpu_kid, cpu_pid)):
        nb = resumed[path]
        assert nb["verdict"] == "live-verified" and nb["kernel_id"] == kid and "message" not in nb, nb
        assert (await run_cell(jp_serverapp, kid, CHECK)).split() == ["332833500", "live", str(pid)]
    state = fake.read(fake_gpu)
    assert state["processes"][str(gpu_pid)]["state"] == "running"
    assert ["restore", gpu_pid] in state["calls"] and ["unlock", gpu_pid] in state["calls"]


async def test_a_suspended_kernel_shut_down_while_paused_is_said_gone(jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    """Shut Down Kernel (DELETE api/kernels) on a kernel suspended by the pause ended its process, and the
    status still said "suspended in host memory". It says the process is gone, and the resume restores the
    notebook from its checkpoint."""
    kid, pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "nb.ipynb")
    hold(fake_gpu, pid, 512)
    assert (await pause(jp_fetch))["nb.ipynb"]["status"] == "suspended"
    await jp_fetch("api", "kernels", kid, method="DELETE")
    gone = f"its kernel process {pid} is gone (shut down, restarted or ended while paused)"
    for _ in range(600):  # the process ends a moment after the DELETE's answer
        nb = (await status(jp_fetch))["notebooks"][0]
        if nb["message"].startswith(gone):
            break
        await asyncio.sleep(0.05)
    assert nb["message"].startswith(gone), nb
    resumed = await resume(jp_fetch)
    assert resumed["nb.ipynb"]["verdict"] == "restored-from-checkpoint", resumed["nb.ipynb"]


async def test_an_interrupt_of_a_suspended_kernel_is_refused_not_lost(jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    """Interrupt on a kernel held by the pause answered 204 and reached nothing: the cell sent meanwhile ran in
    full after Resume. 409, saying when an interrupt will reach it."""
    kid, pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "nb.ipynb")
    hold(fake_gpu, pid, 512)
    assert (await pause(jp_fetch))["nb.ipynb"]["status"] == "suspended"
    r = await jp_fetch("api", "kernels", kid, "interrupt", method="POST", body="", raise_error=False)
    assert r.code == 409, r.body
    assert "'nb.ipynb' is paused: its kernel lives on, held with the cells sent to it" in json.loads(r.body)["message"]
    assert (await resume(jp_fetch))["nb.ipynb"]["verdict"] == "live-verified"
    r = await jp_fetch("api", "kernels", kid, "interrupt", method="POST", body="", raise_error=False)
    assert r.code == 204, r.body


async def test_driver_refusal_shuts_down_and_says_why(jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    kid, pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "nb.ipynb")
    hold(fake_gpu, pid, 512)
    with fake.edit(fake_gpu) as data:
        data["refuse"] = 801  # CUDA_ERROR_NOT_SUPPORTED, as in a sandbox (gVisor)

    nb = (await pause(jp_fetch))["nb.ipynb"]
    assert nb["status"] == "released", nb
    assert nb["message"].startswith("released (checkpoint on disk); not suspended: the driver refused the "
                                    "checkpoint API"), nb["message"]
    assert kid not in jp_serverapp.kernel_manager  # shut down as in shutdown mode
    nb = (await resume(jp_fetch))["nb.ipynb"]
    assert nb["verdict"] == "restored-from-checkpoint"
    assert (await run_cell(jp_serverapp, kid, CHECK)).split()[:2] == ["332833500", "live"]


async def test_host_memory_too_small_shuts_down(jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    kid, pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "nb.ipynb")
    hold(fake_gpu, pid, 64 * 1024 * 1024)  # 64 TiB: more than any host has available
    nb = (await pause(jp_fetch))["nb.ipynb"]
    assert nb["status"] == "released" and "of memory to spare" in nb["message"], nb
    assert ["lock", pid] not in fake.read(fake_gpu)["calls"]


async def test_wait_for_capacity_then_one_restore_fails(jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    """Another process takes the GPU while paused: the resume waits, naming it; once it is gone, one kernel's
    driver restore fails and only that kernel restarts from its checkpoint, the other comes back live."""
    a_kid, a_pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "a.ipynb")
    b_kid, b_pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "b.ipynb")
    hold(fake_gpu, a_pid, 1024)
    hold(fake_gpu, b_pid, 1024)
    await pause(jp_fetch)
    with fake.edit(fake_gpu) as data:  # someone else (this test process) takes 3.5 of the 4 GiB
        data["others"] = [{"pid": os.getpid(), "device": 0, "bytes": 3584 * MIB}]
        data["restore_error"] = {str(b_pid): 999}  # b's restore will fail in the driver

    r = await post(jp_fetch, "resume")
    assert r.code == 202
    while True:
        s = await status(jp_fetch)
        if s["phase"] == "waiting-for-capacity" and "held by" in s["message"]:
            break
        assert s["state"] == "resuming", s
    assert f"pid {os.getpid()} ({os.environ.get('USER') or __import__('getpass').getuser()}, 3.5 GiB)" in s["message"]
    assert "GPU 0 needs 1.5 GiB more" in s["message"], s["message"]
    by_path = {nb["path"]: nb for nb in s["notebooks"]}
    assert by_path["a.ipynb"]["message"].startswith("waiting for capacity")
    assert not [c for c in fake.read(fake_gpu)["calls"] if c[0] == "restore"]  # nothing tried while full
    with fake.edit(fake_gpu) as data:
        data["others"] = []

    resumed = await resume_done(jp_fetch)
    a, b = resumed["a.ipynb"], resumed["b.ipynb"]
    assert a["verdict"] == "live-verified" and a["kernel_id"] == a_kid
    assert b["verdict"] == "restored-from-checkpoint", b
    assert "the driver could not restore its GPU state" in b["why_restored"] and "(999)" in b["why_restored"], b
    assert (await run_cell(jp_serverapp, a_kid, CHECK)).split() == ["332833500", "live", str(a_pid)]
    b_after = (await run_cell(jp_serverapp, b_kid, CHECK)).split()
    assert b_after[:2] == ["332833500", "live"] and b_after[2] != str(b_pid)  # a fresh process, same values
    restores = [c for c in fake.read(fake_gpu)["calls"] if c[0] == "restore"]
    assert restores.count(["restore", b_pid]) == 1  # a failed restore is never retried


async def resume_done(jp_fetch) -> dict:
    s = await wait_for(jp_fetch, ("active", "failed"))
    assert s["state"] == "active", s["message"]
    return {nb["path"]: nb for nb in s["notebooks"]}


async def test_capacity_limit_falls_back_without_trying(jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    kid, pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "nb.ipynb")
    hold(fake_gpu, pid, 1024)
    await pause(jp_fetch)
    with fake.edit(fake_gpu) as data:
        data["others"] = [{"pid": os.getpid(), "device": 0, "bytes": 4000 * MIB}]
    jp_serverapp.web_app.settings["gkews_lifecycle"].backend.capacity_timeout = 0.5

    nb = (await resume(jp_fetch))["nb.ipynb"]
    assert nb["verdict"] == "restored-from-checkpoint", nb
    assert nb["why_restored"].startswith("the GPU stayed taken for 0 s (GPU 0 needs"), nb["why_restored"]
    assert f"held by pid {os.getpid()}" in nb["why_restored"]
    assert ["restore", pid] not in fake.read(fake_gpu)["calls"]  # a restore that cannot fit is never tried
    after = (await run_cell(jp_serverapp, kid, CHECK)).split()
    assert after[:2] == ["332833500", "live"] and after[2] != str(pid)


async def test_auto_without_the_extra_shuts_down_and_says_why(jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    """The default (auto, the real driver) on a GPU machine without the gpu extra: the pause works as before,
    and each notebook's message says how to get the suspend."""
    import sys
    monkeypatch.setitem(sys.modules, "cuda", None)  # as if cuda-bindings were not installed
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    monkeypatch.setattr(lifecycle, "gpu_count", 1)
    backend = lifecycle.backend
    backend.release_mode, backend.gpu_api = "auto", "nvidia"
    kid, _ = await start(jp_fetch, jp_serverapp, jp_root_dir, "nb.ipynb")
    paused = await pause(jp_fetch)
    nb = paused["nb.ipynb"]
    assert nb["status"] == "released" and kid not in jp_serverapp.kernel_manager
    assert nb["message"].startswith("released (checkpoint on disk); not suspended: GPU suspend is not available: "
                                    "the NVIDIA driver bindings are not installed"), nb["message"]
    assert 'pip install "jupyter-gkews[gpu]"' in nb["message"]
    assert paused[""]["message"] == "paused 1 notebook(s)"  # as before: nothing lives on


async def test_auto_on_a_machine_without_a_gpu_gives_no_gpu_advice(jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    """A laptop or a CPU-only server (no GPU in the session): a pause shuts the kernels down without telling
    every notebook to install the GPU extra."""
    import sys
    monkeypatch.setitem(sys.modules, "cuda", None)
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    monkeypatch.setattr(lifecycle, "gpu_count", 0)
    lifecycle.backend.release_mode, lifecycle.backend.gpu_api = "auto", "nvidia"
    kid, _ = await start(jp_fetch, jp_serverapp, jp_root_dir, "nb.ipynb")
    nb = (await pause(jp_fetch))["nb.ipynb"]
    assert nb["status"] == "released" and kid not in jp_serverapp.kernel_manager
    assert nb["message"] == "released (checkpoint on disk)", nb["message"]


async def test_a_cell_run_while_suspended_runs_after_the_verify(jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    """The kernel lives on while suspended, so a cell sent meanwhile waits in it; the resume must verify the
    state the checkpoint saw, then run that cell: live-verified, and the cell's effect kept."""
    kid, pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "nb.ipynb")
    hold(fake_gpu, pid, 512)
    assert (await pause(jp_fetch))["nb.ipynb"]["status"] == "suspended"
    client, msg_id = await start_cell(jp_serverapp, kid, 'label = "while paused"; print(label)')
    nb = (await resume(jp_fetch))["nb.ipynb"]
    out, ran = await printed(client, msg_id, until_idle=True)
    client.stop_channels()
    assert nb["verdict"] == "live-verified", nb
    assert (out.strip(), ran) == ("while paused", True)
    assert (await run_cell(jp_serverapp, kid, CHECK)).split() == ["332833500", "while", "paused", str(pid)]


async def test_a_notebook_suspended_by_the_pause_refuses_checkpoint_restore_and_undo_until_resumed(
        jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    """Its kernel process lives on, held by the pause (its GPU state in host memory): a call into it from the
    page ("Checkpoint now", Restore, Rewind, kernel undo) would wait in that hold, for as long as the pause
    lasts, instead of saying why nothing happens."""
    gpu_kid, gpu_pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "gpu.ipynb")
    await start(jp_fetch, jp_serverapp, jp_root_dir, "cpu.ipynb")
    hold(fake_gpu, gpu_pid, 512)
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "gpu.ipynb"})
    assert r.code == 201, r.body
    saved = json.loads(r.body)["id"]
    paused = await pause(jp_fetch)
    assert paused["gpu.ipynb"]["status"] == "suspended" and paused["cpu.ipynb"]["status"] == "kept-running"
    for path in ("gpu.ipynb", "cpu.ipynb"):
        for route, body in (("checkpoints/now", {}), (f"checkpoints/{saved}/restore", {}),
                            ("checkpoints/rewind", {"cell": 1}), ("checkpoints/auto", {"action": "on"})):
            r = await asyncio.wait_for(post(jp_fetch, route, {"notebook": path, **body}), 30)
            assert r.code == 409, (path, route, r.code, r.body)
            assert f"'{path}' is paused" in json.loads(r.body)["message"] and "Resume" in json.loads(r.body)["message"]
    await resume(jp_fetch)
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "gpu.ipynb"})
    assert r.code == 201, r.body


async def test_a_suspended_kernel_that_dies_while_paused_is_said_and_its_successor_keeps_its_cells(
        jp_fetch, jp_serverapp, jp_root_dir, fake_gpu):
    """Suspend moves GPU memory into host memory, so the OOM killer may end a suspended kernel. The status says
    so at once (not "suspended in host memory" on), and the kernel Jupyter's restarter starts in its place is
    where the resume restores the checkpoint: what its user ran there meanwhile is kept, not thrown away."""
    from test_lifecycle_holes import restarted
    kid, pid = await start(jp_fetch, jp_serverapp, jp_root_dir, "gpu.ipynb")
    hold(fake_gpu, pid, 1024)
    assert (await pause(jp_fetch))["gpu.ipynb"]["status"] == "suspended"

    os.kill(pid, 9)
    while "died while paused" not in (await status(jp_fetch))["notebooks"][0].get("message", ""):
        await asyncio.sleep(0.1)
    s = await status(jp_fetch)
    assert s["state"] == "paused" and f"gpu.ipynb: its kernel process {pid} died while paused" in s["message"]
    await restarted(jp_serverapp, kid)
    assert (await run_cell(jp_serverapp, kid, "meanwhile = 42\nprint('weights' in globals())")).strip() == "False"

    nb = (await resume(jp_fetch))["gpu.ipynb"]
    assert nb["verdict"] == "restored-from-checkpoint" and f"its kernel process {pid} died while paused" in \
        nb["why_restored"], nb
    assert (await run_cell(jp_serverapp, kid, "print(sum(weights), label, meanwhile)")).split() == \
        ["332833500", "live", "42"]
