"""Prometheus metrics, served by jupyter_server's own /metrics (it uses prometheus_client's REGISTRY).

They are updated from the lifecycle's events as they are written (Lifecycle.listeners), so a metric
never says something the event log does not. Registered once per process: several servers in one process
(tests) share them, so read them as differences.
"""
from __future__ import annotations

from prometheus_client import Counter, Enum, Gauge

from .state import STATES

SESSION_STATE = Enum("gkews_session_state", "The session's lifecycle state.", states=list(STATES))
PAUSES = Counter("gkews_pauses", "Pauses that finished, by who asked (user or idle policy) and result "
                 "(paused or failed).", ["reason", "result"])
RESUMES = Counter("gkews_resumes", "Notebooks resumed, by verdict (live-verified, restored-from-checkpoint, "
                  "failed).", ["verdict"])
CHECKPOINT_SECONDS = Gauge("gkews_last_checkpoint_seconds", "Seconds the last pause took to checkpoint its "
                           "notebooks (pause requested to checkpoints done).")
CHECKPOINT_BYTES = Gauge("gkews_last_checkpoint_bytes", "Bytes of the checkpoints the last pause kept "
                         "(all its notebooks).")
GPU_HOURS_RELEASED = Counter("gkews_gpu_hours_released", "GPU hours released: from the environment stopping "
                             "to capacity being obtained again, times the session's GPU count.")
GPUS = Gauge("gkews_gpus", "GPUs this session holds while it runs (c.GkewsApp.gpu_count).")


class MetricsRecorder:
    """A Lifecycle listener: (event record, state after it) -> metric updates. Called from any thread."""

    def __init__(self, gpu_count: int):
        GPUS.set(gpu_count)
        self.gpu_count = gpu_count
        self._reason = "user"
        self._transition: str | None = None  # "pause" or "resume" while one runs
        self._resuming: set[str] = set()

    def __call__(self, record: dict, state: dict) -> None:
        SESSION_STATE.state(state["state"])
        event = record["event"]
        timeline = state.get("timeline") or {}
        if event == "pause-requested":
            self._reason = record.get("reason", "user")
            self._transition = "pause"
        elif event == "paused":
            self._transition = None
            PAUSES.labels(self._reason, "paused").inc()
            nbs = [nb for nb in state["notebooks"] if nb.get("checkpoint") and nb.get("bytes") is not None]
            CHECKPOINT_BYTES.set(sum(nb["bytes"] for nb in nbs))
            if timeline.get("checkpoint_done") and timeline.get("pause_requested"):
                CHECKPOINT_SECONDS.set(timeline["checkpoint_done"] - timeline["pause_requested"])
        elif event == "resume-requested":
            self._resuming = set(record.get("notebooks") or [])
            self._transition = "resume"
        elif event == "restoring":
            stopped, back = timeline.get("environment_stopped"), timeline.get("capacity_obtained")
            if stopped and back and back > stopped:
                GPU_HOURS_RELEASED.inc((back - stopped) / 3600 * self.gpu_count)
        elif event == "notebook-resumed":
            RESUMES.labels(record.get("verdict") or "failed").inc()
            self._resuming.discard(record.get("path"))
        elif event == "resumed":
            self._transition = None
        elif event == "failed":
            if self._transition == "pause":
                PAUSES.labels(self._reason, "failed").inc()
            elif self._transition == "resume":  # a resume that stopped: the notebooks it had not finished failed
                RESUMES.labels("failed").inc(len(self._resuming))
            self._transition, self._resuming = None, set()
