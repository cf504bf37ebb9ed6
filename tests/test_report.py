"""`jupyter gkews report` from the event log: a real pause/resume cycle, and a week written as the
lifecycle writes it (the article's workstation: used 40 h of a 168 h week)."""
from __future__ import annotations

import asyncio
import calendar
import html
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import kernel_state
from clikit import jupyter_gkews
from jupyter_gkews.report import build_report, percentile
from jupyter_gkews.report import text as report_text
from jupyter_gkews.state import StateStore
from serverkit import gkews_server_config, open_notebook, post, run_cell, status, wait_for

H = 3600.0
MONDAY = calendar.timegm((2026, 11, 23, 0, 0, 0))  # a Monday, UTC
NEXT_MONDAY = MONDAY + 7 * 24 * H
MIB = 2**20


def ev(t: float, event: str, cycle: int, state: str, phase=None, **details) -> dict:
    return {"time": round(t, 3), "event": event, "state": state, "phase": phase, "cycle": cycle, **details}


def pause_events(cycle: int, at: float, last_activity: float, gpus: int = 2) -> list[dict]:
    """What Lifecycle writes for a pause that stops the environment at `at`."""
    t = {"last_activity": last_activity, "pause_requested": at - 60, "checkpoint_done": at - 40,
         "snapshot_ready": at - 10, "environment_stopped": at}
    return [ev(at - 60, "pause-requested", cycle, "pausing", "checkpointing", notebooks=["train.ipynb"],
               interrupt=False, reason="idle policy", last_activity=last_activity, gpus=gpus, snapshot=True),
            ev(at - 40, "notebook-checkpointed", cycle, "pausing", "checkpointing", path="train.ipynb", error=None,
               bytes=100 * MIB, seconds=18.5),
            ev(at - 40, "snapshotting", cycle, "pausing", "snapshotting"),
            ev(at - 10, "releasing", cycle, "pausing", "releasing",
               snapshot={"name": f"snap-{cycle}", "bytes": 2048 * MIB}),
            ev(at, "paused", cycle, "paused", message="paused 1 notebook(s)", timeline=t)]


def resume_events(cycle: int, capacity_at: float, ready_after: float, verdict: str, why=None) -> list[dict]:
    requested = capacity_at - 30
    done = capacity_at + ready_after
    out = [ev(requested, "resume-requested", cycle, "resuming", "waiting-for-capacity", notebooks=["train.ipynb"]),
           ev(capacity_at, "restoring", cycle, "resuming", "restoring"),
           ev(capacity_at + 5, "verifying", cycle, "resuming", "verifying"),
           ev(done - 1, "notebook-resumed", cycle, "resuming", "verifying", path="train.ipynb", verdict=verdict,
              why=why),
           ev(done, "resumed", cycle, "active", verdicts={verdict: 1},
              timeline={"resume_requested": requested, "capacity_obtained": capacity_at, "restore_done": done})]
    if verdict != "failed":
        out.append(ev(done + 40, "kernel-usable", cycle, "active", kernel_id="k", kernel_usable=done + 40))
    return out


RESUMES = [  # Monday to Friday morning at 9: (seconds to ready after capacity, verdict, why)
    (20, "live-verified", None),
    (30, "restored-from-checkpoint", "a new process: the live state did not survive"),
    (40, "live-verified", None),
    (50, "failed", "kernel_state failed in train.ipynb: CheckpointNotFound: no checkpoint"),
    (600, "live-verified", None),
]


def workstation_week() -> list[dict]:
    """Used 9:00-17:00 Monday to Friday, paused by the idle policy every evening, still paused at the end."""
    events = [ev(MONDAY - 8 * H, "started", 0, "active")]
    for day in range(-1, 5):  # Sunday's evening pause is the first
        evening = MONDAY + day * 24 * H + 17 * H
        events += pause_events(day + 2, evening, last_activity=evening - 3600)
        if day < 4:
            ready, verdict, why = RESUMES[day + 1]
            events += resume_events(day + 2, evening + 16 * H, ready, verdict, why)
    return events


def report_of(tmp_path, events: list[dict], *args: str):
    """`jupyter gkews report` of these events, with a checkpoint store (tmp_path/ckpt) as the server's."""
    store = StateStore(str(tmp_path / "state"))
    if not os.path.exists(store.events_path):
        for e in events:
            store.append_event(e)
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    return jupyter_gkews("report", f"--state-dir={tmp_path / 'state'}", f"--checkpoint-root={tmp_path / 'ckpt'}",
                         *args, home=tmp_path)


