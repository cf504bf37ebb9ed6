"""Helpers for tests against a real jupyter_server with the extension and real ipykernel kernels."""
from __future__ import annotations

import asyncio
import json
import os
import posixpath
import uuid

import nbformat

from jupyter_gkews.kernelready import kernel_ready, own_client


async def open_notebook(jp_fetch, root_dir, path: str, kernel_name: str = "python3",
                        placeholder: bool = False) -> dict:
    """What JupyterLab does when a user opens a notebook: a file, then a session with a kernel. placeholder:
    as JupyterLab 4's SessionContext does it, the session started at <folder>/<uuid4> and then moved to the
    notebook's path (PATCH)."""
    target = root_dir / path
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(), str(target))
    start = posixpath.join(posixpath.dirname(path), str(uuid.uuid4())) if placeholder else path
    r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": start, "name": target.name, "type": "notebook", "kernel": {"name": kernel_name}}))
    session = json.loads(r.body)
    if placeholder:
        r = await jp_fetch("api", "sessions", session["id"], method="PATCH", body=json.dumps({"path": path}))
        session = json.loads(r.body)
    return session


async def run_cell(serverapp, kernel_id: str, code: str, timeout: float = 120) -> str:
    """Execute code the way a user's cell runs; return its stdout. Raises on an error."""
    await server_watching(serverapp, kernel_id)
    client = own_client(serverapp.kernel_manager.get_kernel(kernel_id))
    client.start_channels()
    out = []
    try:
        await kernel_ready(client, timeout=60)  # jupyter_client's wait_for_ready waits while IOPub is busy

        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
        reply = await client.execute_interactive(code, output_hook=hook, timeout=timeout)
    finally:
        client.stop_channels()
    if reply["content"]["status"] != "ok":
        raise AssertionError(f"cell failed: {''.join(out)}")
    return "".join(out)


async def status(jp_fetch) -> dict:
    return json.loads((await jp_fetch("gkews", "status")).body)


async def wait_for(jp_fetch, states: tuple[str, ...], timeout: float = 180) -> dict:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        s = await status(jp_fetch)
        if s["state"] in states and s["state"] not in ("pausing", "resuming"):
            return s
        if loop.time() > deadline:
            raise AssertionError(f"still {s['state']}/{s['phase']} after {timeout}s: {s['message']}")
        await asyncio.sleep(0.1)


async def post(jp_fetch, action: str, body=None, **kwargs):
    return await jp_fetch("gkews", action, method="POST", body=json.dumps(body) if body is not None else "",
                          raise_error=False, **kwargs)


async def events(jp_fetch) -> list[dict]:
    return json.loads((await jp_fetch("gkews", "events")).body)["events"]


def saving_started(gate) -> bool:
    """Has a kernel that holds SLOW_SAVE's value begun to pickle it (so a save is under way in it)?"""
    return os.path.exists(f"{gate}.saving")


async def wait_until(condition, what: str, timeout: float = 30) -> None:
    """Poll condition() on the event loop until it holds; fail naming what it waited for."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"waited {timeout}s for {what}")
        await asyncio.sleep(0.05)


async def wait_kernel_state(serverapp, kernel_id: str, state: str, timeout: float = 30) -> None:
    """Poll the server's view of a kernel's execution_state (as the activity tracker sets it)."""
    if state == "idle":
        await server_sees_idle(serverapp, kernel_id, timeout)
        return
    await wait_until(lambda: serverapp.kernel_manager.get_kernel(kernel_id).execution_state == state,
                     f"kernel {kernel_id} to be {state}", timeout)


async def server_watching(serverapp, kernel_id: str) -> None:
    """A kernel just started: until the server's activity tracker has seen it. The tracker reads IOPub on a
    socket of its own that connects once the kernel listens, and a status published before that is lost: a
    cell sent at once (a test's first) ran while the server still said "starting", and a wait for it to say
    "busy" never ended (a CI run under load). A held kernel, or one the server has seen, is not waited for."""
    if serverapp.kernel_manager.get_kernel(kernel_id).execution_state == "starting":
        await server_sees_idle(serverapp, kernel_id)


async def server_sees_idle(serverapp, kernel_id: str, timeout: float = 30) -> None:
    """Until the server's activity tracker says the kernel is idle. After a test's first cell it once stayed
    on another state on a loaded CI machine (twice in some thirty runs, never here since): the tracker, which
    reads IOPub on its own socket, had not seen the cell's last status. A kernel_info request every 5 s
    gives it a busy/idle pair to see; a kernel really running a cell stays busy through it."""
    kernel = serverapp.kernel_manager.get_kernel(kernel_id)
    loop = asyncio.get_running_loop()
    deadline, nudge = loop.time() + timeout, loop.time() + 5
    while kernel.execution_state != "idle":
        if loop.time() > deadline:
            raise AssertionError(f"waited {timeout}s for kernel {kernel_id} to be idle (the server says "
                                 f"{kernel.execution_state!r})")
        if loop.time() > nudge:
            client = own_client(kernel)
            client.start_channels()
            try:
                await kernel_ready(client, timeout=10)
            finally:
                client.stop_channels()
            nudge = loop.time() + 5
        await asyncio.sleep(0.05)


def gkews_server_config(tmp_path, **settings) -> dict:
    """jp_server_config of a server with the extension on throw-away checkpoint and state directories
    (no unauthenticated access); settings: more GkewsApp traits."""
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gkews": True}, "allow_unauthenticated_access": False},
            "GkewsApp": {"checkpoint_root": str(tmp_path / "ckpt"), "state_dir": str(tmp_path / "state"), **settings}}


#: a cell defining a variable whose pickling waits for the gate file: the checkpoint of its notebook takes as
#: long as the test wants (format it with gate=path)
SLOW_SAVE = '''
import os, time
class Slow:
    def __reduce__(self):
        open({gate!r} + ".saving", "w").close()  # saving_started() sees it
        while not os.path.exists({gate!r}):
            time.sleep(0.05)
        return (int, (0,))
slow = Slow()
'''
