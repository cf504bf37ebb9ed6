"""The one reader of the event log: events (jupyter_gkews.journal) folded into pause/resume cycles.

A cycle is everything with one cycle number: pause requested (with the last user activity, who asked and
the GPU count), each notebook checkpointed (bytes), the snapshot, paused (its timeline), resume requested,
capacity obtained ("restoring", or "restored-detected" when the process woke up in a restored snapshot),
each notebook resumed (verdict and why), resumed, kernel usable.

The report reads a whole log (build_cycles); the Prometheus metrics feed the same reducer one event at a
time as the server writes them (Cycles.add). GPU hours released are computed here only (released_hours).

A resume retried in the same cycle (a notebook failed) adds only the times the cycle lacks: its resume
requested, capacity obtained and ready stay as the first resume set them, so the GPU hours (the GPUs came
back at the first capacity obtained) and the ready time never change afterwards.
"""
from __future__ import annotations

import math

from .states import Event, PauseReason, State, Verdict


def new_cycle(number: int) -> dict:
    # gpus: the count the pause recorded; None until its pause-requested event is read (or in logs older than it)
    return {"cycle": number, "reason": None, "gpus": None, "notebooks": {}, "result": None, "snapshot_bytes": 0,
            "resume_failed": None, "pause_failed": None, "released_all": True, "kept": (), "timeline": {}}


def _merge(c: dict, times: dict | None) -> None:
    """The times of a step, but those an earlier resume of the cycle set (`kept`)."""
    c["timeline"].update({k: v for k, v in (times or {}).items() if v is not None and k not in c["kept"]})


