"""Prometheus metrics on jupyter_server's /metrics after a real pause and resume.

The metrics live in the process-wide registry, shared with every server a test session starts, so the
test compares readings before and after."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serverkit import gkews_server_config, open_notebook, post, run_cell, wait_for


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path, gpu_count=4)


async def scrape(jp_fetch) -> dict:
    """{(sample name, sorted labels): value} of the gkews metrics, as Prometheus reads them."""
    body = (await jp_fetch("metrics")).body.decode()
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.name.startswith("gkews_"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def delta(after: dict, before: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def test_metrics_follow_a_pause_and_a_resume(jp_fetch, jp_serverapp, jp_root_dir):
    before = await scrape(jp_fetch)
    assert before[("gkews_session_state", (("gkews_session_state", "active"),))] == 1.0
    assert before[("gkews_gpus", ())] == 4

    s = await open_notebook(jp_fetch, jp_root_dir, "work/metrics.ipynb")
    await run_cell(jp_serverapp, s["kernel"]["id"], "import numpy as np; table = np.ones((500, 500))")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    mid = await scrape(jp_fetch)
    assert mid[("gkews_session_state", (("gkews_session_state", "paused"),))] == 1.0
    assert mid[("gkews_session_state", (("gkews_session_state", "active"),))] == 0.0
    assert delta(mid, before, "gkews_pauses_total", reason="user", result="paused") == 1
    t = paused["timeline"]
    assert mid[("gkews_last_checkpoint_bytes", ())] == paused["notebooks"][0]["bytes"] >= 2_000_000
    assert mid[("gkews_last_checkpoint_seconds", ())] == pytest.approx(t["checkpoint_done"] - t["pause_requested"])

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    after = await scrape(jp_fetch)
    assert after[("gkews_session_state", (("gkews_session_state", "active"),))] == 1.0
    assert delta(after, mid, "gkews_resumes_total", verdict="restored-from-checkpoint") == 1
    t = resumed["timeline"]
    released = (t["capacity_obtained"] - t["environment_stopped"]) / 3600 * 4
    assert delta(after, mid, "gkews_gpu_hours_released_total") == pytest.approx(released, rel=1e-6)


async def test_the_checkpoint_bytes_of_a_pause_from_paused_count_every_paused_notebook(jp_fetch, jp_serverapp,
                                                                                       jp_root_dir):
    """a.ipynb paused, then b.ipynb paused from paused: the gauge showed b's bytes only, and a's and b's after a
    server restart with nothing changed. It shows what the paused state holds, both times."""
    for name, rows in (("a.ipynb", 300), ("b.ipynb", 600)):
        s = await open_notebook(jp_fetch, jp_root_dir, name)
        await run_cell(jp_serverapp, s["kernel"]["id"], f"import numpy as np; table = np.ones(({rows}, 500))")
    for name in ("a.ipynb", "b.ipynb"):
        assert (await post(jp_fetch, "pause", {"notebooks": [name]})).code == 202
        paused = await wait_for(jp_fetch, ("paused", "failed"))
        assert paused["state"] == "paused", paused["message"]
    kept = {nb["path"]: nb["bytes"] for nb in paused["notebooks"]}
    assert sorted(kept) == ["a.ipynb", "b.ipynb"] and kept["a.ipynb"] >= 1_200_000
    assert (await scrape(jp_fetch))[("gkews_last_checkpoint_bytes", ())] == sum(kept.values())


async def test_metrics_need_the_token(jp_fetch):
    r = await jp_fetch("metrics", headers={"Authorization": ""}, raise_error=False)
    assert r.code == 403


@pytest.mark.parametrize("environ, count", [
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "0,-1,2"}, 1),  # CUDA stops at the first invalid entry
    ({"CUDA_VISIBLE_DEVICES": "0,1,bad,3"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "GPU-8f2a,MIG-1c3d"}, 2),
    ({"CUDA_VISIBLE_DEVICES": ""}, 0),
    ({"NVIDIA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb,GPU-ccc"}, 3),
    ({"NVIDIA_VISIBLE_DEVICES": "none"}, 0),
    ({"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": "0"}, 1),
])
def test_the_gpu_count_comes_from_the_environment(environ, count):
    from jupyter_gkews.gpus import detect_gpu_count
    assert detect_gpu_count(environ) == count


async def test_a_listener_that_fails_does_not_fail_the_pause_or_the_resume(jp_fetch, jp_serverapp, jp_root_dir):
    """The metrics are told of each step once it is written: a failure there (a log line of a wrong type once
    made their sum raise) failed the resume whose step was already on disk, and the metrics counted a failed
    resume the event log never had."""
    def broken(record, state):
        raise TypeError("can't multiply sequence by non-int of type 'float'")

    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    lifecycle.listeners.insert(0, broken)
    try:
        s = await open_notebook(jp_fetch, jp_root_dir, "work/listener.ipynb")
        await run_cell(jp_serverapp, s["kernel"]["id"], "x = 41")
        before = await scrape(jp_fetch)
        assert (await post(jp_fetch, "pause")).code == 202
        assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
        assert (await post(jp_fetch, "resume")).code == 202
        resumed = await wait_for(jp_fetch, ("active", "failed"))
        assert resumed["state"] == "active", resumed["message"]
        assert resumed["notebooks"][0]["verdict"] == "restored-from-checkpoint"
        after = await scrape(jp_fetch)  # the listeners after the failing one were still told
        assert delta(after, before, "gkews_resumes_total", verdict="restored-from-checkpoint") == 1
        assert delta(after, before, "gkews_resumes_total", verdict="failed") == 0
    finally:
        lifecycle.listeners.remove(broken)
