"""What a resume counts, and what the report and the metrics make of it: a partial restore, a retried
resume, a pause of some notebooks, a lost checkpoint, and a server restarted while paused."""
from __future__ import annotations

import asyncio
import json
import signal
import urllib.request

import pytest
from prometheus_client import REGISTRY

from jupyter_gkews import schema
from jupyter_gkews.metrics import MetricsRecorder
from jupyter_gkews.report import build_report
from jupyter_gkews.report import text as report_text
from kernel_state.store import Store
from serverkit import events, gkews_server_config, open_notebook, post, run_cell, status, wait_for, wait_until
from serverproc import Server
from test_metrics import delta, scrape
from test_report import MONDAY, H, ev, pause_events, resume_events


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path, gpu_count=4, keep_last=2)


def manifest(root, notebook: str, checkpoint: str) -> dict:
    return Store(str(root)).load_manifest(notebook, checkpoint)


async def test_a_partial_restore_says_what_did_not_come_back_and_keeps_what_holds_it(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    path, ckpt = "work/partial.ipynb", tmp_path / "ckpt"
    s = await open_notebook(jp_fetch, jp_root_dir, path)
    kid = s["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 1; t = {'w': list(range(1000))}")
    r = await post(jp_fetch, "checkpoints/now", {"notebook": path})
    assert r.code == 201, r.body
    earlier = json.loads(r.body)["id"]  # holds t, in a blob of its own
    await run_cell(jp_serverapp, kid, "t = {'w': list(range(2000))}")
    before = await scrape(jp_fetch)
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    checkpoint = paused["notebooks"][0]["checkpoint"]
    blob = ckpt / "blobs" / (manifest(ckpt, path, checkpoint)["variables"]["t"]["pickle"] + ".pkl")
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x04
    blob.write_bytes(bytes(data))

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    nb = resumed["notebooks"][0]
    assert nb["verdict"] == "partially-restored", nb
    assert set(nb["failed"]) == {"t"} and "does not match its hash" in nb["failed"]["t"] and "x" in nb["restored"]
    assert nb["error"].startswith("not restored: t (") and earlier in nb["next_step"], nb
    assert nb["unrestored"] == nb["failed"] and nb["unrestored_checkpoints"] == [earlier]
    schema.validate_response("status", resumed)
    assert "not restored in work/partial.ipynb: t" in resumed["message"]
    [event] = [e for e in await events(jp_fetch) if e["event"] == "notebook-resumed"]
    assert event["verdict"] == "partially-restored" and event["failed"] == nb["failed"]
    after = await scrape(jp_fetch)
    assert delta(after, before, "gkews_resumes_total", verdict="partially-restored") == 1
    assert delta(after, before, "gkews_resumes_total", verdict="restored-from-checkpoint") == 0
    totals = build_report(await events(jp_fetch))["totals"]
    assert totals["verdicts"] == {"partially-restored": 1} and totals["success_rate"] == 0
    assert sum(totals["fallbacks"].values()) == 1  # it came back from its checkpoint, and lost t:
    assert totals["failures"] == {
        "variable not restored (a blob does not match its hash: the file was modified or damaged)": 1}

    # the next pause checkpoints the notebook without t: it says so, and the checkpoint holding t stays
    # although retention (keep_last=2) would let it go
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert "the checkpoint of work/partial.ipynb lacks t (not restored at the last resume)" in paused["message"]
    assert paused["notebooks"][0]["warnings"] == [
        f"this checkpoint lacks t, not restored at the last resume; kept in checkpoint {earlier}"]
    [event] = [e for e in await events(jp_fetch) if e["event"] == "notebook-checkpointed" and e["cycle"] == 2]
    assert event["missing"] == ["t"]
    listed = json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]
    assert earlier in [c["id"] for c in listed]

    # the resume after it says t is still missing; restored from the checkpoint named, the next pause has it
    assert (await post(jp_fetch, "resume")).code == 202
    nb = (await wait_for(jp_fetch, ("active", "failed")))["notebooks"][0]
    assert nb["verdict"] == "restored-from-checkpoint" and nb["warnings"] == [
        f"not in this checkpoint, as an earlier resume could not restore them: t; checkpoint {earlier} holds them"]
    r = await post(jp_fetch, f"checkpoints/{earlier}/restore", {"notebook": path})
    assert r.code == 200 and "t" in json.loads(r.body)["restored"], r.body
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert "lacks" not in paused["message"] and "unrestored" not in paused["notebooks"][0], paused


