"""A kernel whose running cell crashes it while the pause waits for the cell to end."""
from __future__ import annotations

import asyncio
import os
import signal

import pytest

from jupyter_gkews.bridge import kernel_pid
from serverkit import gkews_server_config, open_notebook, post, run_cell, server_watching, wait_for, wait_kernel_state


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path, busy_timeout=60.0)


async def test_a_cell_that_crashes_its_kernel_while_the_pause_waits_is_named(jp_fetch, jp_serverapp, jp_root_dir,
                                                                             tmp_path):
    """The server's tracker kept "busy" from the dead process (it missed the restarted one's first status, a
    CI run of the page's test): the pause said "still running a cell after 8 s" and waited its whole
    busy_timeout. It sees the new process, and says the kernel restarted during the pause."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "crash.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 1")
    await server_watching(jp_serverapp, kid)
    kernel = jp_serverapp.kernel_manager.get_kernel(kid)
    gate = tmp_path / "gate"
    client = kernel.client()
    client.start_channels()
    client.execute(f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)")
    await wait_kernel_state(jp_serverapp, kid, "busy")
    assert (await post(jp_fetch, "pause")).code == 202
    os.kill(kernel_pid(kernel), signal.SIGKILL)  # the cell crashes its kernel; the restarter starts another

    async def stale():  # what the tracker shows when it missed the new process's statuses
        while True:
            kernel.execution_state = "busy"
            await asyncio.sleep(0.01)
    keeper = asyncio.ensure_future(stale())
    try:
        s = await wait_for(jp_fetch, ("paused", "failed"), timeout=50)  # well within busy_timeout (60 s)
    finally:
        keeper.cancel()
        client.stop_channels()
    [nb] = s["notebooks"]
    assert nb["status"] == "not-checkpointed" and nb["error"].startswith("its kernel restarted during the pause"), nb
