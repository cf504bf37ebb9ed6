"""The start hold of a kernel a resume starts, when the kernel's IPython does not load kernel_state as an
extension (a profile whose own `c.IPKernelApp.extensions` replaces ours): on a real server with real kernels."""
from __future__ import annotations

import json
import sys

import pytest

from serverkit import gkews_server_config, open_notebook, post, run_cell, wait_for


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    config = gkews_server_config(tmp_path)
    # longer than the test waits for the resume: a resume that waits for the hold to time out fails the test
    config["LocalBackend"] = {"start_hold_wait": 3600.0}
    return config


@pytest.fixture
def noext_kernel(jp_data_dir):
    """A kernel spec whose IPython loads no extension: kernel_state is importable but not loaded at start."""
    spec = jp_data_dir / "kernels" / "noext"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--IPKernelApp.extensions=[]"],
        "display_name": "Python, no extensions", "language": "python"}))
    return "noext"


async def test_a_kernel_that_does_not_load_kernel_state_is_restored_without_waiting_for_its_hold(
        noext_kernel, jp_fetch, jp_serverapp, jp_root_dir, caplog):
    """Every resume of such a notebook waited start_hold_wait (60 s by default) for a hold that never came."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "noext.ipynb", kernel_name=noext_kernel))["kernel"]["id"]
    assert "True" in await run_cell(jp_serverapp, kid, "import sys; x = 41; print('kernel_state' not in sys.modules)")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused" and paused["notebooks"][0]["status"] == "released", paused

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"), timeout=300)
    assert resumed["state"] == "active", resumed["message"]
    [nb] = resumed["notebooks"]
    assert nb["verdict"] == "restored-from-checkpoint" and "x" in nb["restored"], nb
    assert "42" in await run_cell(jp_serverapp, nb["kernel_id"], "print(x + 1)")
    assert "does not load kernel_state as an extension" in caplog.text