async def test_the_checkpoint_a_partial_restore_came_from_is_kept_when_it_can_still_bring_them_back(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """A variable of a helper module's class did not come back (the module was moved away while paused): the
    checkpoint the resume restored from is the one to restore it from once the module is back, yet it was left
    unpinned, and the next saves' retention (keep_last=2) deleted it: the model's weights were gone."""
    path = "work/helped.ipynb"
    helper = jp_root_dir / "work" / "helper_gkews_probe.py"
    s = await open_notebook(jp_fetch, jp_root_dir, path)
    kid = s["kernel"]["id"]
    helper.write_text("class Model:\n    def __init__(self):\n        self.w = [0.0] * 4\n")
    await run_cell(jp_serverapp, kid, "import helper_gkews_probe\nmodel = helper_gkews_probe.Model()\n"
                                      "model.w[0] = 42.0\nx = 1")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    checkpoint = paused["notebooks"][0]["checkpoint"]
    aside = tmp_path / "aside.py"
    helper.rename(aside)
    assert (await post(jp_fetch, "resume")).code == 202
    nb = (await wait_for(jp_fetch, ("active", "failed")))["notebooks"][0]
    assert nb["verdict"] == "partially-restored" and set(nb["failed"]) >= {"model"}, nb
    assert checkpoint in nb["unrestored_checkpoints"] and checkpoint in nb["next_step"], nb
    kid = nb["kernel_id"]
    for _ in range(3):  # keep_last=2
        assert (await post(jp_fetch, "checkpoints/now", {"notebook": path})).code == 201
    listed = json.loads((await jp_fetch("gkews", "checkpoints", params={"notebook": path})).body)["checkpoints"]
    assert checkpoint in [c["id"] for c in listed]
    aside.rename(helper)
    r = await post(jp_fetch, f"checkpoints/{checkpoint}/restore", {"notebook": path})
    assert r.code == 200 and "model" in json.loads(r.body)["restored"], r.body
    assert (await run_cell(jp_serverapp, kid, "print(model.w[0])")).strip() == "42.0"


async def test_a_pause_writes_again_a_blob_damaged_since_an_earlier_save_before_it_releases_the_kernel(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """The pause's save reuses the blobs of unchanged values: a blob damaged on disk since then would be
    named by the new checkpoint too, and the kernel holding the good bytes released. The pause reads them
    back and writes a damaged one again from the kernel's memory: everything comes back, the older
    checkpoint included (blobs are named by content)."""
    path, ckpt = "work/rot.ipynb", tmp_path / "ckpt"
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "import numpy as np; w = np.arange(300_000, dtype=np.float64); "
                                      "t = {'w': list(range(1000))}")
    r = await post(jp_fetch, "checkpoints/now", {"notebook": path})
    assert r.code == 201, r.body
    earlier = json.loads(r.body)["id"]
    saved = manifest(ckpt, path, earlier)
    blobs = [ckpt / "blobs" / (saved["variables"]["t"]["pickle"] + ".pkl")]
    blobs += [ckpt / "blobs" / (saved["storages"][s]["blob"] + ".safetensors") for s in saved["storages"]]
    for blob in blobs:  # bit rot in both, after the save that wrote them
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0x10
        blob.write_bytes(bytes(data))

    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    warnings = paused["notebooks"][0]["warnings"]
    assert len(warnings) == len(blobs) and all("written again from this kernel's memory" in w for w in warnings)
    assert (await post(jp_fetch, "resume")).code == 202
    nb = (await wait_for(jp_fetch, ("active", "failed")))["notebooks"][0]
    assert nb["verdict"] == "restored-from-checkpoint" and nb["failed"] == {}, (nb.get("error"), nb.get("next_step"))
    assert await run_cell(jp_serverapp, nb["kernel_id"], "print(float(w.sum()), sum(t['w']))") == \
        f"{float(sum(range(300_000)))} {sum(range(1000))}\n"
    r = await post(jp_fetch, f"checkpoints/{earlier}/restore", {"notebook": path})  # healed too
    assert r.code == 200 and json.loads(r.body)["failed"] == {}, r.body


async def test_a_resume_retried_in_its_cycle_leaves_the_gpu_hours_and_ready_time_as_they_were():
    """The first resume brought the GPUs back and ended active with its notebook failed; the retry an hour
    later must not move the cycle's capacity obtained (GPU hours), and the report must agree with the metric,
    which counted the hours when the GPUs came back. The first resume made no kernel usable: the cycle's ready
    time is the retry's, from the first request (the user waited that long for a kernel)."""
    first = pause_events(1, MONDAY, last_activity=MONDAY - H, gpus=2) + \
        resume_events(1, MONDAY + 2 * H, 20, "failed", "kernel k died")
    retry = resume_events(1, MONDAY + 3 * H, 5, "restored-from-checkpoint", "a new process")
    [once] = build_report(first, until=MONDAY + 4 * H)["cycles"]
    [cycle] = build_report(first + retry, until=MONDAY + 4 * H)["cycles"]
    assert cycle["gpu_hours_released"] == once["gpu_hours_released"] == 2 * 2
    assert once["ready_seconds"] is None
    assert cycle["ready_seconds"] == (MONDAY + 3 * H + 5) - (MONDAY + 2 * H - 30)

    recorder, counted = MetricsRecorder(2), REGISTRY.get_sample_value("gkews_gpu_hours_released_total")
    timeline = {}
    for e in first + retry:  # the state's timeline, as the lifecycle keeps it: each resume sets its times
        timeline.update(e.get("timeline") or {})
        recorder(e, {"state": e["state"], "cycle": e["cycle"], "timeline": dict(timeline)})
    counted = REGISTRY.get_sample_value("gkews_gpu_hours_released_total") - counted
    assert counted == pytest.approx(cycle["gpu_hours_released"])


def test_variables_lost_to_different_blobs_group_as_one_cause():
    """Each reason names its blob and file: the report's failures by cause showed one line per blob."""
    lost = {n: f"blob {d * 16} does not match its hash: the file /c/blobs/{d * 16}.pkl was modified or damaged"
            for n, d in (("a", "1a2b"), ("b", "3c4d"))}
    events = pause_events(1, MONDAY, last_activity=MONDAY - H) + resume_events(1, MONDAY + H, 5, "partially-restored")
    next(e for e in events if e["event"] == "notebook-resumed")["failed"] = lost
    assert build_report(events, until=MONDAY + 2 * H)["totals"]["failures"] == {
        "variable not restored (a blob does not match its hash: the file was modified or damaged)": 2}


def test_earlier_checkpoints_naming_the_same_damaged_blob_are_not_offered(tmp_path):
    """Checkpoints share a blob whose bytes did not change: the resume's advice ("restore small --checkpoint ID,
    ID one of ...") named five earlier checkpoints that all held the same damaged file, and each failed the same
    way. Offered (and kept) are only those holding the variable in other bytes."""
    import numpy as np
    import kernel_state
    from jupyter_gkews.lifecycle.resume import checkpoints_holding
    root, nb = str(tmp_path), "work/same.ipynb"
    ns = {"small": "hello", "big": np.arange(600_000.0), "t": {"w": list(range(100))}}
    ids = [kernel_state.save(ns, notebook=nb, root=root)["id"]]  # older bytes of big and t; the same small
    ns["big"], ns["t"] = ns["big"] + 1, {"w": list(range(200))}
    ids += [kernel_state.save(ns, notebook=nb, root=root)["id"] for _ in range(3)]  # the last: the pause's
    last = Store(root).load_manifest(nb, ids[-1])
    big = last["storages"][last["variables"]["big"]["storages"][0]]
    for digest in (last["variables"]["small"]["pickle"], big["blob"]):
        blob = next((tmp_path / "blobs").glob(f"{digest}.*"))
        data = bytearray(blob.read_bytes())
        data[-3] ^= 0x04
        blob.write_bytes(bytes(data))
    failed = kernel_state.restore({}, notebook=nb, root=root)["failed"]
    assert set(failed) == {"small", "big"}, failed
    assert checkpoints_holding(root, nb, failed, ids[-1]) == [ids[0]]  # big's older bytes
    assert checkpoints_holding(root, nb, {"small": failed["small"]}, ids[-1]) == []
    assert checkpoints_holding(root, nb, {"t": "cannot import name 'Gone'"}, ids[-1]) == ids[-2::-1]


def _metric_over(events: list[dict], gpus: int) -> float:
    """gkews_gpu_hours_released_total's growth as a server writing these events would count it."""
    recorder, before, timeline = MetricsRecorder(gpus), REGISTRY.get_sample_value("gkews_gpu_hours_released_total"), {}
    for e in events:
        timeline = {} if e["event"] == "pause-requested" else timeline
        timeline.update(e.get("timeline") or {})
        recorder(e, {"state": e["state"], "cycle": e["cycle"], "timeline": dict(timeline)})
    return REGISTRY.get_sample_value("gkews_gpu_hours_released_total") - before


async def test_a_pause_from_paused_ends_the_earlier_cycle_and_no_hour_counts_twice():
    """A notebook opened while paused, paused in its turn: a second cycle. Its resume brings back both;
    the first cycle showed "still paused" for ever and its hours grew up to the report's end."""
    events = (pause_events(1, MONDAY, last_activity=MONDAY - H, gpus=2)
              + pause_events(2, MONDAY + 2 * H, last_activity=MONDAY + H, gpus=2)
              + resume_events(2, MONDAY + 5 * H, 20, "restored-from-checkpoint"))
    report = build_report(events, until=MONDAY + 30 * 24 * H)
    first, second = report["cycles"]
    assert not first["still_paused"] and not second["still_paused"]
    assert first["released_hours"] == pytest.approx((2 * H - 60) / H)  # until the second pause was asked
    assert second["released_hours"] == pytest.approx(3.0)
    assert report["totals"]["gpu_hours_released"] == pytest.approx(2 * (5 * H - 60) / H, abs=1e-4)  # rounded
    assert _metric_over(events, 2) == pytest.approx(first["gpu_hours_released"] + second["gpu_hours_released"])


async def test_a_pause_from_paused_that_paused_nothing_is_a_failed_attempt_and_the_earlier_cycle_goes_on():
    """b.ipynb, opened while a.ipynb was paused, was busy when its own pause came: nothing more was paused.
    That attempt counted as a pause, ended the first cycle's release when it was asked (its hours stopped
    there), and took the resume for its own."""
    first = pause_events(1, MONDAY, last_activity=MONDAY - H, gpus=2)
    asked = MONDAY + 2 * H
    attempt = [ev(asked, "pause-requested", 2, "pausing", "checkpointing", notebooks=["b.ipynb"], reason="user",
                  last_activity=asked - 60, gpus=2),
               ev(asked + 60, "notebook-not-checkpointed", 2, "pausing", "checkpointing", path="b.ipynb",
                  error="its kernel was still running a cell after 60 s"),
               ev(asked + 60, "paused", 2, "paused", message="nothing more was paused: b.ipynb: busy; still paused: "
                  "train.ipynb", timeline=first[-1]["timeline"], environment_released=True, continues_cycle=1)]
    events = first + attempt + resume_events(2, MONDAY + 5 * H, 20, "restored-from-checkpoint")
    report = build_report(events, until=MONDAY + 30 * 24 * H)
    one, two = report["cycles"]
    assert (one["result"], two["result"]) == ("resumed", "pause failed")
    assert not one["still_paused"] and one["released_hours"] == pytest.approx(5.0)  # until the resume's capacity
    assert two["released_hours"] == 0 and two["pause_failed"].startswith("nothing more was paused: b.ipynb")
    assert one["notebooks"]["train.ipynb"]["verdict"] == "restored-from-checkpoint"
    assert report["totals"]["paused"] == 1 and report["totals"]["pause_failures"] == {two["pause_failed"]: 1}
    assert report["totals"]["gpu_hours_released"] == pytest.approx(10.0)
    assert _metric_over(events, 2) == pytest.approx(10.0)


async def test_a_resume_with_nothing_to_restore_ends_the_release():
    """The server died in a pause before any checkpoint: the restarted one finished it paused with nothing
    saved, and the resume had nothing to restore (no `restoring` step): the cycle stayed "still paused"."""
    events = [ev(MONDAY - 60, "pause-requested", 1, "pausing", "checkpointing", reason="user", gpus=1,
                 last_activity=MONDAY - H),
              ev(MONDAY, "recovered-interrupted-pause", 1, "paused"),
              ev(MONDAY + H, "resume-requested", 1, "resuming", "waiting-for-capacity", notebooks=[]),
              ev(MONDAY + H + 1, "resumed", 1, "active", message="resumed: no notebook had a checkpoint to restore")]
    [cycle] = build_report(events, until=MONDAY + 30 * 24 * H)["cycles"]
    assert not cycle["still_paused"] and cycle["released_hours"] == pytest.approx(1.0)
    assert _metric_over(events, 1) == pytest.approx(1.0)


async def test_a_notebook_deleted_while_paused_is_not_restored_into_a_new_one_at_its_path(
        jp_fetch, jp_serverapp, jp_root_dir):
    """Deleted while paused, then a new notebook created at the same path and used: the resume restored the
    deleted one's variables into the new kernel, over the user's new work."""
    path = "work/analysis.ipynb"
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "result = 'old'")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    await jp_fetch("api", "contents", path, method="DELETE")
    s = await status(jp_fetch)
    assert s["notebooks"][0]["status"] == "lost" and "deleted while paused" in s["notebooks"][0]["error"], s
    # not what the pause did with it ("released (checkpoint on disk)"), which no longer holds
    assert s["notebooks"][0]["message"].startswith("deleted while paused: not resumed; its checkpoint "), s
    assert [e["path"] for e in await events(jp_fetch) if e["event"] == "notebook-deleted"] == [path]
    new = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, new, "result = 'new work'")
    assert (await post(jp_fetch, "resume")).code == 202
    await wait_for(jp_fetch, ("active", "failed"))
    assert await run_cell(jp_serverapp, new, "print(result)") == "new work\n"


