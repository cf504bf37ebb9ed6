"""The holes an adversarial pass found in pause and resume (issue 11), each replayed on a real server with
real kernels: nothing a user ran is lost, no checkpoint a pause needs is deleted, nothing stays stuck.

A gate file makes a kernel slow on purpose: a cell (or the pickling of a variable) waits until the test
creates it, so every step happens in a known order without waiting on the clock.
"""
from __future__ import annotations

import asyncio
import errno
import json
import os
import queue
import resource
import signal
from pathlib import Path

import pytest

from kernel_state.pins import pinned
from serverkit import (SLOW_SAVE, events, open_notebook, post, run_cell, saving_started, status, wait_for,
                       server_watching, wait_kernel_state, wait_until)

from jupyter_gkews.cleanup import clean_checkpoints

#: a cell that runs until the gate opens (and, with ignore_sigint, cannot be interrupted)
WAIT_FOR_GATE = '''
import os, signal, time
if {ignore_sigint}:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
while not os.path.exists({gate!r}):
    time.sleep(0.05)
'''


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)  # each server exports its own root
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gkews": True}, "allow_unauthenticated_access": False},
            "GkewsApp": {"checkpoint_root": str(tmp_path / "ckpt"), "state_dir": str(tmp_path / "state"),
                         "busy_timeout": 2.0, "keep_last": 1, "kernel_call_timeout": 600.0}}


@pytest.fixture
def gate(tmp_path) -> Path:
    return tmp_path / "gate"


async def start_cell(serverapp, kernel_id: str, code: str):
    """Send a cell as a second client would, without waiting for the kernel (it may be held); a kernel just
    started only until the server watches it (serverkit.server_watching)."""
    await server_watching(serverapp, kernel_id)
    client = serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    return client, client.execute(code)


async def printed(client, msg_id: str, *, until_idle: bool) -> tuple[str, bool]:
    """What the cell printed so far (or until it finished), and whether it started to run (a kernel
    broadcasts execute_input when it does; an aborted request gets none)."""
    out, ran, idle = [], False, False
    while not idle:
        try:
            msg = await client.get_iopub_msg(timeout=60 if until_idle else 1)
        except queue.Empty:
            break
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        ran = ran or msg["msg_type"] == "execute_input"
        idle = until_idle and msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
    return "".join(out), ran


async def until(jp_fetch, check, timeout: float = 120) -> dict:
    """Poll the status until check(status) holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        s = await status(jp_fetch)
        if check(s):
            return s
        if loop.time() > deadline:
            raise AssertionError(f"condition not met after {timeout}s: {s['state']}/{s['phase']}: {s['message']}")
        await asyncio.sleep(0.1)


def first_checkpointed(s: dict) -> bool:
    return s["state"] == "pausing" and s["notebooks"][0]["status"] == "checkpointed"


async def two_notebooks_pausing(jp_fetch, jp_serverapp, jp_root_dir, gate):
    """a.ipynb (x = 1) and b.ipynb (a slow save); a pause of both, stopped while b saves."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    b = (await open_notebook(jp_fetch, jp_root_dir, "b.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 1")
    await run_cell(jp_serverapp, b, SLOW_SAVE.format(gate=str(gate)))
    r = await post(jp_fetch, "pause", {"notebooks": ["a.ipynb", "b.ipynb"]})
    assert r.code == 202, r.body
    return a, b, await until(jp_fetch, first_checkpointed)


async def test_a_kernel_restarted_after_its_checkpoint_is_named_not_checkpointed_again(
        jp_fetch, jp_serverapp, jp_root_dir, gate):
    """a.ipynb checkpointed, then its kernel restarted while b.ipynb still saved: the new process was not
    held, a cell ran in it, the release ended it, and nothing said so. The checkpoint (the user's state)
    is what the resume brings back, and a.ipynb's warnings say what was not saved."""
    a, b, s = await two_notebooks_pausing(jp_fetch, jp_serverapp, jp_root_dir, gate)
    await jp_fetch("api", "kernels", a, "restart", method="POST", body="")
    await run_cell(jp_serverapp, a, "x = 'typed after the restart'")
    gate.touch()
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    nb = next(n for n in paused["notebooks"] if n["path"] == "a.ipynb")
    assert nb["status"] == "released" and nb["checkpoint"] == s["notebooks"][0]["checkpoint"]
    assert any(w.startswith("its kernel restarted after its checkpoint") for w in nb.get("warnings", [])), nb
    assert "notebook-checkpointed-again" not in [e["event"] for e in await events(jp_fetch)]
    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    assert (await run_cell(jp_serverapp, a, "print(x)")).strip() == "1"