def test_a_week_of_a_workstation_used_40_of_168_hours(tmp_path):
    html = tmp_path / "week.html"
    r = report_of(tmp_path, workstation_week(), "--until=2026-11-29", "--json", f"--html={html}")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    week = report["week"]
    assert week["start"] == "2026-11-23"
    assert (week["observed_hours"], week["allocated_hours"], week["released_hours"]) == (168, 40, 128)
    assert [d["allocated_hours"] for d in week["days"]] == [8, 8, 8, 8, 8, 0, 0]
    t = report["totals"]
    assert t["cycles"] == 6 and t["paused"] == 6 and t["by_idle_policy"] == 6
    # Sunday 17:00 to Monday 9:00 (16 h) counts whole in the cycles, clipped to the week in the chart
    assert t["released_hours"] == 16 * 5 + 55 and t["gpu_hours_released"] == 2 * (16 * 5 + 55)
    assert t["idle_hours_before_pause"] == pytest.approx(6 * (1 - 60 / 3600), abs=1e-3)
    assert t["checkpoint_bytes"] == 6 * 100 * MIB and t["snapshot_bytes"] == 6 * 2048 * MIB
    assert t["verdicts"] == {"live-verified": 3, "restored-from-checkpoint": 1, "failed": 1}
    assert t["success_rate"] == 0.8
    # 30 s for capacity + ready; Thursday's failed resume made no kernel usable: no sample (it counted 80 s)
    assert (t["ready_seconds_p50"], t["ready_seconds_p95"]) == (60, 630)
    assert (t["first_cell_seconds_p50"], t["first_cell_seconds_p95"]) == (100, 670)  # none for the failed one
    assert t["fallbacks"] == {"a new process: the live state did not survive": 1}
    assert t["failures"] == {"kernel_state failed in train.ipynb: CheckpointNotFound: no checkpoint": 1}
    last = report["cycles"][-1]
    assert last["still_paused"] and last["released_hours"] == 55

    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "<script" not in page and not re.search(r'(src|href)="', page)  # nothing fetched
    assert page.count('class="allocated"') == 7 and page.count('class="released"') == 7
    assert "allocated 40 h" in page and "released 128 h of 168 h observed" in page
    assert "<h1>GPU hours given back</h1>" in page
    # the chart is in the environment's hours, not GPU hours: its heading says so
    assert "<h2>The environment's hours, day by day</h2>" in page and "270.00 GPU hours released" in page

    text = report_of(tmp_path, [], "--until=2026-11-29").stdout
    assert "released: 135.00 h, 270.00 GPU hours" in text
    assert "success 80% (1 failed, 3 live-verified, 1 restored-from-checkpoint)" in text
    assert "p50 60.0 s, p95 630.0 s" in text
    assert "1 x a new process: the live state did not survive" in text
    assert "week from 2026-11-23: 168.00 h observed, 40.00 h allocated, 128.00 h released" in text
    r = report_of(tmp_path, [], f"--html={tmp_path / 'no' / 'such' / 'x.html'}")
    assert r.returncode == 2 and "cannot write the HTML report" in r.stderr and "Traceback" not in r.stderr
    assert re.search(r"^6 +2026-11-27 16:59 +idle policy +59\.0 min +55\.00 +110\.00 +100\.0 +2048\.0 +still paused",
                     text, re.M), text


