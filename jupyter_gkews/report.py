"""What pausing gave back and what resuming cost, computed from the lifecycle's event log alone.

The cycles come from jupyter_gkews.cycles, the one reader of the event log (the metrics use it too).
GPU hours released = (capacity obtained, or the report's end while still paused, minus environment
stopped) x GPUs. Percentiles are nearest-rank.
"""
from __future__ import annotations

import math
import re
import time

from kernel_state.store import CHECKPOINT_ID

from .cycles import build_cycles, gpu_hours_released, released_hours
from .lifecycle.paths import moved_path, one_line, under
from .states import OK_VERDICTS, Event, PauseReason, Verdict

DAY = 86400.0


def _seconds(t: dict, start: str, end: str) -> float | None:
    if t.get(start) is None or t.get(end) is None:
        return None
    return max(0.0, t[end] - t[start])


def measure(cycle: dict, until: float) -> dict:
    """The derived figures of one cycle: idle before the pause, hours released, resume times."""
    t = cycle["timeline"]
    verdicts: dict[str, int] = {}
    for attempt in resumes(cycle):
        verdicts[attempt["verdict"]] = verdicts.get(attempt["verdict"], 0) + 1
    return {
        "idle_seconds": _seconds(t, "last_activity", "pause_requested"),
        "checkpoint_seconds": _seconds(t, "pause_requested", "checkpoint_done"),
        "released_hours": released_hours(cycle, until),
        "still_paused": bool(t.get("environment_stopped")) and t.get("capacity_obtained") is None,
        "gpu_hours_released": gpu_hours_released(cycle, until),
        "checkpoint_bytes": sum(nb.get("bytes") or 0 for nb in cycle["notebooks"].values()),
        "written_bytes": sum(nb.get("bytes_written") or 0 for nb in cycle["notebooks"].values()),
        "verdicts": verdicts,
        # a resume that brought no notebook back (all deleted while paused) made no kernel usable
        "ready_seconds": _seconds(t, "resume_requested", "restore_done") if verdicts else None,
        "first_cell_seconds": _seconds(t, "resume_requested", "kernel_usable") if verdicts else None,
    }


def resumes(cycle: dict) -> list[dict]:
    """Each resume of each notebook of the cycle ({verdict, why}), the failed ones retried since too."""
    return [a for nb in cycle["notebooks"].values() for a in nb.get("resumes", []) if a.get("verdict")]


def verdict_counts(rows: list[dict]) -> dict[str, int]:
    """The notebook resumes of these cycles, by verdict."""
    counts: dict[str, int] = {}
    for r in rows:
        for v, n in r["verdicts"].items():
            counts[v] = counts.get(v, 0) + n
    return counts


def success_rate(verdicts: dict[str, int]) -> float | None:
    """Live-verified or restored-from-checkpoint over all resumes; None without any."""
    resumed = sum(verdicts.values())
    return round(sum(verdicts.get(v, 0) for v in OK_VERDICTS) / resumed, 4) if resumed else None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank: the smallest value with at least q of them at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def held_and_released(events: list[dict], cycles: list[dict], start: float, end: float) -> tuple[float, float]:
    """Hours in [start, end) that the environment held its GPUs and that it had released them. Time
    before the first event is unknown and counts as neither."""
    known_from = max(start, events[0]["time"]) if events else end
    released = sum(released_hours(c, end, start=known_from, end=end) for c in cycles)
    observed = max(0.0, end - known_from) / 3600
    return observed - released, released


def week(events: list[dict], cycles: list[dict], end: float, upto: float | None = None) -> dict:
    """Seven days ending at `end`, one row a day (UTC): hours held (allocated) and released, counted up to
    `upto` (now, for a week that has not ended yet)."""
    upto = end if upto is None else min(end, upto)
    day0 = math.ceil(end / DAY) * DAY - 7 * DAY  # the day `end` falls in is the last (a midnight ends one)
    days = []
    for i in range(7):
        s = day0 + i * DAY
        held, released = held_and_released(events, cycles, s, max(s, min(s + DAY, upto)))
        days.append({"date": time.strftime("%Y-%m-%d", time.gmtime(s)), "day": time.strftime("%a", time.gmtime(s)),
                     "allocated_hours": round(held, 3), "released_hours": round(released, 3)})
    allocated = sum(d["allocated_hours"] for d in days)
    released = sum(d["released_hours"] for d in days)
    return {"start": time.strftime("%Y-%m-%d", time.gmtime(day0)), "days": days,
            "allocated_hours": round(allocated, 3), "released_hours": round(released, 3),
            "observed_hours": round(allocated + released, 3)}