async def test_a_server_stopped_mid_pause_counts_the_release_from_its_stop_not_from_the_restart(
        jp_fetch, jp_serverapp, jp_root_dir, gate, monkeypatch):
    """Stopped (SIGTERM) while b.ipynb saved, the server shut the kernels down: the GPUs were free from then on,
    but the restarted server said the environment stopped when it started (hours released came out short)."""
    a, b, s = await two_notebooks_pausing(jp_fetch, jp_serverapp, jp_root_dir, gate)
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    monkeypatch.setattr(lifecycle, "stop_wait", 0.1)
    await lifecycle.shutdown()  # what the stopping server does before it shuts the kernels down
    stopped = lifecycle.state["timeline"]["environment_stopped"]
    assert s["timeline"]["pause_requested"] <= stopped
    gate.touch()
    lifecycle.load()  # the restarted server, on the state on disk
    after = await status(jp_fetch)
    assert after["state"] == "paused" and after["timeline"]["environment_stopped"] == stopped, after
    recovered = [e for e in await events(jp_fetch) if e["event"] == "recovered-interrupted-pause"][-1]
    assert recovered["timeline"]["environment_stopped"] == stopped <= recovered["time"]


# -- problem 2 and 3: a pause is atomic per notebook; what it needs is pinned ------------------------------
async def test_a_cell_sent_to_a_checkpointed_notebook_waits_and_its_checkpoint_is_pinned(
        jp_fetch, jp_serverapp, jp_root_dir, gate, tmp_path):
    a, b, s = await two_notebooks_pausing(jp_fetch, jp_serverapp, jp_root_dir, gate)
    needed = s["notebooks"][0]["checkpoint"]
    client, msg_id = await start_cell(jp_serverapp, a, "x = 999; print(x)")

    # the pause is still running: its fresh checkpoint cannot be deleted, by REST or in the store
    r = await jp_fetch("gkews", "checkpoints", needed, method="DELETE", raise_error=False)
    assert r.code == 409 and "resumes from" in json.loads(r.body)["message"], r.body
    assert needed in pinned(str(tmp_path / "ckpt"))

    gate.touch()
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused" and paused["message"].startswith("paused 2"), paused["message"]
    out, ran = await printed(client, msg_id, until_idle=False)
    client.stop_channels()
    assert (out, ran) == ("", False)  # the cell never ran: it did not print 999 and then vanish

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    assert (await run_cell(jp_serverapp, a, "print(x)")).strip() == "1"
    assert pinned(str(tmp_path / "ckpt")) == {}  # active again: nothing is pinned any more


async def test_a_cell_run_after_the_hold_ended_is_checkpointed_again(jp_fetch, jp_serverapp, jp_root_dir, gate):
    a, b, s = await two_notebooks_pausing(jp_fetch, jp_serverapp, jp_root_dir, gate)
    first = s["notebooks"][0]["checkpoint"]
    client, msg_id = await start_cell(jp_serverapp, a, "x = 999; print(x)")
    os.unlink(Path(jp_serverapp.runtime_dir) / f"gkews-hold-{a}")  # the hold ends (as at its bound): the cell runs
    out, ran = await printed(client, msg_id, until_idle=True)
    client.stop_channels()
    assert out.strip() == "999" and ran

    gate.touch()
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    assert paused["notebooks"][0]["checkpoint"] != first  # taken again after the cell
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    assert (await run_cell(jp_serverapp, a, "print(x)")).strip() == "999"


# -- problem 3 and 10: reopened while paused; no path deletes the checkpoint; resume into the reopened kernel
async def test_reopened_paused_notebook_keeps_its_checkpoint_and_resumes_into_its_kernel(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 1")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    needed = paused["notebooks"][0]["checkpoint"]

    r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": "a.ipynb", "name": "a.ipynb", "type": "notebook", "kernel": {"name": "python3"}}))
    reopened = json.loads(r.body)["kernel"]["id"]
    await run_cell(jp_serverapp, reopened, "x = 2")
    for _ in range(2):  # keep_last=1: retention would delete the paused checkpoint
        assert (await post(jp_fetch, "checkpoints/now", {"notebook": "a.ipynb"})).code == 201
    out = await run_cell(jp_serverapp, reopened, f'''
from kernel_state import checkpoint
try:
    checkpoint.delete({needed!r}, notebook="a.ipynb")
except Exception as exc:
    print(type(exc).__name__, exc)''')
    assert out.startswith("CheckpointPinned") and "resume first" in out, out
    cleaned = clean_checkpoints(str(tmp_path / "ckpt"), keep_last=1, max_bytes=0, max_age_days=0)
    assert needed not in cleaned["deleted"].get("a.ipynb", [])
    r = await jp_fetch("gkews", "checkpoints", needed, method="DELETE", raise_error=False)
    assert r.code == 409
    listed = json.loads((await jp_fetch("gkews", "checkpoints", params={"notebook": "a.ipynb"})).body)
    assert needed in [c["id"] for c in listed["checkpoints"]]

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    nb = resumed["notebooks"][0]
    assert nb["verdict"] == "restored-from-checkpoint"
    # the work done in the reopened kernel is replaced, and the resume says so, by name
    assert nb["why_restored"] == "reopened while paused: restored into the kernel it was reopened with", nb
    assert "the checkpoint's values replaced the ones this kernel held: x" in nb["warnings"], nb
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    assert [(x["path"], x["kernel"]["id"]) for x in sessions] == [("a.ipynb", reopened)]
    assert jp_serverapp.kernel_manager.list_kernel_ids() == [reopened]  # no kernel leaked
    assert (await run_cell(jp_serverapp, reopened, "print(x)")).strip() == "1"
    r = await jp_fetch("gkews", "checkpoints", needed, method="DELETE", raise_error=False)
    assert r.code == 204  # resumed: no longer pinned


# -- problem 4: a full state volume ------------------------------------------------------------------------
class FileSizeLimit:
    """RLIMIT_FSIZE on this process (the server's): every write that grows a file fails with EFBIG, as on
    a full volume; the kernels are other processes and keep writing their checkpoints."""

    def __enter__(self):
        self.saved = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, self.saved[1]))

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_FSIZE, self.saved)


