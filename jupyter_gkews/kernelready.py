"""A client of a kernel with a session of its own, and a bounded wait until the kernel answers it.

jupyter_client's `wait_for_ready` ends by draining IOPub until it has been quiet for 0.2 s, with no bound:
while a thread of the kernel keeps printing, or another client runs cell after cell, it never returns, and a
pause sat in "checkpointing" for as long. Here the kernel is ready once it answers `kernel_info` on the shell
channel and IOPub brings this client the status of that request (the kernel is up, the subscription is live,
and the request's output will arrive); other messages are skipped or left to the request's reader, which
keeps only its own.
"""
from __future__ import annotations

import asyncio
import queue
import uuid


def own_client(kernel, prefix: str = ""):
    """A client of kernel with a session of its own. Message ids are the session's id, the pid and a count that
    starts at 0 with each client: clients sharing the kernel manager's session send the same ids again, and a
    request whose id an earlier client used lost its output (seen with ipykernel 7, after a restart)."""
    session = kernel.session.clone()
    session.session = prefix + uuid.uuid4().hex
    return kernel.client(session=session)


async def kernel_ready(client, timeout: float = 60.0) -> None:
    """Return once the kernel behind client (an async client, its channels started) answers; RuntimeError when
    it does not within timeout, or its process died."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        msg_id = client.kernel_info()
        replied = False
        while loop.time() < deadline:
            try:
                reply = await client.get_shell_msg(timeout=1)
            except queue.Empty:
                break  # ask again: the first request may have gone out before the socket was connected
            if reply["parent_header"].get("msg_id") == msg_id:
                replied = True
                break
        if replied and await _status_of(client, msg_id, min(deadline, loop.time() + 2)):
            return
        if not await client.is_alive():
            raise RuntimeError("Kernel died before replying to kernel_info")
        if loop.time() >= deadline:
            raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")


async def _status_of(client, msg_id: str, until: float) -> bool:
    """Whether IOPub brings this client the kernel's status for request msg_id before `until`: the kernel has
    started up (a kernel still starting answers on the shell but may not yet publish a cell's output) and the
    subscription is live. Other messages (another client's cells, a thread's prints) are skipped."""
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        try:
            msg = await client.get_iopub_msg(timeout=max(0.05, min(0.5, until - loop.time())))
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            return True
    return False