def test_until_leaves_out_what_came_after_it(tmp_path):
    """--until=2026-11-25 counted Thursday's and Friday's pauses and resumes too."""
    r = report_of(tmp_path, workstation_week(), "--until=2026-11-25", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    t = report["totals"]
    assert t["cycles"] == 4 and t["verdicts"] == {"live-verified": 2, "restored-from-checkpoint": 1}
    last = report["cycles"][-1]
    assert last["still_paused"] and last["released_hours"] == 7  # Wednesday 17:00 to midnight, not to Thursday 9:00
    assert last["verdicts"] == {} and last["ready_seconds"] is None


def test_events_dated_after_the_report_are_said_to_be_left_out():
    """A log written under a clock set ahead (every event in the future) read "(no pause in the event log yet)"
    and nothing else, as if no server had paused."""
    ahead = time.time() + 30 * 86400
    events = [e for c, day in enumerate((0, 1)) for e in pause_events(c + 1, ahead + day * 86400, ahead - 600)]
    said = report_text(build_report(events))
    assert "(no pause in the event log yet)" in said
    assert f"({len(events)} event(s) of the log are dated after " in said and "left out: an earlier --until, or " \
        "a clock that was set ahead when they were written)" in said, said
    past = [e for e in pause_events(1, time.time() - 3600, time.time() - 4000)]
    assert "dated after" not in report_text(build_report(past))


def test_one_cause_of_failure_is_one_group_whatever_checkpoint_it_names():
    """Each cycle's failure named its own checkpoint id, so the same cause never grouped."""
    events = []
    for cycle, stamp in ((1, "20261204-185106-195-6e66"), (2, "20261205-185106-195-a1b2")):
        events += pause_events(cycle, MONDAY + cycle * 24 * H, MONDAY + cycle * 24 * H - H)
        events += resume_events(cycle, MONDAY + cycle * 24 * H + 9 * H, 20, "failed",
                                f"kernel_state failed in train.ipynb: CheckpointNotFound: checkpoint '{stamp}' does "
                                f"not exist for notebook 'train.ipynb'")
    failures = build_report(events, until=NEXT_MONDAY)["totals"]["failures"]
    assert failures == {"kernel_state failed in train.ipynb: CheckpointNotFound: a checkpoint does not exist for "
                        "notebook 'train.ipynb'": 2}, failures


def test_a_cause_naming_a_checkpoint_in_a_file_name_and_a_command_groups_and_still_reads():
    """A damaged manifest's reason names its id in the file name and in the fix; grouping made it
    "manifest a checkpoint.json" and "%gkews_checkpoint delete a checkpoint"."""
    events = []
    for cycle, stamp in ((1, "20261204-185106-195-6e66"), (2, "20261205-185106-195-a1b2")):
        events += pause_events(cycle, MONDAY + cycle * 24 * H, MONDAY + cycle * 24 * H - H)
        events += resume_events(cycle, MONDAY + cycle * 24 * H + 9 * H, 20, "failed",
                                f"CorruptManifest: manifest {stamp}.json cannot be read (Expecting value); delete "
                                f"it (`%gkews_checkpoint delete {stamp}` in the notebook, or DELETE "
                                f"gkews/checkpoints/{stamp} on the server) and restore an older one")
    failures = build_report(events, until=NEXT_MONDAY)["totals"]["failures"]
    assert failures == {"CorruptManifest: manifest <id>.json cannot be read (Expecting value); delete it "
                        "(`%gkews_checkpoint delete <id>` in the notebook, or DELETE gkews/checkpoints/<id> on "
                        "the server) and restore an older one": 2}, failures


def test_failed_attempts_are_not_pauses_nor_ready_kernels():
    """The idle policy's pause that failed (a busy kernel) counted as one of its pauses, with its idle time; a
    resume whose every notebook failed counted as a kernel ready in 0.02 s. Neither happened."""
    first = MONDAY + 17 * H
    events = [ev(first - 60, "pause-requested", 1, "pausing", "checkpointing", notebooks=["train.ipynb"],
                 interrupt=False, reason="idle policy", last_activity=first - H, gpus=2, snapshot=False),
              ev(first, "failed", 1, "failed", reason="the kernel of train.ipynb is running a cell")]
    events += pause_events(2, first + H, last_activity=first - H)
    failed, retried = first + 10 * H, first + 10 * H + 600
    events += resume_events(2, failed, 0.02, "failed", "it has no checkpoint in /home/u/ckpt (deleted since, or "
                                                       "another store)")
    events += [e for e in resume_events(2, retried, 20, "restored-from-checkpoint", "a new process")
               if e["event"] != "restoring"]  # the GPUs came back at the first resume
    t = build_report(events, until=NEXT_MONDAY)["totals"]
    assert (t["cycles"], t["paused"], t["by_idle_policy"]) == (2, 1, 1)
    assert t["idle_hours_before_pause"] == pytest.approx((2 * H - 60) / 3600, abs=1e-3)
    assert t["verdicts"] == {"failed": 1, "restored-from-checkpoint": 1}
    # the store's path goes from the cause, but the sentence keeps its shape
    assert t["failures"] == {"it has no checkpoint in … (deleted since, or another store)": 1}
    # from the first request to the end of the resume that brought the kernel back
    assert t["ready_seconds_p50"] == pytest.approx(retried + 20 - (failed - 30))
    assert "1 by the idle policy" in report_text(build_report(events, until=NEXT_MONDAY))


def test_a_report_piped_into_head_ends_without_a_traceback(tmp_path):
    events = []  # enough cycles for a report larger than a pipe holds (64 KiB): head exits before it is written
    for cycle in range(1, 201):
        events += pause_events(cycle, MONDAY + cycle * H, MONDAY + cycle * H - 600)
        events += resume_events(cycle, MONDAY + cycle * H + 1200, 20, "live-verified")
    report_of(tmp_path, events, "--json")  # writes the log
    exe = os.path.join(os.path.dirname(sys.executable), "jupyter-gkews")
    done = subprocess.run(f"'{exe}' report --state-dir='{tmp_path / 'state'}' --checkpoint-root='{tmp_path / 'ckpt'}'"
                          " --json | head -1", shell=True, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config")})
    assert done.stdout == "{\n" and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_a_resume_that_brought_no_notebook_back_gives_no_time_sample():
    """Every notebook of the pause was deleted while paused: the resume had nothing to restore, and its 0.01 s
    to "ready" was a sample of the time to a usable kernel (p50 0.65 s where the real resumes took 1.27 s)."""
    events = pause_events(1, MONDAY + 9 * H, MONDAY + 8 * H)
    requested = MONDAY + 10 * H
    events += [ev(requested, "resume-requested", 1, "resuming", "restoring", notebooks=["train.ipynb"]),
               ev(requested + 0.01, "notebook-deleted", 1, "resuming", "restoring", notebooks=["train.ipynb"]),
               ev(requested + 0.01, "resumed", 1, "active", verdicts={},
                  timeline={"resume_requested": requested, "capacity_obtained": requested,
                            "restore_done": requested + 0.01})]
    events += pause_events(2, MONDAY + 33 * H, MONDAY + 32 * H) + resume_events(2, MONDAY + 34 * H, 20, "live-verified")
    report = build_report(events, until=NEXT_MONDAY)
    first = report["cycles"][0]
    assert first["deleted"] == ["train.ipynb"] and first["ready_seconds"] is None
    assert first["first_cell_seconds"] is None
    assert report["totals"]["ready_seconds_p50"] == report["totals"]["ready_seconds_p95"] == 50  # 30 s + 20 s


def test_a_report_until_a_day_still_to_come_counts_only_the_hours_until_now(tmp_path):
    """The weekly report run on Friday with --until=Sunday: a GPU released since an hour ago counts 1 h, not
    the hours until Sunday's end."""
    now = time.time()
    events = pause_events(1, now - H, now - H - 120)
    r = report_of(tmp_path, events, "--until=" + time.strftime("%Y-%m-%d", time.gmtime(now + 3 * 24 * H)), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    last = report["cycles"][-1]
    assert last["still_paused"] and last["released_hours"] == pytest.approx(1, abs=0.01)
    assert report["totals"]["gpu_hours_released"] == pytest.approx(2, abs=0.02)
    assert report["week"]["released_hours"] == pytest.approx(1, abs=0.01)
    assert report["week"]["days"][-1]["released_hours"] == 0  # the week's last day has not begun


def test_damaged_lines_of_the_event_log_are_named_and_the_rest_is_reported(tmp_path):
    """A crash cuts off the last line; a hand edit leaves a `null` or a word where a number belongs. The report
    still reports what the other lines say, and names the lines it skipped."""
    report_of(tmp_path, workstation_week()[:8], "--until=2026-11-25")
    path = tmp_path / "state" / "events.jsonl"
    good = path.read_bytes()
    # JSON whose details the report computes with are of another type: `bytes` a word or Infinity (which
    # Python's json reads), `gpus` a string or below 0, a timeline a list (the report crashed, or printed
    # "inf MiB" and a JSON that was no JSON)
    edited = [{"event": "notebook-checkpointed", "path": "x.ipynb", "bytes": "big"},
              {"event": "notebook-checkpointed", "path": "x.ipynb", "bytes": float("inf")},
              {"event": "pause-requested", "gpus": "2"}, {"event": "pause-requested", "gpus": -3},
              {"event": "resumed", "timeline": ["a", "b"]}]
    path.write_bytes(good + b'null\n[1, 2]\n{"time": "x", "event": "paused", "cycle": 1}\n'
                     b'{"time": 1.0, "event": "paused", "cycle": "three"}\n\xff\xfe\n'
                     + b"".join(json.dumps({"time": 1.0, "cycle": 1, **e}).encode() + b"\n" for e in edited)
                     + b'{"time": 17')
    first = good.count(b"\n") + 1
    r = report_of(tmp_path, [], "--until=2026-11-25", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    skipped = ", ".join(str(first + i) for i in range(10))  # the first ten are named
    assert f"{6 + len(edited)} line(s) are no event and were skipped (line {skipped}, ...)" in r.stderr, r.stderr
    path.write_bytes(good)
    assert json.loads(r.stdout)["totals"] == json.loads(report_of(tmp_path, [], "--until=2026-11-25",
                                                                  "--json").stdout)["totals"]


def test_kept_is_what_the_checkpoint_store_holds_now(tmp_path):
    """Three pauses of one unchanged notebook share its blob: "kept: checkpoints 300.0 MiB" was the sum the
    pauses wrote, not the store's size."""
    events = []
    for cycle in (1, 2, 3):
        events += pause_events(cycle, MONDAY + cycle * 24 * H, last_activity=MONDAY + cycle * 24 * H - H)
    for _ in range(3):
        kernel_state.save({"w": np.ones(125_000)}, notebook="train.ipynb", root=tmp_path / "ckpt")
    r = report_of(tmp_path, events, f"--until={NEXT_MONDAY}")
    assert r.returncode == 0, r.stderr
    on_disk = sum(p.stat().st_size for p in (tmp_path / "ckpt").rglob("*") if p.is_file())
    assert 1_000_000 < on_disk < 2_000_000  # one 1 MB blob, not three
    assert f"kept: the checkpoint store holds {on_disk / MIB:.1f} MiB now" in r.stdout, r.stdout
    # a log from before bytes_written: each checkpoint's size stands for what it wrote
    assert "written by the pauses: 300.0 MiB of checkpoints" in r.stdout, r.stdout
    totals = json.loads(report_of(tmp_path, [], f"--until={NEXT_MONDAY}", "--json").stdout)["totals"]
    assert totals["checkpoint_bytes_on_disk"] == on_disk and totals["checkpoint_bytes"] == 300 * MIB


def test_written_is_what_the_pauses_added_to_the_store_not_the_checkpoints_sizes(tmp_path):
    """The second and third pauses of an unchanged notebook wrote 6 KiB each: the report said the pauses wrote
    300 MiB (three times the checkpoint's size)."""
    events = []
    for cycle, written in ((1, 100 * MIB), (2, 6 * 1024), (3, 6 * 1024)):
        pause = pause_events(cycle, MONDAY + cycle * 24 * H, last_activity=MONDAY + cycle * 24 * H - H)
        pause[1]["bytes_written"] = written
        events += pause
    r = report_of(tmp_path, events, f"--until={NEXT_MONDAY}", "--json")
    assert r.returncode == 0, r.stderr
    totals = json.loads(r.stdout)["totals"]
    assert totals["written_bytes"] == 100 * MIB + 12 * 1024 and totals["checkpoint_bytes"] == 300 * MIB
    text = report_of(tmp_path, [], f"--until={NEXT_MONDAY}").stdout
    assert "written by the pauses: 100.0 MiB of checkpoints" in text and "add up to 300.0 MiB" in text, text


def test_a_notebook_renamed_while_paused_is_one_notebook(tmp_path):
    """Moved into a folder, then the folder renamed, while paused: the report showed train.ipynb with its
    checkpoint and archive/train.ipynb with its verdict, as two notebooks."""
    events = pause_events(1, MONDAY, last_activity=MONDAY - H)
    events += [ev(MONDAY + H, "notebook-renamed", 1, "paused", old="train.ipynb", new="runs/train.ipynb",
                  notebooks=["runs/train.ipynb"]),
               ev(MONDAY + 2 * H, "notebook-renamed", 1, "paused", old="runs", new="archive",
                  notebooks=["archive/train.ipynb"])]
    events += [{**e, "path": "archive/train.ipynb"} if "path" in e else e
               for e in resume_events(1, MONDAY + 3 * H, 20, "live-verified")]
    r = report_of(tmp_path, events, f"--until={NEXT_MONDAY}", "--json")
    assert r.returncode == 0, r.stderr
    [cycle] = json.loads(r.stdout)["cycles"]
    assert list(cycle["notebooks"]) == ["archive/train.ipynb"]
    nb = cycle["notebooks"]["archive/train.ipynb"]
    assert nb["bytes"] == 100 * MIB and nb["verdict"] == "live-verified"


def test_the_html_page_without_gpus_speaks_of_hours_released(tmp_path):
    """With c.GkewsApp.gpu_count 0 the page was titled "GPU hours given back" over 0.00 GPU hours."""
    events = pause_events(1, MONDAY + 17 * H, last_activity=MONDAY + 16 * H, gpus=0)
    events += resume_events(1, MONDAY + 33 * H, 20, "live-verified")
    html = tmp_path / "week.html"
    r = report_of(tmp_path, events, "--until=2026-11-29", f"--html={html}")
    assert r.returncode == 0, r.stderr
    page = html.read_text()
    assert re.search(r"<h1>(.*)</h1>", page).group(1) == "Hours the environment was released"
    assert "GPU hours given back" not in page
    assert "16.00 h released in all 1 cycle(s)" in page


def test_percentiles_are_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([5.0], 0.95) == 5.0
    assert percentile(list(range(1, 101)), 0.95) == 95
    assert percentile([1, 2, 3, 4], 0.5) == 2


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path, gpu_count=2)


async def test_the_report_of_a_real_pause_and_resume(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/report.ipynb")
    kid = s["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "import numpy as np; data = np.arange(100_000.0)")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    await run_cell(jp_serverapp, kid, "data.sum()")
    while "kernel_usable" not in (await status(jp_fetch))["timeline"]:
        await asyncio.sleep(0.1)
    t = (await status(jp_fetch))["timeline"]

    r = jupyter_gkews("report", f"--state-dir={tmp_path / 'state'}", f"--checkpoint-root={tmp_path / 'ckpt'}",
                      "--json", home=tmp_path / "cli")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    [cycle] = report["cycles"]
    assert cycle["reason"] == "user" and cycle["gpus"] == 2 and cycle["result"] == "resumed"
    assert cycle["checkpoint_bytes"] == paused["notebooks"][0]["bytes"] > 800_000
    assert cycle["verdicts"] == {"restored-from-checkpoint": 1}
    released = (t["capacity_obtained"] - t["environment_stopped"]) / 3600
    assert cycle["released_hours"] == pytest.approx(released, abs=1e-6)
    assert cycle["gpu_hours_released"] == pytest.approx(2 * released, abs=1e-6)
    assert cycle["idle_seconds"] == pytest.approx(t["pause_requested"] - t["last_activity"], abs=1e-3)
    assert cycle["ready_seconds"] == pytest.approx(t["restore_done"] - t["resume_requested"], abs=1e-3)
    assert cycle["first_cell_seconds"] == pytest.approx(t["kernel_usable"] - t["resume_requested"], abs=1e-3)
    assert report["totals"]["success_rate"] == 1.0
    assert report["totals"]["checkpoint_bytes_on_disk"] > cycle["checkpoint_bytes"]  # blobs and manifest
    assert report["totals"]["fallbacks"] == {"a new process: the live state did not survive": 1}


def test_bad_report_options_name_the_fix(tmp_path):
    r = jupyter_gkews("report", f"--state-dir={tmp_path / 'nowhere'}", home=tmp_path)
    assert r.returncode == 2
    assert f"no event log at {tmp_path / 'nowhere' / 'events.jsonl'}" in r.stderr and "--state-dir=DIR" in r.stderr
    StateStore(str(tmp_path / "s")).append_event(ev(time.time(), "started", 0, "active"))
    r = jupyter_gkews("report", f"--state-dir={tmp_path / 's'}", "--until=yesterday", home=tmp_path)
    assert r.returncode == 2 and "--until='yesterday' is not a date: give YYYY-MM-DD" in r.stderr
    # -5 was a week from 1969, accepted silently; 1e17 and 1e30 ended in a traceback (OverflowError)
    for until in ("-5", "1969-12-31", "nan", "inf", "1e17", "1e30"):
        r = jupyter_gkews("report", f"--state-dir={tmp_path / 's'}", f"--until={until}", home=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr and (
            f"--until={until!r} is not a time between 1970-01-01 and 9999-12-31: give YYYY-MM-DD" in r.stderr), (
            until, r.returncode, r.stderr)
    r = jupyter_gkews("report", f"--state-dir={tmp_path / 's'}", home=tmp_path)
    assert r.returncode == 0 and "(no pause in the event log yet)" in r.stdout
    # the last day the message names was refused itself, where its last second (253402300799) was taken
    for until in ("9999-12-31", "253402300799"):
        r = jupyter_gkews("report", f"--state-dir={tmp_path / 's'}", f"--until={until}", home=tmp_path)
        assert r.returncode == 0 and "(no pause in the event log yet)" in r.stdout, (until, r.stderr)
    # the pauses wrote checkpoints, but not where --checkpoint-root says: it said "holds 0.0 MiB now"
    week = StateStore(str(tmp_path / "week"))
    for e in workstation_week():
        week.append_event(e)
    r = jupyter_gkews("report", f"--state-dir={tmp_path / 'week'}", f"--checkpoint-root={tmp_path / 'nonexistent'}",
                      home=tmp_path)
    assert r.returncode == 2 and "MiB now" not in r.stdout
    assert (f"no checkpoint store at {tmp_path / 'nonexistent'}, yet the event log says the pauses wrote 600.00 MiB"
            in r.stderr and "--checkpoint-root=DIR" in r.stderr), r.stderr
    # a folder that is no store was counted whole as the bytes "kept" (all of /tmp: 27 GiB); cleanup refused it
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    r = jupyter_gkews("report", f"--state-dir={tmp_path / 'week'}", f"--checkpoint-root={tmp_path / 'mine'}",
                      home=tmp_path)
    assert r.returncode == 2 and "MiB now" not in r.stdout
    assert f"{tmp_path / 'mine'} is not a gkews checkpoint store" in r.stderr, r.stderr


def test_an_event_log_that_is_no_file_is_named_as_such_and_html_needs_a_name(tmp_path):
    """A folder or a dangling link where events.jsonl belongs was reported as "no event log: no server has
    run with this state directory"; `--html=` wrote nothing and said nothing."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "events.jsonl").mkdir()
    r = jupyter_gkews("report", f"--state-dir={state}", home=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"the event log {state / 'events.jsonl'} is not a file (a folder, or a link to nothing)" in r.stderr
    (state / "events.jsonl").rmdir()
    (state / "events.jsonl").symlink_to(tmp_path / "moved-away.jsonl")
    r = jupyter_gkews("report", f"--state-dir={state}", home=tmp_path)
    assert r.returncode == 2 and "is not a file (a folder, or a link to nothing)" in r.stderr, r.stderr
    (state / "events.jsonl").unlink()
    StateStore(str(state)).append_event(ev(time.time(), "started", 0, "active"))
    r = jupyter_gkews("report", f"--state-dir={state}", "--html=", home=tmp_path)
    assert r.returncode == 2 and "--html needs a file name (--html=week.html)" in r.stderr, r.stderr
    # a file given as the state directory read "no event log at FILE/events.jsonl: no server has run with it"
    r = jupyter_gkews("report", f"--state-dir={state / 'events.jsonl'}", home=tmp_path)
    assert r.returncode == 2 and f"the state directory {state / 'events.jsonl'} is a file, not a directory" \
        in r.stderr, r.stderr


def test_the_state_dir_defaults_to_the_servers(tmp_path):
    """No --state-dir: the GkewsApp default (the project folder's, under the Jupyter data dir: the folder the
    command runs in, or c.ServerApp.root_dir), or what jupyter_server_config says."""
    from jupyter_gkews.projects import project_dir
    (tmp_path / "proj").mkdir()
    data_state = os.path.join(project_dir(str(tmp_path / "proj"), str(tmp_path / "data")), "state")
    StateStore(data_state).append_event(ev(time.time(), "started", 0, "active"))
    r = jupyter_gkews("report", "--json", home=tmp_path, cwd=tmp_path / "proj")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state_dir"] == data_state
    r = jupyter_gkews("report", "--json", home=tmp_path, cwd=tmp_path)  # another folder: not its state
    assert r.returncode == 2 and f"this is {tmp_path}'s" in r.stderr and "Run this command in the folder" in r.stderr
    (tmp_path / "config").mkdir(exist_ok=True)
    root_dir = f"c.ServerApp.root_dir = {str(tmp_path / 'proj')!r}\n"
    (tmp_path / "config" / "jupyter_server_config.py").write_text(root_dir)
    r = jupyter_gkews("report", "--json", home=tmp_path, cwd=tmp_path)
    assert json.loads(r.stdout)["state_dir"] == data_state
    configured = tmp_path / "elsewhere"
    StateStore(str(configured)).append_event(ev(time.time(), "started", 0, "active"))
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "jupyter_server_config.py").write_text(f"c.GkewsApp.state_dir = {str(configured)!r}\n")
    r = jupyter_gkews("report", "--json", home=tmp_path)
    assert json.loads(r.stdout)["state_dir"] == str(configured)


def test_report_is_computed_in_memory_too():
    report = build_report(workstation_week(), until=NEXT_MONDAY)
    assert report["week"]["allocated_hours"] == 40


def test_a_failed_resume_retried_in_the_same_cycle_counts_as_the_metrics_count_it():
    """Two resumes failed (the kernel died), the third restored: the report said "1 resumed, 100%"."""
    why = "kernel k died (its process is gone)"
    events = pause_events(1, MONDAY, last_activity=MONDAY - 3600)
    events += resume_events(1, MONDAY + H, 5, "failed", why)[:-1]  # each failed resume ends failed
    events += resume_events(1, MONDAY + 2 * H, 5, "failed", why)[:-1]
    events += resume_events(1, MONDAY + 3 * H, 5, "restored-from-checkpoint", "a new process")
    totals = build_report(events, until=MONDAY + 4 * H)["totals"]
    assert totals["notebooks_resumed"] == 3
    assert totals["verdicts"] == {"failed": 2, "restored-from-checkpoint": 1}
    assert totals["success_rate"] == round(1 / 3, 4)
    assert totals["failures"] == {why: 2}


def test_failure_causes_print_on_one_line_and_lose_only_file_paths():
    """A reason with a newline printed over two lines of the text report (the status escapes it), and the
    grouping of causes stripped anything from a `/` on: `<script>…</script>` became `<script>…<`."""
    html_reason = "ValueError: first line\nsecond line <script>alert(1)</script> | a/b and 1/2"
    events = pause_events(1, MONDAY, last_activity=MONDAY - H)
    events += resume_events(1, MONDAY + H, 5, "partially-restored", "a new process\nof its own")
    [resumed] = [e for e in events if e["event"] == "notebook-resumed"]
    resumed["failed"] = {
        "bad": html_reason,
        "w": "blob 1a2b3c4d5e6f does not match its hash: the file /c/blobs/1a2b3c4d5e6f.pkl was modified",
        "v": "blob 0f0f0f0f0f0f is missing from the checkpoint store (/c/blobs/0f0f0f0f0f0f.pkl)",
        "u": "blob 9e9e9e9e9e9e cannot be read: [Errno 13] Permission denied: '/c/blobs/9e9e9e9e9e9e.pkl'"}
    events += pause_events(2, MONDAY + 2 * H, last_activity=MONDAY + H)
    events += resume_events(2, MONDAY + 3 * H, 5, "failed", "the kernel died\nwhile restoring")
    report = build_report(events, until=MONDAY + 4 * H)
    assert report["totals"]["failures"] == {
        f"variable not restored ({html_reason})": 1,
        "variable not restored (a blob does not match its hash: the file was modified)": 1,
        "variable not restored (a blob is missing from the checkpoint store)": 1,
        "variable not restored (a blob cannot be read: [Errno 13] Permission denied)": 1,
        "the kernel died\nwhile restoring": 1}
    lines = report_text(report).splitlines()
    assert "  1 x variable not restored (ValueError: first line\\nsecond line <script>alert(1)</script> | a/b and " \
           "1/2)" in lines
    assert "  1 x the kernel died\\nwhile restoring" in lines and "  1 x a new process\\nof its own" in lines
    assert not [line for line in lines if line.startswith(("second line", "while restoring", "of its own"))]


def test_a_failed_pause_says_why_in_the_text_and_the_page():
    """The table said "pause failed", and the cause was only in the JSON."""
    why = "No notebook could be checkpointed, so nothing was released: a.ipynb: the disk is full"
    events = [ev(MONDAY, "pause-requested", 1, "pausing", "checkpointing", notebooks=["a.ipynb"], gpus=1),
              ev(MONDAY + 5, "failed", 1, "failed", reason=why)]
    report = build_report(events, until=MONDAY + H)
    assert report["totals"]["pause_failures"] == {why: 1}
    out = report_text(report)
    assert f"pauses that failed:\n  1 x {why}" in out, out
    from jupyter_gkews.report_html import page
    assert html.escape(why) in page(report)


def test_a_pod_restored_from_its_snapshot_ends_the_cycle_its_first_life_paused():
    """On a cluster the restored copy wakes up inside the snapshot wait of the pause (its memory is from then),
    while the home volume holds what the first life wrote after the snapshot: releasing, paused. Its own
    events then follow "paused" with a timeline that lacks environment_stopped. The report counts one cycle,
    resumed, its GPU hours from the first life's release to the restore, and its ready time from the restore."""
    restored_at = MONDAY + 14 * H
    memory = {"last_activity": MONDAY - H, "pause_requested": MONDAY - 60, "checkpoint_done": MONDAY - 40,
              "resume_requested": restored_at, "capacity_obtained": restored_at}
    events = pause_events(1, MONDAY, last_activity=MONDAY - H) + [
        ev(restored_at, "restored-detected", 1, "resuming", "restoring", evidence={}, timeline=memory),
        ev(restored_at + 2, "verifying", 1, "resuming", "verifying"),
        ev(restored_at + 4, "notebook-resumed", 1, "resuming", "verifying", path="train.ipynb",
           verdict="live-verified", why=None),
        ev(restored_at + 5, "resumed", 1, "active", verdicts={"live-verified": 1},
           timeline={**memory, "restore_done": restored_at + 5})]
    report = build_report(events, until=restored_at + H)
    [cycle] = report["cycles"]
    assert cycle["result"] == "resumed" and cycle["verdicts"] == {"live-verified": 1}
    assert cycle["timeline"]["environment_stopped"] == MONDAY and cycle["released_hours"] == 14.0
    assert cycle["gpu_hours_released"] == 14.0 * 2 and cycle["ready_seconds"] == 5.0
    assert report["totals"]["success_rate"] == 1.0