async def test_a_full_state_volume_refuses_the_pause_and_frees_the_claim(jp_fetch, jp_serverapp, jp_root_dir, gate):
    a, b, s = await two_notebooks_pausing(jp_fetch, jp_serverapp, jp_root_dir, gate)
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    lifecycle.record_retry_interval = 0.2
    with FileSizeLimit():  # the volume fills up in the middle of the pause
        gate.touch()
        failed = await wait_for(jp_fetch, ("paused", "failed"))
        assert failed["state"] == "failed" and "could not be recorded" in failed["message"], failed["message"]
        on_disk = lifecycle.store.load()["state"]
        assert on_disk == "pausing"  # what a server restarted now would find: a pause to finish
    assert (await run_cell(jp_serverapp, a, "x = 2; print(x)")).strip() == "2"  # not held any more
    # space is back: the failure is written, so that a restarted server does not finish that pause
    await wait_until(lambda: lifecycle.store.load()["state"] == "failed", "the failure to be written")
    assert "could not be recorded" not in (await status(jp_fetch))["message"]

    with FileSizeLimit():  # a pause that cannot even be recorded is refused, and changes nothing
        r = await post(jp_fetch, "pause")
    assert r.code == 507, r.body
    assert "cannot be written" in json.loads(r.body)["message"]
    assert (await status(jp_fetch))["state"] == "failed"

    # space is back: the next pause works without a restart
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]


# -- problem 5: a kernel that dies during its checkpoint ---------------------------------------------------
@pytest.mark.parametrize("death", ["sigkill", "rest-delete", "sigstop"])
async def test_a_kernel_dying_during_its_checkpoint_fails_the_pause_within_seconds(
        jp_fetch, jp_serverapp, jp_root_dir, gate, death):
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    pid = int(await run_cell(jp_serverapp, a, SLOW_SAVE.format(gate=str(gate)) + "print(os.getpid())"))
    assert (await post(jp_fetch, "pause")).code == 202
    await wait_until(lambda: saving_started(gate), "the save to start")
    if death == "sigkill":
        os.kill(pid, signal.SIGKILL)
    elif death == "sigstop":  # the process lives, but answers nothing, not even its heartbeat
        os.kill(pid, signal.SIGSTOP)
    else:
        await jp_fetch("api", "kernels", a, method="DELETE")
    # kernel_call_timeout is 600 s: the death is seen by the process, restart or heartbeat watch instead
    failed = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)
    assert failed["state"] == "failed", failed["message"]
    assert "No notebook could be checkpointed" in failed["message"]
    if death == "rest-delete":
        assert "the kernel of a.ipynb is gone" in failed["message"], failed["message"]
        assert "every kernel is still running" not in failed["message"]
    elif death == "sigstop":
        os.kill(pid, signal.SIGKILL)
        assert "stopped answering its heartbeat" in failed["message"], failed["message"]
    else:
        assert "died" in failed["message"] or "restarted" in failed["message"], failed["message"]
        # not "every kernel is still running": what it held died with its process
        assert "the kernel of a.ipynb restarted during the pause" in failed["error"]["next_step"], failed["error"]


async def test_a_kernel_shut_down_during_its_checkpoint_is_named_gone_not_interrupted(
        jp_fetch, jp_serverapp, jp_root_dir, gate):
    """DELETE api/kernels interrupts the kernel before it asks it to shut down: the save's KeyboardInterrupt
    came back while the kernel was still listed, and the pause said "KeyboardInterrupt ... every kernel is
    still running". The shutdown is held here until the pause has failed, which is the order load produced."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, SLOW_SAVE.format(gate=str(gate)))
    kernel, lifecycle = jp_serverapp.kernel_manager.get_kernel(a), jp_serverapp.web_app.settings["gkews_lifecycle"]
    ask_to_shut_down = kernel._async_request_shutdown

    async def once_the_pause_failed(*args, **kwargs):
        while lifecycle.state["state"] != "failed":
            await asyncio.sleep(0.05)
        return await ask_to_shut_down(*args, **kwargs)

    kernel._async_request_shutdown = once_the_pause_failed
    assert (await post(jp_fetch, "pause")).code == 202
    await wait_until(lambda: saving_started(gate), "the save to start")
    deleting = asyncio.ensure_future(jp_fetch("api", "kernels", a, method="DELETE"))
    failed = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)
    await deleting
    assert failed["state"] == "failed", failed["message"]
    assert "a.ipynb: its kernel was shut down during its checkpoint" in failed["message"], failed["message"]
    assert "the kernel of a.ipynb is gone" in failed["message"], failed["message"]
    assert "KeyboardInterrupt" not in failed["message"] and "every kernel is still running" not in failed["message"]


async def test_a_notebook_whose_kernel_was_shut_down_during_its_checkpoint_is_not_called_still_running(
        jp_fetch, jp_serverapp, jp_root_dir, gate):
    """The pause of a.ipynb went on; b.ipynb's kernel was shut down (its session closed) during b's checkpoint,
    and the message said "paused 1 notebook(s); still running, not paused: b.ipynb (its kernel was shut down...)"."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    b = await open_notebook(jp_fetch, jp_root_dir, "b.ipynb")
    await run_cell(jp_serverapp, a, "x = 1")
    await run_cell(jp_serverapp, b["kernel"]["id"], SLOW_SAVE.format(gate=str(gate)))
    assert (await post(jp_fetch, "pause")).code == 202
    await wait_until(lambda: saving_started(gate), "b's save to start")
    await jp_fetch("api", "sessions", b["id"], method="DELETE")
    paused = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)
    assert paused["state"] == "paused", paused["message"]
    assert "not paused, its kernel gone: b.ipynb (" in paused["message"], paused["message"]
    assert "still running" not in paused["message"], paused["message"]


