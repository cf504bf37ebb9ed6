"""The lifecycle's vocabulary and its state machine: every state, phase, notebook status, verdict and event
name the server writes, and the one table of the transitions between states.

The names are `str` Enums, so each member equals the string that goes to disk, over REST and into the UI
(``State.PAUSED == "paused"``): state.json, events.jsonl and the TypeScript types keep their spelling.
docs/architecture.md draws the table below (tests/test_states.py checks the drawing against it).
"""
from __future__ import annotations

import enum


class Name(str, enum.Enum):
    """A name of the vocabulary: equal to its string, and shown as it (f-strings, messages)."""

    def __str__(self) -> str:
        return self.value


class State(Name):
    ACTIVE = "active"
    PAUSING = "pausing"
    PAUSED = "paused"
    RESUMING = "resuming"
    FAILED = "failed"


class Phase(Name):
    """The steps of a transition; only `pausing` and `resuming` have them."""
    CHECKPOINTING = "checkpointing"
    SNAPSHOTTING = "snapshotting"
    RELEASING = "releasing"
    WAITING_FOR_CAPACITY = "waiting-for-capacity"
    RESTORING = "restoring"
    VERIFYING = "verifying"


class NotebookStatus(Name):
    """One notebook's `status` in the status document."""
    RUNNING = "running"
    CHECKPOINTED = "checkpointed"
    RELEASED = "released"
    RESUMED = "resumed"
    BUSY = "busy"
    NOT_CHECKPOINTED = "not-checkpointed"
    LOST = "lost"
    FAILED = "failed"
    SUSPENDED = "suspended"  # local GPU suspend: the process lives on, its GPU state in host memory
    KEPT_RUNNING = "kept-running"  # local suspend mode, a kernel with no CUDA context: nothing to release


class Verdict(Name):
    """How a notebook came back from a resume."""
    LIVE_VERIFIED = "live-verified"
    RESTORED_FROM_CHECKPOINT = "restored-from-checkpoint"
    PARTIALLY_RESTORED = "partially-restored"  # restored, but some variables failed (the notebook's `failed`)
    FAILED = "failed"


class PauseReason(Name):
    """Who asked for a pause: the `reason` of its pause-requested event, the report's column and the
    `reason` label of gkews_pauses_total."""
    USER = "user"
    IDLE_POLICY = "idle policy"
    RESUME_TEST = "resume-test"  # `jupyter gkews resume-test`: not a user's pause, counted apart


#: the reasons a REST request may give (the idle policy's is the server's own)
REQUEST_PAUSE_REASONS = (PauseReason.USER, PauseReason.RESUME_TEST)


#: the verdicts that count as a successful resume (the report's success rate): a partial restore is not one
OK_VERDICTS = (Verdict.LIVE_VERIFIED, Verdict.RESTORED_FROM_CHECKPOINT)


class Event(Name):
    """The `event` of each line of events.jsonl (docs/rest-api.md, "Events")."""
    STARTED = "started"
    PAUSE_REQUESTED = "pause-requested"
    NOTEBOOK_CHECKPOINTED = "notebook-checkpointed"
    NOTEBOOK_NOT_CHECKPOINTED = "notebook-not-checkpointed"
    NOTEBOOK_CHECKPOINTED_AGAIN = "notebook-checkpointed-again"
    NOTEBOOK_RENAMED = "notebook-renamed"
    NOTEBOOK_DELETED = "notebook-deleted"
    SNAPSHOTTING = "snapshotting"
    SNAPSHOT_FAILED = "snapshot-failed"
    RELEASING = "releasing"
    PAUSED = "paused"
    RESUME_REQUESTED = "resume-requested"
    RESTORED_DETECTED = "restored-detected"
    RESTORING = "restoring"
    VERIFYING = "verifying"
    NOTEBOOK_RESUMED = "notebook-resumed"
    RESUMED = "resumed"
    KERNEL_USABLE = "kernel-usable"
    FAILED = "failed"
    RECOVERED_PAUSED = "recovered-paused"
    RECOVERED_INTERRUPTED_PAUSE = "recovered-interrupted-pause"
    RECOVERED_INTERRUPTED_RESUME = "recovered-interrupted-resume"


#: the phases each state may be in (None: no phase)
PHASES: dict[State, tuple[Phase | None, ...]] = {
    State.ACTIVE: (None,),
    State.PAUSING: (Phase.CHECKPOINTING, Phase.SNAPSHOTTING, Phase.RELEASING),
    State.PAUSED: (None,),
    State.RESUMING: (Phase.WAITING_FOR_CAPACITY, Phase.RESTORING, Phase.VERIFYING),
    State.FAILED: (None,),
}