@pytest.mark.parametrize("how", ["contents API", "on disk"])
async def test_a_notebook_deleted_while_paused_is_not_a_resume_however_it_was_noticed(
        how, jp_fetch, jp_serverapp, jp_root_dir):
    """Deleted through the contents API while paused (Lifecycle.notebook_deleted), the notebook was `lost` with
    verdict failed, but the resume wrote no `notebook-resumed` for it: no failed resume in the metrics, none in
    the report, none in its message. Deleted on disk and found gone by the resume, it was a failed resume in
    all of them. Both are now the same: the user deleted it, nothing was resumed, so it has no verdict and is
    not a resume (neither failed nor successful); `notebook-deleted` says so, and the report and the resume's
    message name it apart."""
    keep, gone = "work/keep.ipynb", "work/gone.ipynb"
    for path in (keep, gone):
        kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
        await run_cell(jp_serverapp, kid, "x = 1")
    before = await scrape(jp_fetch)
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    if how == "contents API":
        await jp_fetch("api", "contents", gone, method="DELETE")
    else:  # outside the server (a terminal, a sync): the resume finds the file gone
        (jp_root_dir / gone).unlink()
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    schema.validate_response("status", resumed)
    nb = {n["path"]: n for n in resumed["notebooks"]}
    assert nb[keep]["verdict"] == "restored-from-checkpoint", nb[keep]
    assert nb[gone]["status"] == "lost" and nb[gone]["verdict"] is None and nb[gone]["deleted"], nb[gone]
    assert "deleted" not in nb[keep], nb[keep]
    assert "was deleted while paused" in nb[gone]["error"] and "--checkpoint" in nb[gone]["next_step"], nb[gone]
    assert resumed["message"] == f"resumed: 1 restored-from-checkpoint; deleted while paused, not resumed: {gone}"

    log = await events(jp_fetch)
    assert [(e["path"], e["notebooks"]) for e in log if e["event"] == "notebook-deleted"] == [(gone, [gone])]
    assert [e["path"] for e in log if e["event"] == "notebook-resumed"] == [keep]
    [done] = [e for e in log if e["event"] == "resumed"]
    assert done["verdicts"] == {"restored-from-checkpoint": 1} and done["deleted"] == [gone]

    after = await scrape(jp_fetch)
    assert delta(after, before, "gkews_resumes_total", verdict="restored-from-checkpoint") == 1
    assert delta(after, before, "gkews_resumes_total", verdict="failed") == 0

    report = build_report(log)
    totals, [cycle] = report["totals"], report["cycles"]
    assert totals["verdicts"] == {"restored-from-checkpoint": 1} and totals["success_rate"] == 1.0
    assert totals["failures"] == {} and totals["deleted_while_paused"] == 1 and cycle["deleted"] == [gone]
    assert "deleted while paused (not resumed, not counted above): 1 notebook(s)" in report_text(report)
    assert "1 restored-from-checkpoint, 1 deleted" in report_text(report)


