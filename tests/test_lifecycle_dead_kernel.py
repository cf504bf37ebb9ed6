"""A resume that finds the notebook's kernel dead (killed during the resume before it), on a real server with
real kernels."""
from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
import tornado.httpclient

from kernels import SLOW_RESTORE
from serverkit import gkews_server_config, open_notebook, post, run_cell, status, wait_for, wait_until

from jupyter_gkews.bridge import kernel_pid
from jupyter_gkews.errors import Conflict


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    config = gkews_server_config(tmp_path, kernel_call_timeout=120.0)
    config["LocalBackend"] = {"dead_kernel_wait": 1.0}
    config["KernelRestarter"] = {"time_to_dead": 600.0}  # the restarter would bring it back after 10 min
    return config


async def phase(jp_fetch, wanted: str, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (await status(jp_fetch))["phase"] != wanted:
        assert loop.time() < deadline, f"no phase {wanted} after {timeout}s"
        await asyncio.sleep(0.1)


async def resuming_into_a_slow_restore(jp_fetch, jp_serverapp, jp_root_dir, gate) -> str:
    """a.ipynb (x = 41) paused, and its resume restoring into its kernel until the gate opens; its kernel id."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 41\n" + SLOW_RESTORE.format(gate=str(gate)) + "\nslow = SlowRestore()")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    assert (await post(jp_fetch, "resume")).code == 202
    await phase(jp_fetch, "verifying")
    reached = gate.parent / (gate.name + ".reached")
    await wait_until(reached.exists, "the restore to reach the slow variable", timeout=120)
    return a


async def test_resuming_again_right_after_the_kernel_died_in_a_resume_restores_it(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """The kernel was killed while the resume restored into it: that resume failed, rightly. Resume at once
    again: it restored into the dead kernel (the server's restarter had not brought it back yet) and failed
    the same way, until a resume some seconds later. (The restarter is slowed here so that the second
    resume always finds the kernel dead.)"""
    gate = tmp_path / "gate"
    a = await resuming_into_a_slow_restore(jp_fetch, jp_serverapp, jp_root_dir, gate)
    km = jp_serverapp.kernel_manager
    os.kill(kernel_pid(km.get_kernel(a)), signal.SIGKILL)
    after = await wait_for(jp_fetch, ("active", "failed"), timeout=60)
    [nb] = after["notebooks"]  # failed, and still to resume
    assert nb["verdict"] == "failed" and "died" in json.dumps(nb), nb
    # the advice agrees with the session's message ("Resume brings them back"): it said to restore by hand
    assert nb["next_step"].startswith(f"resume again: its checkpoint {nb['checkpoint']} is kept"), nb
    assert "Resume brings" in after["message"], after["message"]

    gate.touch()
    assert (await post(jp_fetch, "resume")).code == 202  # at once
    resumed = await wait_for(jp_fetch, ("active", "failed"), timeout=120)
    assert resumed["state"] == "active", resumed["message"]
    [nb] = resumed["notebooks"]
    assert nb["verdict"] == "restored-from-checkpoint" and "x" in nb["restored"], nb
    assert "next_step" not in nb, nb  # the failed resume's advice went with it
    assert "42" in await run_cell(jp_serverapp, a, "print(x + 1)")


async def test_a_rename_during_the_resume_s_restore_ends_it_as_usual(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """The resume kept its held kernels by notebook path: a rename while it restored failed it with
    KeyError: 'c.ipynb', after the restore had worked, and never let the kernel go."""
    gate = tmp_path / "gate"
    a = await resuming_into_a_slow_restore(jp_fetch, jp_serverapp, jp_root_dir, gate)
    await jp_fetch("api", "contents", "a.ipynb", method="PATCH", body=json.dumps({"path": "c.ipynb"}))
    gate.touch()
    resumed = await wait_for(jp_fetch, ("active", "failed"), timeout=120)
    assert resumed["state"] == "active", resumed["message"]
    [nb] = resumed["notebooks"]
    assert (nb["path"], nb["verdict"]) == ("c.ipynb", "restored-from-checkpoint"), json.dumps(nb)
    assert "42" in await run_cell(jp_serverapp, a, "print(x + 1)")
    # its kernel had no session yet (the resume makes it): it was not told, and saved under a.ipynb afterwards
    await asyncio.wait_for(jp_serverapp.web_app.settings["gkews_renames"].idle(), 120)
    assert "notebook 'c.ipynb'" in await run_cell(jp_serverapp, a, "%gkews_checkpoint status")


@pytest.mark.parametrize("action", ["restart", "interrupt"])
async def test_a_restart_or_an_interrupt_during_the_restore_is_refused_and_the_resume_ends_restored(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path, action):
    """docs/rest-api.md promises 409 "is being resumed" while the resume runs, but the kernel was in the kernel
    manager already: the restart went through (the restore was lost, the notebook failed), and an interrupt
    reaching a kernel still starting killed it, with nothing said of the interrupt."""
    gate = tmp_path / "gate"
    a = await resuming_into_a_slow_restore(jp_fetch, jp_serverapp, jp_root_dir, gate)
    with pytest.raises(tornado.httpclient.HTTPClientError) as refused:
        await jp_fetch("api", "kernels", a, action, method="POST", body="")
    assert refused.value.code == 409
    message = json.loads(refused.value.response.body)["message"]
    assert "'a.ipynb' is being resumed: wait until its session is ready" in message and action in message, message
    gate.touch()
    resumed = await wait_for(jp_fetch, ("active", "failed"), timeout=120)
    [nb] = resumed["notebooks"]
    assert nb["verdict"] == "restored-from-checkpoint" and "x" in nb["restored"], nb
    assert "42" in await run_cell(jp_serverapp, a, "print(x + 1)")
    await jp_fetch("api", "kernels", a, action, method="POST", body="")  # after the resume: as ever


async def test_a_kernel_shut_down_during_its_restore_is_not_called_restored(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """A shutdown asked while the resume restored into the kernel: the restore finished in the old process,
    which then went, and the resume said "restored-from-checkpoint" of a kernel that held nothing (the next
    pause saved it empty). Now the notebook's resume failed, saying why, and a resume again brings it back."""
    gate = tmp_path / "gate"
    a = await resuming_into_a_slow_restore(jp_fetch, jp_serverapp, jp_root_dir, gate)
    [session] = json.loads((await jp_fetch("api", "sessions")).body)
    asked = asyncio.ensure_future(jp_fetch("api", "sessions", session["id"], method="DELETE"))
    changes = jp_serverapp.web_app.settings["gkews_lifecycle"].kernel_changes
    await wait_until(lambda: changes.count(a) == 1, "the server to begin the request", timeout=60)
    gate.touch()
    after = await wait_for(jp_fetch, ("active", "failed"), timeout=120)
    await asked
    [nb] = after["notebooks"]
    assert nb["verdict"] == "failed" and "restarted or shut down during the resume" in nb["error"], nb
    assert nb["next_step"].startswith("resume again"), nb

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"), timeout=120)
    [nb] = resumed["notebooks"]
    assert nb["verdict"] == "restored-from-checkpoint" and "x" in nb["restored"], nb
    assert "42" in await run_cell(jp_serverapp, nb["kernel_id"], "print(x + 1)")


async def test_a_restart_asked_the_instant_resume_is_accepted_is_told_the_notebook_is_being_resumed(
        jp_fetch, jp_serverapp, jp_root_dir):
    """Between the resume's first step (the state says resuming) and its work starting, a restart was told
    "is paused: resume it first", to someone who had just pressed Resume."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    accepted = await lifecycle.request_resume()
    assert accepted["state"] == "resuming", accepted
    with pytest.raises(Conflict) as refused:
        lifecycle.refuse_kernel_action(a, "restart")
    assert "'a.ipynb' is being resumed: wait until its session is ready" in str(refused.value), refused.value
    assert (await wait_for(jp_fetch, ("active", "failed"), timeout=120))["state"] == "active"