#: The transitions between states, each with what causes it. A state that moves to itself advances its
#: phase. RECOVERIES (below) holds the moves of a server starting on a half-done transition.
TRANSITIONS: dict[tuple[State, State], str] = {
    (State.ACTIVE, State.PAUSING): "pause requested",
    (State.FAILED, State.PAUSING): "pause requested again",
    (State.PAUSED, State.PAUSING): "pause of notebooks the last pause left running",
    (State.PAUSING, State.PAUSING): "next pause phase",
    (State.PAUSING, State.PAUSED): "kernels released",
    (State.PAUSING, State.FAILED): "nothing checkpointed, snapshot refused, or an error",
    (State.PAUSING, State.RESUMING): "woke up in a restored snapshot",
    (State.PAUSED, State.RESUMING): "resume requested, or woke up restored",
    (State.FAILED, State.RESUMING): "resume requested again",
    (State.PAUSED, State.ACTIVE): "resume with no notebook left to restore",
    (State.ACTIVE, State.RESUMING): "resume of notebooks a resume left paused or failed",
    (State.RESUMING, State.RESUMING): "next resume phase",
    (State.RESUMING, State.ACTIVE): "every notebook verified or restored",
    (State.RESUMING, State.FAILED): "an error during the resume",
}

#: What a server starting on a half-done transition does (Lifecycle.load): roll the pause forward, roll the
#: resume back. Not taken by a running server, so kept apart from TRANSITIONS.
RECOVERIES: dict[tuple[State, State], str] = {
    (State.PAUSING, State.PAUSED): "server restarted during a pause; finished on start",
    (State.PAUSING, State.FAILED): "server restarted during a pause that had checkpointed nothing",
    (State.RESUMING, State.PAUSED): "server restarted during a resume; resume again",
}

#: the source states from which each request may start (the claims)
PAUSE_FROM = (State.ACTIVE, State.FAILED, State.PAUSED)  # from paused: what it left running (busy, say)
RESUME_FROM = (State.PAUSED, State.FAILED, State.ACTIVE)  # from active: what a resume left behind (AWAITING)

#: a notebook in one of these, with a checkpoint, is still to be brought back by a resume: released by a
#: pause and not named in a resume since, or left failed by one. A later pause carries it over as it is.
AWAITING_STATUSES = (NotebookStatus.RELEASED, NotebookStatus.FAILED,
                     NotebookStatus.SUSPENDED, NotebookStatus.KEPT_RUNNING)


def awaiting_resume(notebook: dict) -> bool:
    return notebook.get("status") in AWAITING_STATUSES and bool(notebook.get("checkpoint"))


class IllegalTransition(RuntimeError):
    """A change of state the table does not allow: a bug in the server, never bad input."""


_ANY_PHASE = object()


def check_transition(old, new, phase=_ANY_PHASE) -> None:
    """Raise IllegalTransition unless the table allows old -> new (and, when phase is given, new has it)."""
    try:
        old, new = State(old), State(new)
    except ValueError as exc:
        raise IllegalTransition(f"unknown state: {exc}") from None
    if (old, new) not in TRANSITIONS:
        allowed = ", ".join(str(b) for a, b in TRANSITIONS if a == old) or "nothing"
        raise IllegalTransition(f"{old} -> {new} is not a transition of the lifecycle; from {old}: {allowed}")
    if phase is not _ANY_PHASE and phase not in PHASES[new]:
        shown = None if phase is None else str(phase)
        raise IllegalTransition(f"{new} has no phase {shown!r}; its phases: "
                                + ", ".join(str(p) for p in PHASES[new]))


def check_recovery(old, new) -> None:
    """Raise IllegalTransition unless RECOVERIES lets a starting server move old -> new."""
    try:
        old, new = State(old), State(new)
    except ValueError as exc:
        raise IllegalTransition(f"unknown state: {exc}") from None
    if (old, new) not in RECOVERIES:
        raise IllegalTransition(f"{old} -> {new} is not a recovery of a starting server; recoveries: "
                                + ", ".join(f"{a} -> {b}" for a, b in RECOVERIES))


def mermaid() -> str:
    """The table as a Mermaid state diagram (docs/architecture.md holds this text)."""
    lines = ["stateDiagram-v2", "    [*] --> active"]
    for (a, b), why in TRANSITIONS.items():
        lines.append(f"    {a} --> {b}: {why}")
    for (a, b), why in RECOVERIES.items():
        lines.append(f"    {a} --> {b}: {why}")
    return "\n".join(lines)