def test_a_resume_that_stops_counts_no_failed_resume_for_a_notebook_it_found_deleted():
    """A resume that stops counts each notebook it had not finished as a failed resume: not the one it found
    deleted (not resumed at all)."""
    failed = ("gkews_resumes_total", {"verdict": "failed"})
    before = REGISTRY.get_sample_value(*failed) or 0.0
    events = pause_events(1, MONDAY, last_activity=MONDAY - H) + [
        ev(MONDAY + H, "resume-requested", 1, "resuming", "waiting-for-capacity",
           notebooks=["train.ipynb", "gone.ipynb"]),
        ev(MONDAY + H + 1, "restoring", 1, "resuming", "restoring"),
        ev(MONDAY + H + 2, "notebook-deleted", 1, "resuming", "restoring", path="gone.ipynb",
           notebooks=["gone.ipynb"], noticed="resume"),
        ev(MONDAY + H + 3, "failed", 1, "failed", reason="The resume stopped at restoring: OSError: boom.")]
    _metric_over(events, 2)
    assert (REGISTRY.get_sample_value(*failed) or 0.0) - before == 1  # train.ipynb only
    assert build_report(events, until=MONDAY + 2 * H)["totals"]["deleted_while_paused"] == 1


async def test_a_resume_of_only_deleted_notebooks_says_so(jp_fetch, jp_serverapp, jp_root_dir):
    path = "work/only.ipynb"
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 1")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    await jp_fetch("api", "contents", path, method="DELETE")
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["message"] == f"resumed: nothing to restore; deleted while paused, not resumed: {path}"
    assert build_report(await events(jp_fetch))["totals"]["deleted_while_paused"] == 1


