"""Wait until a kernel answers a new client, bounded.

jupyter_client's `wait_for_ready` ends by draining IOPub until it has been quiet for 0.2 s, with no bound:
while a thread of the kernel keeps printing, or another client runs cell after cell, it never returns, and a
pause sat in "checkpointing" for as long. Here the kernel is ready once it answers `kernel_info` on the shell
channel and IOPub carries a message to this client (so its subscription is live and the request's output
will arrive); messages already queued are left to the request's reader, which keeps only its own.
"""
from __future__ import annotations

import asyncio
import queue


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
        if replied:
            try:  # the reply's busy/idle status, or anything else: IOPub reaches this client
                await client.get_iopub_msg(timeout=0.5)
                return
            except queue.Empty:
                pass  # subscribed too late for those messages: ask again
        if not await client.is_alive():
            raise RuntimeError("Kernel died before replying to kernel_info")
        if loop.time() >= deadline:
            raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
