"""A pause that waits for a running cell says so in the status, on a real server with real kernels."""
from __future__ import annotations

import asyncio

import pytest

from serverkit import (gkews_server_config, open_notebook, post, run_cell, server_watching, status, wait_for,
                       wait_kernel_state)


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path, busy_timeout=600.0)  # the wait lasts until the test ends the cell


async def test_the_status_names_the_cell_a_pause_waits_for(jp_fetch, jp_serverapp, jp_root_dir):
    """For as long as busy_timeout (60 s by default) the status said "checkpointing 2 notebook(s)", every
    notebook "running", and nothing of the cell it was waiting for."""
    busy = (await open_notebook(jp_fetch, jp_root_dir, "long.ipynb"))["kernel"]["id"]
    idle = (await open_notebook(jp_fetch, jp_root_dir, "other.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, idle, "y = 2")
    km = jp_serverapp.kernel_manager
    client = km.get_kernel(busy).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        await server_watching(jp_serverapp, busy)  # else the server may never see this cell make it busy
        client.execute("x = 1\nimport time\ntime.sleep(600)")
        await wait_kernel_state(jp_serverapp, busy, "busy")
        assert (await post(jp_fetch, "pause")).code == 202
        deadline = asyncio.get_running_loop().time() + 120
        while "waiting" not in (s := await status(jp_fetch))["message"]:
            assert s["state"] == "pausing" and asyncio.get_running_loop().time() < deadline, s
            await asyncio.sleep(0.05)
        assert s["message"] == ("checkpointing 2 notebook(s): waiting up to 600 s for the running cell of "
                                "long.ipynb to finish (then it is left running)"), s["message"]
        await km.interrupt_kernel(busy)  # the cell ends: the pause goes on
        paused = await wait_for(jp_fetch, ("paused", "failed"))
        assert paused["state"] == "paused" and "waiting" not in paused["message"], paused["message"]
        released = {"long.ipynb": "released", "other.ipynb": "released"}
        assert {nb["path"]: nb["status"] for nb in paused["notebooks"]} == released
    finally:
        client.stop_channels()