async def test_a_deleted_notebook_resumed_by_name_is_not_called_not_paused(jp_fetch, jp_serverapp, jp_root_dir):
    """The page (or a script) that asks to resume the notebook by name got 400 "'x' was not paused" for a
    notebook deleted while paused: it was paused, and its checkpoint is kept."""
    keep, gone = "work/keep.ipynb", "work/gone.ipynb"
    for path in (keep, gone):
        kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
        await run_cell(jp_serverapp, kid, "x = 1")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    checkpoint = {nb["path"]: nb["checkpoint"] for nb in paused["notebooks"]}[gone]
    await jp_fetch("api", "contents", gone, method="DELETE")
    r = await post(jp_fetch, "resume", {"notebooks": [gone]})
    assert r.code == 409, r.body
    message = json.loads(r.body)["message"]
    assert "was deleted while paused" in message and checkpoint in message and "not paused" not in message, message
    assert (await status(jp_fetch))["state"] == "paused"  # nothing changed: keep.ipynb is still paused
    assert (await post(jp_fetch, "resume", {"notebooks": [keep, gone]})).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["message"] == f"resumed: 1 restored-from-checkpoint; deleted while paused, not resumed: {gone}"


async def test_a_notebook_deleted_while_paused_is_still_named_after_another_is_paused(
        jp_fetch, jp_serverapp, jp_root_dir):
    """A notebook opened while paused and paused too (a pause from paused) started a new cycle without the
    deleted notebook: the resume's message no longer named it, as if it had never been paused."""
    keep, gone, later = "work/keep.ipynb", "work/gone.ipynb", "work/later.ipynb"
    for path in (keep, gone):
        kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
        await run_cell(jp_serverapp, kid, "x = 1")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    await jp_fetch("api", "contents", gone, method="DELETE")
    kid = (await open_notebook(jp_fetch, jp_root_dir, later))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "y = 2")
    assert (await post(jp_fetch, "pause", {"notebooks": [later]})).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    nb = {n["path"]: n for n in paused["notebooks"]}
    assert nb[gone]["deleted"] and nb[gone]["status"] == "lost", paused["notebooks"]
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["message"] == f"resumed: 2 restored-from-checkpoint; deleted while paused, not resumed: {gone}"
    assert await run_cell(jp_serverapp, kid_of(await status(jp_fetch), later), "print(y)") == "2\n"
    assert build_report(await events(jp_fetch))["totals"]["deleted_while_paused"] == 1
    # named once: the pause after this resume starts without it
    assert (await post(jp_fetch, "pause")).code == 202
    assert gone not in {n["path"] for n in (await wait_for(jp_fetch, ("paused", "failed")))["notebooks"]}


