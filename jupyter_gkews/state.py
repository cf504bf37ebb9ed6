"""The lifecycle's memory: one state document, replaced atomically, and an append-only event log.

A server that stops at any moment finds, when it starts again, the last state it wrote and every
transition that led there (timestamped JSON lines), so it can say where it was and finish or roll back.
"""
from __future__ import annotations

import json
import os
import time

from kernel_state.fsutil import write_json_durable

from .states import State

STATES = tuple(s.value for s in State)


def now() -> float:
    return round(time.time(), 3)


def initial_state(backend: str) -> dict:
    return {"state": "active", "phase": None, "message": "", "backend": backend, "cycle": 0,
            "timeline": {}, "notebooks": [], "progress": None, "error": None, "updated": now()}


class StateStore:
    def __init__(self, directory: str):
        self.directory = os.path.abspath(os.path.expanduser(directory))
        self.state_path = os.path.join(self.directory, "state.json")
        self.events_path = os.path.join(self.directory, "events.jsonl")

    def load(self) -> dict | None:
        try:
            with open(self.state_path) as f:
                state = json.load(f)
        except FileNotFoundError:
            return None
        except ValueError:
            # a torn write cannot happen (we rename), so this is damage from outside: say so, start over
            os.replace(self.state_path, self.state_path + f".corrupt-{int(time.time())}")
            return None
        return state if isinstance(state, dict) and state.get("state") in STATES else None

    def save(self, state: dict) -> None:
        """Replace the state document: temp file, fsync, rename, fsync of the directory."""
        os.makedirs(self.directory, exist_ok=True)
        write_json_durable(state, self.state_path, self.directory)

    def append_event(self, event: dict) -> None:
        os.makedirs(self.directory, exist_ok=True)
        line = json.dumps(event, separators=(",", ":")) + "\n"
        with open(self.events_path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def events(self, since: float = 0.0, limit: int = 1000) -> list[dict]:
        try:
            with open(self.events_path) as f:
                lines = f.readlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash mid-append
            if event.get("time", 0) > since:
                out.append(event)
        return out[-limit:]
