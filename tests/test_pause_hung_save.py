"""A checkpoint whose saving hangs (a value waiting on a lock, a connection) past kernel_call_timeout: the pause
fails saying which value it was at, and the kernel is not left inside the save (real server and kernel)."""
from __future__ import annotations

import pytest

from serverkit import SLOW_SAVE, gkews_server_config, open_notebook, post, run_cell, wait_for


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path, kernel_call_timeout=5.0)


async def test_a_save_that_hangs_is_interrupted_named_and_the_kernel_runs_cells_again(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """It stayed in the save: the user's next cell got no answer, and the next pause said "its kernel was
    still running a cell after 60 s" of a cell that was gkews's own."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "hung.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41\n" + SLOW_SAVE.format(gate=str(tmp_path / "never")))
    assert (await post(jp_fetch, "pause")).code == 202
    failed = await wait_for(jp_fetch, ("paused", "failed"), timeout=120)
    assert failed["state"] == "failed", failed
    [nb] = failed["notebooks"]
    assert "did not answer within 5 s: its checkpoint was interrupted (interrupted while it saved 'slow'" \
        in nb["error"] and "the kernel runs cells again" in nb["error"], nb
    assert (await run_cell(jp_serverapp, kid, "print(x + 1)", timeout=30)).strip() == "42"


async def test_a_checkpoint_now_that_hangs_is_interrupted_too(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    kid = (await open_notebook(jp_fetch, jp_root_dir, "hung.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41\n" + SLOW_SAVE.format(gate=str(tmp_path / "never")))
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "hung.ipynb"})
    assert r.code == 500 and "did not answer within 5 s: it was interrupted, so the kernel runs cells again" \
        in r.body.decode(), r.body
    assert (await run_cell(jp_serverapp, kid, "print(x + 1)", timeout=30)).strip() == "42"
