"""Prometheus metrics, served by jupyter_server's own /metrics (it uses prometheus_client's REGISTRY).

They are updated from the lifecycle's events as they are written (Lifecycle.listeners), so a metric
never says something the event log does not. Registered once per process: several servers in one process
(tests) share them, so read them as differences.
"""
from __future__ import annotations

from prometheus_client import Counter, Enum, Gauge

from .cycles import Cycles, gpu_hours_released
from .states import Event, NotebookStatus, State, Verdict

UNAVAILABLE = "unavailable"  # the extension is off (a setting, its state directory): nothing pauses or resumes
SESSION_STATE = Enum("gkews_session_state", "The session's lifecycle state; unavailable while the extension is "
                     "off (the server log says why).", states=[s.value for s in State] + [UNAVAILABLE])
PAUSES = Counter("gkews_pauses", "Pauses that finished, by who asked (user, idle policy or resume-test) and "
                 "result (paused or failed).", ["reason", "result"])
RESUMES = Counter("gkews_resumes", "Notebooks resumed, by verdict (live-verified, restored-from-checkpoint, "
                  "partially-restored, failed); a notebook deleted while paused is not resumed.", ["verdict"])
CHECKPOINT_SECONDS = Gauge("gkews_last_checkpoint_seconds", "Seconds the last pause took to checkpoint its "
                           "notebooks (pause requested to checkpoints done); 0 until a pause this server (or the "
                           "one before it, when restarted while paused) saw finish its checkpoints.")
CHECKPOINT_BYTES = Gauge("gkews_last_checkpoint_bytes", "Bytes of the checkpoints the paused state holds "
                         "(the last pause's, and those of notebooks an earlier pause left paused).")
GPU_HOURS_RELEASED = Counter("gkews_gpu_hours_released", "GPU hours released: from the environment stopping "
                             "to capacity being obtained again, times the session's GPU count; none for a pause "
                             "that left a kernel running.")
GPUS = Gauge("gkews_gpus", "GPUs this session holds while it runs (c.GkewsApp.gpu_count).")


def kept_bytes(state: dict) -> int:
    """The bytes of the checkpoints a paused state resumes from: the same figure live and after a restart
    (a pause from paused keeps the notebooks paused before it, with their checkpoints)."""
    return sum(nb.get("bytes") or 0 for nb in state.get("notebooks") or []
               if nb.get("checkpoint") and nb.get("status") != NotebookStatus.LOST)


class MetricsRecorder:
    """A Lifecycle listener: (event record, state after it) -> metric updates. Called from any thread.

    The events go through jupyter_gkews.cycles, the reducer the report uses, so a metric and the report
    count the same thing the same way (GPU hours released above all)."""

    def __init__(self, gpu_count: int, earlier_events=None):
        GPUS.set(gpu_count)
        self.gpu_count = gpu_count
        self.cycles = Cycles()
        #: the event log so far (StateStore.events): a server restarted mid-cycle (paused) folds in that
        #: cycle's earlier events, which its pause wrote, so that it counts the pause's GPU count and whether
        #: it released every GPU, not its own count and "all" (the report reads the whole log)
        self._earlier_events = earlier_events
        self._resuming: set[str] = set()
        self._started = False

    def _last_checkpoint(self, state: dict) -> None:
        """A server that starts on an earlier pause's state (restarted while paused): the gauges show that
        pause, as its PAUSED event did, from what the state keeps of it."""
        t = state.get("timeline") or {}
        if not t.get("environment_stopped"):
            return
        CHECKPOINT_BYTES.set(kept_bytes(state))
        if t.get("checkpoint_done") and t.get("pause_requested"):
            CHECKPOINT_SECONDS.set(t["checkpoint_done"] - t["pause_requested"])

    def _fold_earlier(self, record: dict) -> None:
        """The current cycle's events an earlier server wrote, into the reducer only (no metric moves), and
        those of the cycle it continues (a pause from paused that paused nothing)."""
        n = record.get("cycle") or 0
        if n <= 0 or self._earlier_events is None:
            return
        earlier = [e for e in self._earlier_events() if e != record]
        wanted = {n} | {e["continues_cycle"] for e in earlier if e.get("cycle") == n and e.get("continues_cycle")}
        for e in earlier:
            if e.get("cycle") in wanted:
                self.cycles.add(e)

    def _count_released(self, cycle: dict) -> None:
        """The hours the cycle's GPUs were released, once, when they are known (its capacity obtained)."""
        if cycle.get("gpu_hours_counted") or not cycle["timeline"].get("capacity_obtained"):
            return
        cycle["gpu_hours_counted"] = True
        GPU_HOURS_RELEASED.inc(gpu_hours_released(cycle, until=cycle["timeline"]["capacity_obtained"]))

    def __call__(self, record: dict, state: dict) -> None:
        if not self._started:  # the first event this process writes: its starting state
            self._started = True
            self._last_checkpoint(state)
            self._fold_earlier(record)
        SESSION_STATE.state(str(state["state"]))
        timeline = state.get("timeline") if state.get("cycle") == record.get("cycle") else None
        cycle = self.cycles.add(record, timeline)
        for ended in self.cycles.closed:  # a pause from paused ended the earlier cycle's release
            self._count_released(ended)
        if cycle is None:
            return
        if cycle["gpus"] is None:  # its pause-requested event is not in the log: count this server's GPUs
            cycle["gpus"] = self.gpu_count
        event, t = record["event"], cycle["timeline"]
        if event == Event.PAUSED and record.get("continues_cycle"):  # a pause from paused that paused nothing
            PAUSES.labels(cycle["reason"] or "user", "failed").inc()
        elif event == Event.PAUSED:
            PAUSES.labels(cycle["reason"] or "user", "paused").inc()
            CHECKPOINT_BYTES.set(kept_bytes(state))
            if t.get("checkpoint_done") and t.get("pause_requested"):
                CHECKPOINT_SECONDS.set(t["checkpoint_done"] - t["pause_requested"])
        elif event == Event.RECOVERED_INTERRUPTED_PAUSE:  # a pause a stopped server began, ended at this start
            paused = state["state"] == State.PAUSED
            PAUSES.labels(cycle["reason"] or "user", "paused" if paused else "failed").inc()
            if paused:  # (how long its checkpoints took was not seen: the seconds stay as they were)
                CHECKPOINT_BYTES.set(kept_bytes(state))
        elif event == Event.RESUME_REQUESTED:
            self._resuming = set(record.get("notebooks") or [])
        elif event in (Event.RESTORING, Event.RESTORED_DETECTED, Event.RESUMED):
            self._count_released(cycle)  # capacity is back (RESUMED: a resume with nothing to restore)
        elif event == Event.NOTEBOOK_RESUMED:
            RESUMES.labels(record.get("verdict") or Verdict.FAILED.value).inc()
            self._resuming.discard(record.get("path"))
        elif event == Event.NOTEBOOK_DELETED:  # deleted while paused: not resumed, so no resume, failed or not
            self._resuming.difference_update(record.get("notebooks") or [])
        elif event == Event.FAILED:
            if "resume_requested" not in t:
                PAUSES.labels(cycle["reason"] or "user", "failed").inc()
            else:  # a resume that stopped: the notebooks it had not finished failed
                RESUMES.labels(Verdict.FAILED.value).inc(len(self._resuming))
            self._resuming = set()
