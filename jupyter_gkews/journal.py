"""The lifecycle's journal: what one line of events.jsonl holds.

Every write path of the lifecycle (a step of a transition, a change published after it is on disk, the
records of a starting server) builds its record here, so each line has the same head whatever wrote it:
{"time", "event", "state", "phase", "cycle", ...details}. jupyter_gkews.cycles reads them back.
"""
from __future__ import annotations

from .states import Event


def event_record(state: dict, event: Event | str, **details) -> dict:
    """The record of `event` for the state document `state` (its `updated` is the event's time)."""
    return {"time": state["updated"], "event": Event(event).value, "state": str(state["state"]),
            "phase": None if state["phase"] is None else str(state["phase"]), "cycle": state["cycle"], **details}