async def test_a_kernel_that_restarted_while_the_pause_waited_is_not_checkpointed_empty(
        jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    """Its cell crashed it while the pause waited (Wait and pause): the server restarted it, and the pause
    checkpointed the new, empty kernel, said "paused", and the resume said "0 variables restored"."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 41")
    lifecycle, restarted = jp_serverapp.web_app.settings["gkews_lifecycle"], asyncio.Event()
    waits = lifecycle._wait_idle

    async def wait_idle_once_restarted(nb, interrupt):  # the restart lands while the pause waits
        await restarted.wait()
        return await waits(nb, interrupt)

    monkeypatch.setattr(lifecycle, "_wait_idle", wait_idle_once_restarted)
    assert (await post(jp_fetch, "pause")).code == 202
    await jp_fetch("api", "kernels", a, "restart", method="POST", body="")
    restarted.set()
    failed = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)
    assert failed["state"] == "failed", failed["message"]
    assert "a.ipynb: its kernel restarted during the pause" in failed["message"], failed["message"]
    assert a in jp_serverapp.kernel_manager  # the new kernel runs on; nothing was pinned for it
    assert [e for e in await events(jp_fetch) if e["event"] == "notebook-checkpointed"] == []


# -- problem 6: interrupt with a cell that ignores SIGINT --------------------------------------------------
def test_a_progress_line_a_printing_thread_cut_into_never_fails_the_pause(monkeypatch):
    """The test below failed on a loaded CI run: print() wrote the progress line and its end apart, a thread's
    dot landed between them (`{"gkews_progress": ...}.`), and json.loads' "Extra data" failed the pause. The
    kernel writes the line in one write now, and the server reads what it can and skips the rest."""
    import io

    from jupyter_gkews.bridge import _progress_hook
    from kernel_state import api
    seen = []
    hook = _progress_hook(seen.append)
    hook({"msg_type": "stream", "content": {"text": '..{"gkews_progress": {"variables_done": 1}}.\n'
                                                    '{"gkews_progress": {"variab.\n.{"gkews_progress": 3}\n'}})
    assert seen == [{"variables_done": 1}]

    writes = []

    class Stream(io.StringIO):
        def write(self, text):
            writes.append(text)
            return len(text)
    monkeypatch.setattr("sys.stdout", Stream())
    api._print_progress({"variables_done": 2})
    (line,) = writes
    assert line == '\n{"gkews_progress": {"variables_done": 2}}\n'


async def test_a_kernel_whose_thread_keeps_printing_is_paused_and_its_variables_come_back(
        jp_fetch, jp_serverapp, jp_root_dir):
    """An idle kernel with a thread that prints a progress dot every 30 ms (a logger, a data loader): the pause sat
    in "checkpointing" for as long as the printing went on (jupyter_client's wait_for_ready drains IOPub until it
    is quiet), refusing every other request meanwhile."""
    s = await open_notebook(jp_fetch, jp_root_dir, "chatty.ipynb")
    kid = s["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "import threading, time\nresult = 42\n"
                                      "def chatter():\n    while True:\n        print('.', end='', flush=True)\n"
                                      "        time.sleep(0.03)\n"
                                      "threading.Thread(target=chatter, daemon=True).start()")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"), timeout=120)
    assert paused["state"] == "paused" and "result" in paused["notebooks"][0]["saved"], paused
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"), timeout=120)
    assert resumed["notebooks"][0]["verdict"] == "restored-from-checkpoint", resumed
    assert (await run_cell(jp_serverapp, kid, "print(result)")).strip() == "42"


async def test_an_interrupt_the_cell_ignores_is_bounded(jp_fetch, jp_serverapp, jp_root_dir, gate):
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    client, msg_id = await start_cell(jp_serverapp, a, WAIT_FOR_GATE.format(gate=str(gate), ignore_sigint=True))
    await wait_kernel_state(jp_serverapp, a, "busy")
    assert (await post(jp_fetch, "pause", {"interrupt": True})).code == 202
    failed = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)  # busy_timeout 2 s, one interrupt
    assert failed["state"] == "failed" and "ignored the interrupt" in failed["message"], failed["message"]
    assert failed["busy_timeout"] == 2.0  # the page's busy-cell dialog quotes this server's wait, not a default
    gate.touch()
    out, ran = await printed(client, msg_id, until_idle=True)
    client.stop_channels()
    assert ran  # the cell went on and ended on its own


# -- problem 8: a REST restore (or checkpoint) into a busy kernel ------------------------------------------
async def test_restore_into_a_busy_kernel_is_refused(jp_fetch, jp_serverapp, jp_root_dir, gate):
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 1")
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "a.ipynb"})
    saved = json.loads(r.body)["id"]
    client, msg_id = await start_cell(jp_serverapp, a, "x = 2\n" + WAIT_FOR_GATE.format(gate=str(gate),
                                                                                        ignore_sigint=False))
    await wait_kernel_state(jp_serverapp, a, "busy")
    for action in (f"checkpoints/{saved}/restore", "checkpoints/now"):
        r = await post(jp_fetch, action, {"notebook": "a.ipynb"})
        assert r.code == 409 and "is running a cell" in json.loads(r.body)["message"], r.body
    gate.touch()
    await printed(client, msg_id, until_idle=True)
    client.stop_channels()
    assert (await run_cell(jp_serverapp, a, "print(x)")).strip() == "2"  # what the cell computed stays


# -- problem 13: a notebook named twice, a backslash in its name, renamed while paused ---------------------
async def test_names_twice_backslash_and_rename_while_paused(jp_fetch, jp_serverapp, jp_root_dir):
    name = "run\\1.ipynb"
    kid = (await open_notebook(jp_fetch, jp_root_dir, name))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41")
    assert (await post(jp_fetch, "pause", {"notebooks": [name, name]})).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused" and paused["message"].startswith("paused 1 "), paused["message"]
    assert [nb["path"] for nb in paused["notebooks"]] == [name]

    await jp_fetch("api", "contents", name, method="PATCH", body=json.dumps({"path": "renamed.ipynb"}))
    moved = await until(jp_fetch, lambda s: s["notebooks"][0]["path"] == "renamed.ipynb")
    assert moved["state"] == "paused"

    assert (await post(jp_fetch, "resume", {"notebooks": ["renamed.ipynb", "renamed.ipynb"]})).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active" and "1 restored-from-checkpoint" in resumed["message"], resumed["message"]
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    assert [x["path"] for x in sessions] == ["renamed.ipynb"]
    assert (await run_cell(jp_serverapp, sessions[0]["kernel"]["id"], "print(x)")).strip() == "41"


# -- problem 15: notebooks a resume left behind are never dropped or overwritten -----------------------
async def test_notebooks_a_resume_left_behind_stay_resumable_and_are_never_overwritten(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """A resume of some notebooks, or one in which a notebook failed, used to end `active` with the rest
    out of reach (409), unpinned, then dropped or overwritten with an empty kernel by the next pause."""
    kids = {}
    for name, value in (("a.ipynb", "'a-val'"), ("b.ipynb", "'b-val'"), ("c.ipynb", "'c-val'")):
        kids[name] = (await open_notebook(jp_fetch, jp_root_dir, name))["kernel"]["id"]
        await run_cell(jp_serverapp, kids[name], f"x = {value}")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    ckpt = {nb["path"]: nb["checkpoint"] for nb in paused["notebooks"]}

    # a alone comes back; b and c wait, pinned
    assert (await post(jp_fetch, "resume", {"notebooks": ["a.ipynb"]})).code == 202
    s = await wait_for(jp_fetch, ("active", "failed"))
    assert s["state"] == "active" and "still to resume (Resume brings them back): b.ipynb, c.ipynb" in s["message"]
    assert set(pinned(str(tmp_path / "ckpt"))) == {ckpt["b.ipynb"], ckpt["c.ipynb"]}

    # b's manifest is damaged: its resume fails once (no resume could read it: it is lost, not retried), c waits
    manifest = next((tmp_path / "ckpt" / "notebooks").rglob(f"{ckpt['b.ipynb']}.json"))
    manifest.write_bytes(b"{damaged")
    assert (await post(jp_fetch, "resume", {"notebooks": ["b.ipynb"]})).code == 202
    s = await wait_for(jp_fetch, ("active", "failed"))
    by_path = {nb["path"]: nb for nb in s["notebooks"]}
    assert by_path["b.ipynb"]["status"] == "lost" and by_path["b.ipynb"]["verdict"] == "failed", by_path
    assert "still to resume (Resume brings them back): c.ipynb" in s["message"], s["message"]
    await run_cell(jp_serverapp, by_path["b.ipynb"]["kernel_id"], "x = 'b-redone'")  # its cells run again

    # a pause now takes a and b's new kernel; c is carried over, never checkpointed empty
    r = await post(jp_fetch, "pause", {"notebooks": ["c.ipynb"]})
    assert r.code == 409 and "still to be resumed" in r.body.decode()  # c never failed: resume it first
    assert (await post(jp_fetch, "pause")).code == 202
    s = await wait_for(jp_fetch, ("paused", "failed"))
    by_path = {nb["path"]: nb for nb in s["notebooks"]}
    assert s["state"] == "paused" and s["message"].startswith("paused 2 "), s["message"]
    assert by_path["c.ipynb"]["checkpoint"] == ckpt["c.ipynb"]

    assert (await post(jp_fetch, "resume")).code == 202
    s = await wait_for(jp_fetch, ("active", "failed"))
    assert s["state"] == "active" and "still to resume" not in s["message"], s["message"]
    sessions = {x["path"]: x["kernel"]["id"] for x in json.loads((await jp_fetch("api", "sessions")).body)}
    for name, value in (("a.ipynb", "a-val"), ("b.ipynb", "b-redone"), ("c.ipynb", "c-val")):
        assert (await run_cell(jp_serverapp, sessions[name], "print(x)")).strip() == value, name
    assert (await post(jp_fetch, "resume")).code == 409  # nothing is left to resume


# -- a newline in a notebook's file name (legal on POSIX) never breaks the one-line status message ---------
async def test_a_newline_in_a_notebook_name_stays_inside_one_line_of_status(jp_fetch, jp_serverapp, jp_root_dir, gate):
    odd = "two\nlines.ipynb"
    a = (await open_notebook(jp_fetch, jp_root_dir, odd))["kernel"]["id"]
    client, msg_id = await start_cell(jp_serverapp, a, WAIT_FOR_GATE.format(gate=str(gate), ignore_sigint=False))
    await wait_kernel_state(jp_serverapp, a, "busy")
    assert (await post(jp_fetch, "pause")).code == 202
    failed = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)  # busy_timeout 2 s: nothing paused
    assert failed["state"] == "failed" and "two\\nlines.ipynb" in failed["message"], failed["message"]
    assert "\n" not in failed["message"]
    assert [e["message"] for e in await events(jp_fetch) if e["event"] == "failed"] == [failed["message"]]
    assert failed["notebooks"][0]["path"] == odd  # the path itself is the file's name, as the contents API has it
    gate.touch()
    await printed(client, msg_id, until_idle=True)
    client.stop_channels()


async def test_a_newline_in_a_notebook_name_stays_inside_one_line_when_the_failure_cannot_be_written(
        jp_fetch, jp_serverapp, jp_root_dir, gate):
    """The fallback of a failure the state directory refused (a full volume) is one line too, and so are its
    reason and the event written once the volume takes it again."""
    odd = "two\nlines.ipynb"
    a = (await open_notebook(jp_fetch, jp_root_dir, odd))["kernel"]["id"]
    client, msg_id = await start_cell(jp_serverapp, a, WAIT_FOR_GATE.format(gate=str(gate), ignore_sigint=False))
    await wait_kernel_state(jp_serverapp, a, "busy")
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    lifecycle.record_retry_interval = 0.2
    save, full = lifecycle.store.save, [True]

    def save_unless_failed(state):  # only the failure finds the volume full: the notebook's path is in it
        if full[0] and state["state"] == "failed":
            raise OSError(errno.ENOSPC, "No space left on device")
        save(state)
    lifecycle.store.save = save_unless_failed
    try:
        assert (await post(jp_fetch, "pause")).code == 202
        failed = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)  # busy_timeout 2 s: nothing paused
        assert failed["state"] == "failed" and "could not be recorded" in failed["message"], failed["message"]
        assert "two\\nlines.ipynb" in failed["message"] and "\n" not in failed["message"], failed["message"]
        assert "\n" not in failed["error"]["reason"] + failed["error"]["next_step"], failed["error"]
        full[0] = False  # space is back: the failure is written, on one line
        await wait_until(lambda: lifecycle.store.load()["state"] == "failed", "the failure to be written")
        [written] = [e for e in await events(jp_fetch) if e["event"] == "failed"]
        assert "two\\nlines.ipynb" in written["message"] and "\n" not in written["message"] + written["reason"]
    finally:
        lifecycle.store.save = save
        gate.touch()
        await printed(client, msg_id, until_idle=True)
        client.stop_channels()


# -- problem 16: a notebook a pause left running (busy) can be paused later, as its message says -----------
async def test_a_notebook_left_running_by_a_pause_is_paused_by_the_next_one(jp_fetch, jp_serverapp, jp_root_dir, gate):
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    b = (await open_notebook(jp_fetch, jp_root_dir, "b.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 'a-val'")
    await run_cell(jp_serverapp, b, "y = 'b-val'")
    client, msg_id = await start_cell(jp_serverapp, b, WAIT_FOR_GATE.format(gate=str(gate), ignore_sigint=False))
    await wait_kernel_state(jp_serverapp, b, "busy")
    assert (await post(jp_fetch, "pause")).code == 202
    s = await wait_for(jp_fetch, ("paused", "failed"))
    by_path = {nb["path"]: nb for nb in s["notebooks"]}
    assert s["state"] == "paused" and by_path["b.ipynb"]["status"] == "busy", s
    assert "let it finish and pause again" in by_path["b.ipynb"]["error"]

    gate.touch()  # its cell ends; the pause it was told to make now works
    await printed(client, msg_id, until_idle=True)
    client.stop_channels()
    assert (await post(jp_fetch, "pause", {"notebooks": ["a.ipynb"]})).code == 409  # a is paused already
    assert (await post(jp_fetch, "pause")).code == 202
    s = await wait_for(jp_fetch, ("paused", "failed"))
    assert s["state"] == "paused" and s["message"].startswith("paused 1 "), s["message"]
    assert {nb["path"]: nb["status"] for nb in s["notebooks"]} == {"a.ipynb": "released", "b.ipynb": "released"}
    assert b not in jp_serverapp.kernel_manager  # its kernel (and GPU) released

    assert (await post(jp_fetch, "resume")).code == 202
    s = await wait_for(jp_fetch, ("active", "failed"))
    assert s["state"] == "active" and s["message"] == "resumed: 2 restored-from-checkpoint", s["message"]
    assert (await run_cell(jp_serverapp, a, "print(x)")).strip() == "a-val"
    assert (await run_cell(jp_serverapp, b, "print(y)")).strip() == "b-val"


async def restarted(serverapp, kernel_id: str, timeout: float = 60) -> None:
    """Wait until the kernel whose process died is alive again (a new process, started by the restarter)."""
    kernel = serverapp.kernel_manager.get_kernel(kernel_id)
    deadline = asyncio.get_running_loop().time() + timeout
    while not await kernel.is_alive():
        assert asyncio.get_running_loop().time() < deadline, f"kernel {kernel_id} was not restarted in {timeout}s"
        await asyncio.sleep(0.1)


#: a value whose restore ends the kernel process: a resume from its checkpoint fails (not for want of it)
# (os._exit is what a checkpoint never holds now: kernel_state/resources.py; a signal kills the process as well)
KILLS_ITS_RESTORE = """
class Bomb:
    def __reduce__(self):
        import signal
        return (signal.raise_signal, (signal.SIGKILL,))
bomb = Bomb()
"""


async def test_a_notebook_whose_resume_failed_is_paused_again_when_named(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """Its resume failed (its kernel died in the restore), the user re-ran its cells in the restarted kernel:
    naming it in a pause checkpoints that kernel (the old checkpoint stays in the store, unpinned); unnamed,
    it is carried over and the answer says how to take it."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "b.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 'old'\n" + KILLS_ITS_RESTORE)
    assert (await post(jp_fetch, "pause")).code == 202
    old = (await wait_for(jp_fetch, ("paused", "failed")))["notebooks"][0]["checkpoint"]
    assert (await post(jp_fetch, "resume")).code == 202
    s = await wait_for(jp_fetch, ("active", "failed"))
    assert s["notebooks"][0]["status"] == "failed", s
    kid = s["notebooks"][0]["kernel_id"]
    await restarted(jp_serverapp, kid)  # its process died in the restore: the server's restarter brings it back
    await run_cell(jp_serverapp, kid, "x = 'redone'")
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "b.ipynb"})  # its kernel runs: not "is paused"
    assert r.code == 409 and "is paused" not in r.body.decode(), r.body
    assert ("'b.ipynb' is still to be resumed from its checkpoint: its last resume failed (its error says why). "
            "Resume it first (GPU session: Resume), or name it in a pause to checkpoint the kernel it runs now "
            "instead; nothing was changed") in r.body.decode(), r.body

    r = await post(jp_fetch, "pause")
    assert r.code == 409 and "or name b.ipynb in a pause to checkpoint the kernel it runs now" in r.body.decode()
    assert (await post(jp_fetch, "pause", {"notebooks": ["b.ipynb"]})).code == 202
    s = await wait_for(jp_fetch, ("paused", "failed"))
    assert s["state"] == "paused" and s["notebooks"][0]["checkpoint"] != old, s
    assert set(pinned(str(tmp_path / "ckpt"))) == {s["notebooks"][0]["checkpoint"]}
    assert any(e.get("superseded") == {"b.ipynb": old} for e in await events(jp_fetch))
    assert (await post(jp_fetch, "resume")).code == 202
    s = await wait_for(jp_fetch, ("active", "failed"))
    kid = s["notebooks"][0]["kernel_id"]
    assert (await run_cell(jp_serverapp, kid, "print(x)")).strip() == "redone"