def kid_of(state: dict, path: str) -> str:
    return next(n["kernel_id"] for n in state["notebooks"] if n["path"] == path)


async def test_a_pause_of_some_notebooks_releases_no_gpu(jp_fetch, jp_serverapp, jp_root_dir):
    """Local: the notebook left running keeps the GPUs, so the pause of the other one released none."""
    a = await open_notebook(jp_fetch, jp_root_dir, "work/a.ipynb")
    await open_notebook(jp_fetch, jp_root_dir, "work/b.ipynb")
    await run_cell(jp_serverapp, a["kernel"]["id"], "x = 1")
    before = await scrape(jp_fetch)
    assert (await post(jp_fetch, "pause", {"notebooks": ["work/a.ipynb"]})).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    [event] = [e for e in await events(jp_fetch) if e["event"] == "paused"]
    assert event["environment_released"] is False
    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    after = await scrape(jp_fetch)
    assert delta(after, before, "gkews_gpu_hours_released_total") == 0
    [cycle] = build_report(await events(jp_fetch))["cycles"]
    assert cycle["gpus"] == 4 and cycle["released_hours"] == 0 and cycle["gpu_hours_released"] == 0


async def test_a_lost_checkpoint_fails_once_and_is_not_resumed_again(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    path = "work/lost.ipynb"
    s = await open_notebook(jp_fetch, jp_root_dir, path)
    await run_cell(jp_serverapp, s["kernel"]["id"], "x = 1")
    before = await scrape(jp_fetch)
    assert (await post(jp_fetch, "pause")).code == 202
    checkpoint = (await wait_for(jp_fetch, ("paused", "failed")))["notebooks"][0]["checkpoint"]
    [gone] = (tmp_path / "ckpt").glob(f"notebooks/*/manifests/{checkpoint}.json")
    gone.unlink()  # the volume lost it

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["notebooks"][0]["verdict"] == "failed"
    r = await post(jp_fetch, "resume")
    assert r.code == 409, r.body  # nothing it could ever restore: not tried (and counted failed) again
    assert "still to resume" not in resumed["message"]
    nb = (await status(jp_fetch))["notebooks"][0]
    assert nb["status"] == "lost" and "re-run its cells" in nb["next_step"], nb
    after = await scrape(jp_fetch)
    assert delta(after, before, "gkews_resumes_total", verdict="failed") == 1
    assert build_report(await events(jp_fetch))["totals"]["verdicts"] == {"failed": 1}


async def test_a_damaged_checkpoint_fails_once_and_its_advice_works(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """A resume that failed on a damaged manifest said "delete it with %gkews_checkpoint delete ID and restore an
    older one", but the delete answered 409 ("resume first"), a restore or a checkpoint of the notebook's
    kernel 409 "'b.ipynb' is paused: its kernel is not running cells" (its fresh kernel ran cells), and every
    resume failed on it again, counted each time. Now it fails once, as a lost checkpoint does, and the
    advice (and the next step, which names the restore that works) can be followed."""
    path = "work/damaged.ipynb"
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 'older'")
    older = json.loads((await post(jp_fetch, "checkpoints/now", {"notebook": path})).body)["id"]
    await run_cell(jp_serverapp, kid, "x = 'newest'")
    before = await scrape(jp_fetch)
    assert (await post(jp_fetch, "pause")).code == 202
    damaged = (await wait_for(jp_fetch, ("paused", "failed")))["notebooks"][0]["checkpoint"]
    [manifest_file] = (tmp_path / "ckpt").glob(f"notebooks/*/manifests/{damaged}.json")
    manifest_file.write_bytes(manifest_file.read_bytes()[:40])  # a copy cut short

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    [nb] = resumed["notebooks"]
    assert nb["status"] == "lost" and nb["verdict"] == "failed", nb
    assert f"delete it (`%gkews_checkpoint delete {damaged}` in the notebook, or DELETE gkews/checkpoints/{damaged} " \
           "on the server) and restore an older one" in nb["error"], nb
    assert nb["next_step"] == (
        f"its checkpoint {damaged} cannot be read, so its kernel runs without the saved state: restore an older "
        "checkpoint into it (the Checkpoints panel, or %gkews_checkpoint restore --checkpoint ID with an ID from "
        "%gkews_checkpoint list), or re-run its cells"), nb
    assert "still to resume" not in resumed["message"], resumed["message"]
    r = await post(jp_fetch, "resume")
    assert r.code == 409 and "nothing to resume" in json.loads(r.body)["message"]  # not tried again

    kid = nb["kernel_id"]
    r = await jp_fetch("gkews", "checkpoints", damaged, method="DELETE")
    assert r.code == 204
    r = await post(jp_fetch, f"checkpoints/{older}/restore", {"notebook": path})
    assert r.code == 200, r.body
    assert (await run_cell(jp_serverapp, kid, "print(x)")).strip() == "older"
    assert (await post(jp_fetch, "checkpoints/now", {"notebook": path})).code == 201
    after = await scrape(jp_fetch)
    assert delta(after, before, "gkews_resumes_total", verdict="failed") == 1


def metrics_text(server: Server) -> str:
    request = urllib.request.Request(server.url + "metrics", headers={"Authorization": f"token {server.token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read().decode()


def gauge(text: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


@pytest.mark.timeout(600)
def test_the_last_checkpoint_gauges_survive_a_restart_while_paused(tmp_path):
    server = Server(tmp_path)
    try:
        server.start()
        kid = server.open_notebook("work/g.ipynb")["kernel"]["id"]
        server.run_cell(kid, "import numpy as np; table = np.ones((500, 500))")
        code, _ = server.post("gkews/pause")
        assert code == 202
        s = server.wait_for(("paused", "failed"))
        assert s["state"] == "paused", s["message"]
        t = s["timeline"]
        seconds = gauge(metrics_text(server), "gkews_last_checkpoint_seconds")
        assert seconds == pytest.approx(t["checkpoint_done"] - t["pause_requested"])
        server.signal(signal.SIGTERM)

        server.start()
        text = metrics_text(server)
        assert gauge(text, "gkews_last_checkpoint_bytes") == s["notebooks"][0]["bytes"] >= 2_000_000
        assert gauge(text, "gkews_last_checkpoint_seconds") == pytest.approx(seconds)
    finally:
        server.kill()


@pytest.mark.parametrize("paused_gpus, released_all, restarted_gpus", [(1, True, 3), (1, False, 1), (0, True, 4)],
                         ids=["count changed", "a kernel kept running", "paused without GPUs"])
def test_a_server_restarted_while_paused_counts_the_gpu_hours_the_report_counts(paused_gpus, released_all,
                                                                                restarted_gpus):
    """The server restarts between the pause and the resume: its metric must count the pause's GPU count and
    whether that pause released every GPU, as the report does; it counted its own count, and "all" (and took
    a pause's count of 0 for one not recorded)."""
    pause = pause_events(1, MONDAY, last_activity=MONDAY - H, gpus=paused_gpus)
    pause[-1]["environment_released"] = released_all
    started = ev(MONDAY + H, "started", 1, "paused")
    resume = resume_events(1, MONDAY + 2 * H, 20, "restored-from-checkpoint")
    [cycle] = build_report(pause + [started] + resume, until=MONDAY + 4 * H)["cycles"]
    assert cycle["gpu_hours_released"] == pytest.approx(2.0 * paused_gpus if released_all else 0.0)

    recorder = MetricsRecorder(restarted_gpus, earlier_events=lambda: pause + [started])  # the new process
    before, timeline = REGISTRY.get_sample_value("gkews_gpu_hours_released_total"), dict(pause[-1]["timeline"])
    for e in [started] + resume:
        timeline.update(e.get("timeline") or {})
        recorder(e, {"state": e["state"], "cycle": e["cycle"], "timeline": dict(timeline),
                     "notebooks": []})
    counted = REGISTRY.get_sample_value("gkews_gpu_hours_released_total") - before
    assert counted == pytest.approx(cycle["gpu_hours_released"])


async def test_the_time_to_the_first_cell_ends_when_the_cell_starts_not_when_it_ends(
        jp_fetch, jp_serverapp, jp_root_dir):
    """'Time until the next cell runs' measures the resume: a first cell that trains for a while must not add its
    own run time to it (the report's p50/p95 measured the users' workloads)."""
    import time
    kid = (await open_notebook(jp_fetch, jp_root_dir, "first.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "w = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    sent = time.time()
    assert "42" in await run_cell(jp_serverapp, kid, "import time; time.sleep(2); print(w + 1)")
    ended = time.time()
    while "kernel_usable" not in (await status(jp_fetch))["timeline"]:
        await asyncio.sleep(0.1)
    usable = (await status(jp_fetch))["timeline"]["kernel_usable"]
    assert sent - 0.01 <= usable <= ended - 1.9  # the cell's start, two seconds before its end


async def test_a_notebook_the_resume_found_gone_is_resumed_once_its_file_is_back(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """A server started on another folder than the one that paused it finds no file: its resume marked the
    notebook deleted for good, and once the server was back on the right folder, Resume answered "nothing to
    resume". A file the resume found gone (the server saw no deletion) is paused again when it is back."""
    path = "work/moved.ipynb"
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    away = tmp_path / "away.ipynb"
    (jp_root_dir / path).rename(away)
    assert (await post(jp_fetch, "resume")).code == 202
    [nb] = (await wait_for(jp_fetch, ("active", "failed")))["notebooks"]
    assert nb["deleted"] and nb["found_missing"] and "another folder" in nb["error"], nb
    away.rename(jp_root_dir / path)
    await _resumed_with_x_back(jp_fetch, jp_serverapp)


async def test_a_notebook_deleted_while_it_is_being_paused_is_not_restored_into_a_new_one(
        jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    """Deleted through the contents API while the pause checkpointed it: the pause released it as paused, the
    deletion was forgotten, and a notebook created at that path later got the deleted one's variables at the
    next resume (`print(secret)` said 'OLD STATE' in a new, empty notebook)."""
    path = "work/victim.ipynb"
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "secret = 'OLD STATE'")
    lifecycle, deleted = jp_serverapp.web_app.settings["gkews_lifecycle"], asyncio.Event()
    waits = lifecycle._wait_idle

    async def wait_idle_once_deleted(nb, interrupt):  # the deletion lands while the pause is at the notebook
        await deleted.wait()
        return await waits(nb, interrupt)

    monkeypatch.setattr(lifecycle, "_wait_idle", wait_idle_once_deleted)
    assert (await post(jp_fetch, "pause")).code == 202
    await jp_fetch("api", "contents", path, method="DELETE")
    deleted.set()
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    assert f"deleted while being paused, not to be resumed: {path}" in paused["message"], paused["message"]
    nb = paused["notebooks"][0]
    assert nb["status"] == "lost" and "was deleted while it was being paused" in nb["error"], nb
    assert [e["path"] for e in await events(jp_fetch) if e["event"] == "notebook-deleted"] == [path]
    new = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert f"deleted while paused, not resumed: {path}" in resumed["message"], resumed["message"]
    assert await run_cell(jp_serverapp, new, "print('secret' in globals())") == "False\n"


async def test_a_notebook_deleted_while_it_is_being_resumed_gets_its_kernel_shut_down(
        jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    """Deleted through the contents API while the resume brought it back: the resume said "1
    restored-from-checkpoint", and the kernel it started ran on for a file no one can open (on a GPU node,
    holding a GPU). Now it is not resumed, its kernel is shut down, and the message names it."""
    path, kept = "work/case.ipynb", "work/kept.ipynb"
    for p in (path, kept):
        kid = (await open_notebook(jp_fetch, jp_root_dir, p))["kernel"]["id"]
        await run_cell(jp_serverapp, kid, "x = 1")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    lifecycle, deleted = jp_serverapp.web_app.settings["gkews_lifecycle"], asyncio.Event()
    starts = lifecycle.backend.start_kernel

    async def start_then_wait(nb):  # the deletion lands once the kernels are started, before the restores
        kernel_id = await starts(nb)
        await deleted.wait()
        return kernel_id

    monkeypatch.setattr(lifecycle.backend, "start_kernel", start_then_wait)
    assert (await post(jp_fetch, "resume")).code == 202
    await wait_until(lambda: lifecycle.state["phase"] == "restoring", "the resume to start the kernels")
    gone = next(nb for nb in lifecycle.state["notebooks"] if nb["path"] == path)
    await jp_fetch("api", "contents", path, method="DELETE")
    deleted.set()
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    assert resumed["message"].startswith("resumed: 1 restored-from-checkpoint; deleted while paused, not "
                                         f"resumed: {path}"), resumed["message"]
    nb = next(nb for nb in resumed["notebooks"] if nb["path"] == path)
    assert nb["status"] == "lost" and "was deleted during its resume, so its kernel was shut down" in nb["error"]
    await wait_until(lambda: gone["kernel_id"] not in jp_serverapp.kernel_manager, "its kernel to be shut down")
    other = next(nb for nb in resumed["notebooks"] if nb["path"] == kept)
    assert other["verdict"] == "restored-from-checkpoint"
    assert await run_cell(jp_serverapp, other["kernel_id"], "print(x)") == "1\n"


async def test_a_session_whose_notebook_file_was_never_on_this_server_is_resumed(jp_fetch, jp_serverapp):
    """A client that keeps its notebooks elsewhere (VS Code on a remote Jupyter server names the session after
    its local file) has a session at a path with no file here: its pause released the kernel, and its resume
    called the notebook deleted while paused and started nothing; its variables were never brought back."""
    path = "Untitled-1.ipynb"
    r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}}))
    kid = json.loads(r.body)["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    await _resumed_with_x_back(jp_fetch, jp_serverapp)


async def _resumed_with_x_back(jp_fetch, jp_serverapp) -> None:
    """Resume: the one notebook is restored from its checkpoint, not taken for deleted, and its x = 41 is back."""
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    [nb] = resumed["notebooks"]
    assert nb["verdict"] == "restored-from-checkpoint" and "deleted" not in nb, nb
    schema.validate_response("status", resumed)
    assert (await run_cell(jp_serverapp, nb["kernel_id"], "print(x + 1)")).strip() == "42"


async def test_a_resume_names_the_variables_the_pause_could_not_save(jp_fetch, jp_serverapp, jp_root_dir):
    """An open file and a generator cannot be saved: the pause named them, but the resume's message read
    "resumed: 1 restored-from-checkpoint" alone, as if all were back in the new kernel."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "work/io.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "fh = open('notes.txt', 'w')\ngen = (i for i in range(3))\nx = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert sorted(paused["notebooks"][0]["skipped"]) == ["fh", "gen"], paused["notebooks"][0]
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["message"] == ("resumed: 1 restored-from-checkpoint; not saved by the pause, so not back in "
                                  "work/io.ipynb (re-run their cells): fh, gen"), resumed["message"]
    assert "42" in await run_cell(jp_serverapp, kid, "print(x + 1)")