def follow_renames(events: list[dict]) -> list[dict]:
    """The events with each notebook path as it is after the renames logged later: a notebook renamed
    (or moved with its folder) while paused is one notebook, under its latest path."""
    later: list[tuple[str, str]] = []  # the renames after the event at hand, in order
    out = []
    for e in reversed(events):
        if e.get("event") == Event.NOTEBOOK_RENAMED and e.get("old") and e.get("new"):
            later.insert(0, (e["old"], e["new"]))
        elif later and (e.get("path") or e.get("event") == Event.NOTEBOOK_DELETED):
            e = {**e, "path": _latest(e.get("path"), later)}
            if isinstance(e.get("notebooks"), list):  # the notebooks a deletion lost
                e["notebooks"] = [_latest(p, later) for p in e["notebooks"]]
        out.append(e)
    return out[::-1]


def _latest(path, renames: list[tuple[str, str]]):
    """path after the renames, in order."""
    if not isinstance(path, str):
        return path
    for old, new in renames:
        if under(path, old):
            path = moved_path(path, old, new)
    return path


def deleted_while_paused(events: list[dict]) -> dict[int, list[str]]:
    """The notebooks each cycle lost because their file was deleted while paused (however it was noticed:
    through the contents API, by a rename onto their path, or by the resume): not resumed, so not counted
    among the resumes, neither failed nor successful."""
    out: dict[int, list[str]] = {}
    for e in events:
        if e.get("event") == Event.NOTEBOOK_DELETED and (e.get("cycle") or 0) > 0:
            lost = out.setdefault(e["cycle"], [])
            lost += [p for p in e.get("notebooks") or [] if p not in lost]
    return out


#: an absolute file path: a word of its own (after a space, a bracket or a quote, or first) that starts with
#: `/`, maybe in brackets or quotes (`the file /c/blobs/1a2b.pkl`, `(/c/blobs/1a2b.pkl)`, `'/c/x.pkl'`); not a
#: `/` inside a word (`</script>`, `a/b`, `1/2`, `http://`)
_PATH = re.compile(r""" ?(\()?(['"]?)(?<![^\s(\['"])/[^\s'"()<>\[\]]+\2(?(1)\))""")
_AFTER_PREPOSITION = re.compile(r"""\b(in|at|under|from|into|to) /[^\s'"()<>\[\]]+""")


def _cause(reason: str) -> str:
    """A restore failure's reason without what names one blob or file (`blob 1a2b3c… does not match its hash:
    the file /x/blobs/1a2b….pkl was …`), so that the same cause groups as one."""
    reason = re.sub(r"\bblob [0-9a-f]{6,}", "a blob", reason)
    # each cycle's own checkpoint: "checkpoint '<id>'" reads "a checkpoint"; an id in a file name or a command
    # (`manifest <id>.json`, `delete <id>`) keeps its place, as <id>
    reason = re.sub(rf"\bcheckpoint '?{CHECKPOINT_ID.pattern}'?", "a checkpoint", reason)
    reason = re.sub(CHECKPOINT_ID.pattern, "<id>", reason)
    # a path a preposition needs stays as "…" (`no checkpoint in …`); elsewhere it goes with its space
    reason = _AFTER_PREPOSITION.sub(r"\1 …", reason)
    return _PATH.sub("", reason).strip().rstrip(":").rstrip()