async def test_a_notebook_still_to_resume_follows_a_rename_while_active(jp_fetch, jp_serverapp, jp_root_dir):
    """After a resume of another notebook the state is `active`; a rename of the one left behind is followed
    too: it resumes at its new path, with its value, and no kernel is started for the old path."""
    for name, value in (("a.ipynb", 1), ("mv/b.ipynb", 2)):
        kid = (await open_notebook(jp_fetch, jp_root_dir, name))["kernel"]["id"]
        await run_cell(jp_serverapp, kid, f"x = {value}")
    assert (await post(jp_fetch, "pause")).code == 202
    await wait_for(jp_fetch, ("paused", "failed"))
    assert (await post(jp_fetch, "resume", {"notebooks": ["a.ipynb"]})).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"

    await jp_fetch("api", "contents", "mv/b.ipynb", method="PATCH", body=json.dumps({"path": "mv/b2.ipynb"}))
    await until(jp_fetch, lambda s: "mv/b2.ipynb" in [nb["path"] for nb in s["notebooks"]])
    assert (await post(jp_fetch, "resume")).code == 202
    s = await wait_for(jp_fetch, ("active", "failed"))
    assert s["state"] == "active" and "still to resume" not in s["message"], s["message"]
    sessions = {x["path"]: x["kernel"]["id"] for x in json.loads((await jp_fetch("api", "sessions")).body)}
    assert sorted(sessions) == ["a.ipynb", "mv/b2.ipynb"]
    assert (await run_cell(jp_serverapp, sessions["mv/b2.ipynb"], "print(x)")).strip() == "2"