class Cycles:
    """Cycles by number, updated one event at a time."""

    def __init__(self):
        self.by_number: dict[int, dict] = {}
        #: cycles the last event ended without a resume of their own (see _close_earlier)
        self.closed: list[dict] = []
        #: a pause from paused that paused nothing (a busy kernel) -> the cycle it left paused: its later
        #: events (the resume) are that cycle's
        self.continued: dict[int, int] = {}

    def add(self, e: dict, timeline: dict | None = None) -> dict | None:
        """Fold one event in; the cycle it belongs to (None for events outside any cycle). A live server
        also passes its status's timeline, whose times are the ones the status shows."""
        n = e.get("cycle") or 0
        if n <= 0:
            return None
        n = self.continued.get(n, n)
        c = self.by_number.setdefault(n, new_cycle(n))
        t, kind = c["timeline"], e.get("event")
        self.closed = []
        if kind == Event.PAUSE_REQUESTED:
            t["pause_requested"] = e["time"]
            t["last_activity"] = e.get("last_activity")
            c.update(reason=e.get("reason", PauseReason.USER), gpus=e.get("gpus"))
        elif kind in (Event.NOTEBOOK_CHECKPOINTED, Event.NOTEBOOK_NOT_CHECKPOINTED):
            c["notebooks"].setdefault(e["path"], {})["bytes"] = e.get("bytes") or 0
            # what the pause wrote: only what the store did not hold yet (events before this field: the size)
            c["notebooks"][e["path"]]["bytes_written"] = e.get("bytes_written", e.get("bytes")) or 0
            if kind == Event.NOTEBOOK_NOT_CHECKPOINTED:
                c["notebooks"][e["path"]]["pause_error"] = e.get("error")
        elif kind == Event.RELEASING:
            c["snapshot_bytes"] = int(((e.get("snapshot") or {}).get("bytes")) or 0)
        elif kind == Event.PAUSED and e.get("continues_cycle"):
            # nothing more was paused: an attempt that failed, with its cause; the earlier cycle goes on
            self.continued[n] = e["continues_cycle"]
            c.update(result="pause failed", pause_failed=e.get("message"))
            return c
        elif kind in (Event.PAUSED, Event.RESUMED):
            times = dict(e.get("timeline") or {})
            # every notebook the resumes brought back failed: no kernel is ready yet (a retry that brings one is)
            unusable = kind == Event.RESUMED and not c.get("usable") and any(
                nb.get("resumes") for nb in c["notebooks"].values())
            if unusable:
                times.pop("restore_done", None)
            _merge(c, times)
            if kind == Event.PAUSED:
                # a pause from paused that released more: the earlier cycle's release ends as it was asked
                self._close_earlier(n, t.get("pause_requested", e["time"]))
                t.setdefault("environment_stopped", e["time"])
                c["result"] = "paused"
                # False: a kernel the pause left running kept the GPUs (older logs: every GPU was released)
                c["released_all"] = e.get("environment_released", True)
            else:
                if not unusable:
                    t.setdefault("restore_done", e["time"])
                # a resume with nothing to restore (every notebook lost) has no `restoring` step
                t.setdefault("capacity_obtained", t.get("resume_requested") or e["time"])
                c["result"] = "resumed"
        elif kind == Event.RECOVERED_INTERRUPTED_PAUSE and e.get("state") == State.FAILED:
            c["pause_failed"] = e.get("message")  # no checkpoint committed: nothing was paused
            c["result"] = "pause failed"
        elif kind == Event.RECOVERED_INTERRUPTED_PAUSE:  # the kernels stopped with the server (when it said so)
            t.setdefault("environment_stopped", (e.get("timeline") or {}).get("environment_stopped") or e["time"])
            c["result"] = "paused"
        elif kind == Event.RESUME_REQUESTED:
            if "resume_requested" in t:  # a retry: what the first resume timed stays
                c["kept"] = tuple(t)
            else:
                t["resume_requested"] = e["time"]
        elif kind in (Event.RESTORING, Event.RESTORED_DETECTED):
            t.setdefault("capacity_obtained", e["time"])
        elif kind == Event.NOTEBOOK_RESUMED:
            nb = c["notebooks"].setdefault(e["path"], {})
            nb.update(verdict=e.get("verdict"), why=e.get("why"))
            # every resume of it counts, as in the metrics: a failed one retried in the same cycle too
            nb.setdefault("resumes", []).append({"verdict": e.get("verdict"), "why": e.get("why"),
                                                 "failed": e.get("failed") or {}})
            if e.get("verdict") not in (None, Verdict.FAILED):
                c["usable"] = True  # this resume made a kernel usable: its end is the cycle's "ready"
        elif kind == Event.KERNEL_USABLE:
            t.setdefault("kernel_usable", e.get("kernel_usable") or e["time"])
        elif kind == Event.FAILED:
            key = "resume_failed" if "resume_requested" in t else "pause_failed"
            c[key] = e.get("reason") or e.get("message")
            if key == "pause_failed":
                c["result"] = "pause failed"
        _merge(c, timeline)
        return c

    def _close_earlier(self, number: int, time: float) -> None:
        """A pause from paused that paused more starts a cycle while the earlier one is still released: the
        earlier one ends where the new one was asked, and the new one counts from its own release on, so
        that no hour counts twice (and none of the earlier cycle stays "still paused" once the new one
        resumed). One that paused nothing ends nothing (continued, above)."""
        for other in self.by_number.values():
            ot = other["timeline"]
            if other["cycle"] < number and ot.get("environment_stopped") and not ot.get("capacity_obtained"):
                ot["capacity_obtained"] = max(time, ot["environment_stopped"])
                other["ended_by"] = number
                self.closed.append(other)

    def list(self) -> list[dict]:
        return [self.by_number[n] for n in sorted(self.by_number)]


def build_cycles(events: list[dict]) -> list[dict]:
    """One dict per pause, in order, with its timeline and per-notebook bytes and verdicts."""
    cycles = Cycles()
    for e in events:
        cycles.add(e)
    return cycles.list()


def released_hours(cycle: dict, until: float, start: float = -math.inf, end: float = math.inf) -> float:
    """Hours the cycle's environment had released its GPUs: from the environment stopping to capacity being
    obtained again (or `until`, while still paused), counted inside [start, end). None at all when the pause left
    a kernel running: it kept the GPUs (a local pause of some notebooks)."""
    t = cycle["timeline"]
    stopped = t.get("environment_stopped")
    if not stopped or not cycle.get("released_all", True):
        return 0.0
    back = min(t.get("capacity_obtained") or until, end)
    return max(0.0, back - max(stopped, start)) / 3600


def gpu_hours_released(cycle: dict, until: float) -> float:
    return released_hours(cycle, until) * (cycle["gpus"] or 0)