def build_report(events: list[dict], until: float | None = None) -> dict:
    """The report of the events up to `until` (default now); later ones are left out, and so are the hours
    after now of an `until` still to come (a week's report asked before the week ended)."""
    now = time.time()
    until = now if until is None else until
    asked, until = until, min(until, now)
    later = sum(1 for e in events if e.get("time", 0) > until)  # said: a clock set ahead hid a whole week
    events = follow_renames([e for e in events if e.get("time", 0) <= until])
    cycles = build_cycles(events)
    deleted = deleted_while_paused(events)
    rows = []
    for c in cycles:
        rows.append({"cycle": c["cycle"], "reason": c["reason"], "gpus": c["gpus"] or 0, "result": c["result"],
                     "timeline": c["timeline"], "notebooks": c["notebooks"], "snapshot_bytes": c["snapshot_bytes"],
                     "pause_failed": c["pause_failed"], "resume_failed": c["resume_failed"],
                     "deleted": deleted.get(c["cycle"], []), **measure(c, until)})
    # resume-test's scripted cycles are a release check, not the users' experience: their resumes, times and
    # idle time are counted apart (their releases and writes did happen, and count as such)
    users = [r for r in rows if r["reason"] != PauseReason.RESUME_TEST]
    tests = [r for r in rows if r["reason"] == PauseReason.RESUME_TEST]
    verdicts, test_verdicts = verdict_counts(users), verdict_counts(tests)
    fallbacks: dict[str, int] = {}
    failures: dict[str, int] = {}
    pause_failures: dict[str, int] = {}
    for r in users:
        if r["pause_failed"]:
            pause_failures[r["pause_failed"]] = pause_failures.get(r["pause_failed"], 0) + 1
        for attempt in resumes(r):
            why = attempt.get("why") or "unknown"
            if attempt["verdict"] in (Verdict.RESTORED_FROM_CHECKPOINT, Verdict.PARTIALLY_RESTORED):
                fallbacks[why] = fallbacks.get(why, 0) + 1
            for name, reason in attempt.get("failed", {}).items():  # a partial restore: each variable it lost
                key = f"variable not restored ({_cause(reason)})"
                failures[key] = failures.get(key, 0) + 1
            if attempt["verdict"] == Verdict.FAILED:
                cause = _cause(why)
                failures[cause] = failures.get(cause, 0) + 1
        if r["resume_failed"]:
            failures[r["resume_failed"]] = failures.get(r["resume_failed"], 0) + 1
    resumed = sum(verdicts.values())
    ready = [r["ready_seconds"] for r in users if r["ready_seconds"] is not None]
    first = [r["first_cell_seconds"] for r in users if r["first_cell_seconds"] is not None]
    paused = [r for r in rows if r["result"] in ("paused", "resumed")]
    idle = [r["idle_seconds"] for r in users if r["idle_seconds"] is not None and r in paused]
    totals = {
        "cycles": len(rows),
        "paused": len(paused),
        # of those pauses (a failed attempt paused nothing, and its idle time is counted by the pause after it)
        "by_idle_policy": sum(1 for r in paused if r["reason"] == PauseReason.IDLE_POLICY),
        "by_resume_test": sum(1 for r in paused if r["reason"] == PauseReason.RESUME_TEST),
        "idle_hours_before_pause": round(sum(idle) / 3600, 4),
        "released_hours": round(sum(r["released_hours"] for r in rows), 4),
        "gpu_hours_released": round(sum(r["gpu_hours_released"] for r in rows), 4),
        "checkpoint_bytes": sum(r["checkpoint_bytes"] for r in rows),
        "written_bytes": sum(r["written_bytes"] for r in rows),
        "snapshot_bytes": sum(r["snapshot_bytes"] for r in rows),
        "verdicts": verdicts,
        "notebooks_resumed": resumed,
        "deleted_while_paused": sum(len(r["deleted"]) for r in rows),
        "success_rate": success_rate(verdicts),
        "ready_seconds_p50": percentile(ready, 0.5), "ready_seconds_p95": percentile(ready, 0.95),
        "first_cell_seconds_p50": percentile(first, 0.5), "first_cell_seconds_p95": percentile(first, 0.95),
        "fallbacks": fallbacks, "failures": failures, "pause_failures": pause_failures,
        "resume_test": {"notebooks_resumed": sum(test_verdicts.values()), "verdicts": test_verdicts,
                        "success_rate": success_rate(test_verdicts)},
    }
    return {"until": until, "cycles": rows, "totals": totals, "week": week(events, cycles, asked, until),
            "events_after_until": later}


# -- text ---------------------------------------------------------------------------------------------
def _fmt(value, spec: str = ".1f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _when(stamp) -> str:
    return "-" if stamp is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(stamp))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


COLUMNS = ("cycle", "paused at (UTC)", "by", "idle before", "released h", "GPU h", "ckpt MiB", "snap MiB",
           "verdicts", "ready s", "1st cell s")