async def test_a_notebook_deleted_while_paused_gets_no_kernel(jp_fetch, jp_serverapp, jp_root_dir):
    for name in ("keep.ipynb", "gone.ipynb"):
        kid = (await open_notebook(jp_fetch, jp_root_dir, name))["kernel"]["id"]
        await run_cell(jp_serverapp, kid, "x = 1")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    checkpoint = {nb["path"]: nb["checkpoint"] for nb in paused["notebooks"]}["gone.ipynb"]
    await jp_fetch("api", "contents", "gone.ipynb", method="DELETE")
    assert (await post(jp_fetch, "resume")).code == 202
    s = await wait_for(jp_fetch, ("active", "failed"))
    gone = {nb["path"]: nb for nb in s["notebooks"]}["gone.ipynb"]
    assert gone["status"] == "lost" and "was deleted while paused, so no kernel w" in gone["error"], gone
    assert f"--checkpoint {checkpoint}" in gone["next_step"] and "still to resume" not in s["message"]
    sessions = [x["path"] for x in json.loads((await jp_fetch("api", "sessions")).body)]
    assert sessions == ["keep.ipynb"]
    assert len(json.loads((await jp_fetch("api", "kernels")).body)) == 1


# -- problem 60: a full volume during a resume ---------------------------------------------------------------
async def test_a_resume_that_fails_after_starting_kernels_shuts_them_down_and_the_next_one_restores(
        jp_fetch, jp_serverapp, jp_root_dir):
    """The state volume filled as the resume reached verifying, after it had started the kernels: they stayed
    in their start hold, answering nothing, for 10 minutes, then ran cells on an empty namespace."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 'kept'")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    lifecycle.record_retry_interval = 0.2
    save, full = lifecycle.store.save, [True]

    def save_unless_verifying(state):  # the volume is full from the moment the kernels are up
        if full[0] and state.get("phase") == "verifying":
            raise OSError(errno.ENOSPC, "No space left on device")
        save(state)
    lifecycle.store.save = save_unless_verifying
    try:
        assert (await post(jp_fetch, "resume")).code == 202
        failed = await wait_for(jp_fetch, ("active", "failed"))
        assert failed["state"] == "failed", failed["message"]
        assert "The kernels it had started for a.ipynb are shut down again" in failed["message"], failed["message"]
        assert a not in jp_serverapp.kernel_manager
        assert not os.path.exists(lifecycle._hold_file(a))
    finally:
        full[0] = False
        lifecycle.store.save = save
    assert (await post(jp_fetch, "resume")).code == 202
    back = await wait_for(jp_fetch, ("active", "failed"))
    assert back["state"] == "active", back["message"]
    assert (await run_cell(jp_serverapp, a, "print(x)")).strip() == "kept"


async def test_a_full_checkpoint_volume_does_not_fail_a_resume_which_only_unpins(
        jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    """A resume reads the store and only removes pins: a pin file that could not be rewritten for want of a block
    failed a resume that had brought everything back ("Resume again" then found nothing to resume). The pins
    stay until the next change writes them."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 'kept'")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused"
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    checkpoint = paused["notebooks"][0]["checkpoint"]
    from jupyter_gkews.lifecycle import persistence
    write, full = persistence.write_pins, [True]

    def write_unless_full(root, owner, checkpoints):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        write(root, owner, checkpoints)
    monkeypatch.setattr(persistence, "write_pins", write_unless_full)
    assert (await post(jp_fetch, "resume")).code == 202
    back = await wait_for(jp_fetch, ("active", "failed"))
    assert back["state"] == "active", back["message"]
    assert (await run_cell(jp_serverapp, a, "print(x)")).strip() == "kept"
    assert checkpoint in pinned(lifecycle.checkpoint_root)  # kept a while longer: nothing lost
    full[0] = False
    assert (await post(jp_fetch, "pause")).code == 202  # the next change writes them
    again = await wait_for(jp_fetch, ("paused", "failed"))
    assert again["state"] == "paused" and set(pinned(lifecycle.checkpoint_root)) == {
        again["notebooks"][0]["checkpoint"]}


async def test_a_pin_that_cannot_be_written_fails_the_pause_naming_where_and_the_fix(
        jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 'kept'")
    from jupyter_gkews.lifecycle import persistence

    def full(root, owner, checkpoints):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(persistence, "write_pins", full)
    assert (await post(jp_fetch, "pause")).code == 202
    failed = await wait_for(jp_fetch, ("paused", "failed"))
    assert failed["state"] == "failed"
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    assert f"could not pin the checkpoints the paused notebooks resume from in {lifecycle.checkpoint_root}: " \
           "the disk is full" in failed["message"] and "Free space there" in failed["message"], failed["message"]
    assert (await run_cell(jp_serverapp, a, "print(x)")).strip() == "kept"  # it runs on