def text(report: dict) -> str:
    rows = []
    for r in report["cycles"]:
        verdicts = ", ".join([f"{n} {v}" for v, n in sorted(r["verdicts"].items())]
                             + ([f"{len(r['deleted'])} deleted"] if r["deleted"] else [])) or (
            "pause failed" if r["pause_failed"] else "resume failed" if r["resume_failed"] else
            "still paused" if r["still_paused"] else "-")
        idle = r["idle_seconds"]
        rows.append((str(r["cycle"]), _when(r["timeline"].get("pause_requested")), r["reason"] or "-",
                     "-" if idle is None else f"{idle / 60:.1f} min", f"{r['released_hours']:.2f}",
                     f"{r['gpu_hours_released']:.2f}", _mib(r["checkpoint_bytes"]), _mib(r["snapshot_bytes"]),
                     verdicts, _fmt(r["ready_seconds"]), _fmt(r["first_cell_seconds"])))
    widths = [max([len(COLUMNS[i])] + [len(row[i]) for row in rows]) for i in range(len(COLUMNS))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(COLUMNS), line(["-" * w for w in widths])] + [line(r) for r in rows]
    if not rows:
        out.append("(no pause in the event log yet)")
    later = report.get("events_after_until", 0)
    if later:
        out.append(f"({later} event(s) of the log are dated after {_when(report['until'])} UTC and left out: "
                   f"an earlier --until, or a clock that was set ahead when they were written)")
    t, w = report["totals"], report["week"]
    rate = "-" if t["success_rate"] is None else f"{t['success_rate'] * 100:.0f}%"
    out += [
        "",
        f"pauses: {t['paused']} of {t['cycles']} cycle(s), {t['by_idle_policy']} by the idle policy"
        + (f", {t['by_resume_test']} by resume-test" if t["by_resume_test"] else "") + "; "
        f"idle time before the pauses: {t['idle_hours_before_pause']:.2f} h",
        f"released: {t['released_hours']:.2f} h, {t['gpu_hours_released']:.2f} GPU hours",
        f"written by the pauses: {_mib(t['written_bytes'])} MiB of checkpoints (what the store did not hold "
        f"yet), snapshots {_mib(t['snapshot_bytes'])} MiB; the checkpoints' sizes add up to "
        f"{_mib(t['checkpoint_bytes'])} MiB (a blob several of them share counts in each)",
    ]
    if "checkpoint_bytes_on_disk" in t:
        out.append(f"kept: the checkpoint store holds {_mib(t['checkpoint_bytes_on_disk'])} MiB now")
    out += [
        f"resumes: {t['notebooks_resumed']} notebook resume(s), success {rate} ("
        + (", ".join(f"{n} {v}" for v, n in sorted(t["verdicts"].items())) or "none") + ")",
    ]
    rt = t["resume_test"]
    if rt["notebooks_resumed"]:
        out.append(f"resume-test (not counted above or below): {rt['notebooks_resumed']} notebook resume(s), success "
                   f"{rt['success_rate'] * 100:.0f}% ("
                   + ", ".join(f"{n} {v}" for v, n in sorted(rt["verdicts"].items())) + ")")
    if t["deleted_while_paused"]:
        out.append(f"deleted while paused (not resumed, not counted above): {t['deleted_while_paused']} notebook(s)")
    out += [
        f"time to a usable kernel (resume requested -> ready): p50 {_fmt(t['ready_seconds_p50'], '.1f', ' s')}, "
        f"p95 {_fmt(t['ready_seconds_p95'], '.1f', ' s')}; to the first cell run: "
        f"p50 {_fmt(t['first_cell_seconds_p50'], '.1f', ' s')}, p95 {_fmt(t['first_cell_seconds_p95'], '.1f', ' s')}",
    ]
    for title, causes in (("pauses that failed", t["pause_failures"]),
                          ("fallbacks to the checkpoint", t["fallbacks"]), ("failures", t["failures"])):
        if causes:
            out.append(f"{title}:")
            # one line each, as in the status (a reason may hold a newline)
            out += [f"  {n} x {one_line(why)}" for why, n in sorted(causes.items(), key=lambda kv: -kv[1])]
    # two decimals, as the totals above (with one, a short week's 0.03 h released read 0.0 beside them)
    out.append(f"week from {w['start']}: {w['observed_hours']:.2f} h observed, {w['allocated_hours']:.2f} h "
               f"allocated, {w['released_hours']:.2f} h released")
    return "\n".join(out)
