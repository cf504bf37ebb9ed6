"""The lifecycle's memory: one state document, replaced atomically, and an append-only event log.

A server that stops at any moment finds, when it starts again, the last state it wrote and every
transition that led there (timestamped JSON lines), so it can say where it was and finish or roll back.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import time

from kernel_state.fsutil import write_json_durable

from .states import State

STATES = tuple(s.value for s in State)


def now() -> float:
    return round(time.time(), 3)


def initial_state(backend: str) -> dict:
    return {"state": State.ACTIVE, "phase": None, "message": "", "backend": backend, "cycle": 0,
            "timeline": {}, "notebooks": [], "progress": None, "error": None, "updated": now()}


class StateDirInUse(Exception):
    """Another running server owns this state directory."""


class StateDirNotOurs(Exception):
    """The state directory holds what jupyter-gkews did not write: it would replace or append to it."""


_OUR_FILES = re.compile(r"(state\.json|events\.jsonl|owner\.lock|state\.json\.corrupt-\d+|[0-9a-f]{32}\.tmp)")


def _our_state(path: str) -> bool:
    """Whether a state.json is one of ours, or damaged past reading (load() keeps that one aside)."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return True
    return isinstance(state, dict) and state.get("state") in STATES


class StateStore:
    def __init__(self, directory: str):
        self.directory = os.path.abspath(os.path.expanduser(directory))
        self.state_path = os.path.join(self.directory, "state.json")
        self.events_path = os.path.join(self.directory, "events.jsonl")
        self.owner_path = os.path.join(self.directory, "owner.lock")
        self._owner_fd: int | None = None

    def claim(self) -> None:
        """Become the one server that uses this directory, for as long as this process lives.

        Two servers on one state would each adopt the other's pause. The claim is an flock on owner.lock:
        the kernel drops it when the process ends (even on kill -9), so it never goes stale; the file says
        who holds it. Raises StateDirInUse naming the holder, StateDirNotOurs when the directory holds what
        we did not write, or OSError when the directory is unusable."""
        os.makedirs(self.directory, exist_ok=True)
        self._refuse_if_not_ours()
        try:  # never through a link: the claim truncates the file it opens
            fd = os.open(self.owner_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise OSError(errno.ELOOP, "is a symbolic link; jupyter-gkews writes its claim only into a file of its "
                                       "own: remove the link", self.owner_path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirInUse(
                f"the state directory {self.directory} is in use by another running jupyter-gkews server "
                f"({holder}); two servers on one state would resume each other's pause. Give each server "
                f"its own c.GkewsApp.state_dir (and checkpoint_root), or stop the other one") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        since = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n".encode(), 0)
        self._owner_fd = fd

    def _refuse_if_not_ours(self) -> None:
        """A state_dir pointed at a folder of the user's: its state.json would be replaced, its events.jsonl
        appended to (through a link, into a file elsewhere). Only our own files, never links, are taken."""
        foreign, links = [], []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.is_symlink():
                    if entry.name != "owner.lock":  # claim() refuses that one itself, saying how
                        links.append(entry.name)
                elif entry.is_dir() or not _OUR_FILES.fullmatch(entry.name) or \
                        entry.name == "state.json" and not _our_state(entry.path):
                    foreign.append(entry.name)
        if not foreign and not links:
            return
        shown = sorted(foreign)[:5] + ([f"... {len(foreign) - 5} more"] if len(foreign) > 5 else [])
        what = (f"files jupyter-gkews did not write ({', '.join(shown)})" if foreign else
                f"symbolic links ({', '.join(sorted(links))}), which jupyter-gkews never writes through")
        raise StateDirNotOurs(
            f"the state directory {self.directory} holds {what}; its state.json would be replaced and its "
            "events.jsonl appended to. Point c.GkewsApp.state_dir at an empty or new directory (by default "
            "<jupyter data dir>/gkews/projects/<folder>-<hash>/state), or remove them; nothing was written there")

    def release_claim(self) -> None:
        if self._owner_fd is not None:
            os.close(self._owner_fd)
            self._owner_fd = None

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

    def append_event(self, event: dict) -> int:
        """Append one line, durably; returns the log's size before it (to take it back). A write that fails
        (disk full, a file size limit) is cut off again, so that no half line is left for the next one to
        be glued to; a half line a crash left is ended first."""
        os.makedirs(self.directory, exist_ok=True)
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        with open(self.events_path, "a+b") as f:
            size = f.seek(0, os.SEEK_END)
            if size:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = b"\n" + line
            try:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                self.take_back_events(size)
                raise
        return size

    def take_back_events(self, size: int) -> None:
        """Cut the event log back to `size` bytes (what it held before an append)."""
        try:
            os.truncate(self.events_path, size)
        except OSError:
            pass  # nothing more can be done; a reader skips a half line

    def events(self, since: float = 0.0, limit: int = 1000) -> list[dict]:
        return self.read_events(since, limit)[0]

    def read_events(self, since: float = 0.0, limit: int = 1000) -> tuple[list[dict], list[int]]:
        """The events after `since` (the last `limit` of them), and the numbers of the lines that are no
        event: a line a crash cut off mid-append, or one damaged by hand. Those are skipped, never trusted."""
        try:
            with open(self.events_path, "rb") as f:
                lines = f.read().split(b"\n")
        except FileNotFoundError:
            return [], []
        out, damaged = [], []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line.decode())
            except ValueError:  # not UTF-8, or not JSON
                event = None
            if not well_formed_event(event):
                damaged.append(number)
            elif event["time"] > since:
                out.append(event)
        return out[-limit:], damaged


def damaged_events_note(path: str, lines: list[int]) -> str:
    shown = ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
    return (f"{path}: {len(lines)} line(s) are no event and were skipped (line {shown}): a line a crash cut off, "
            f"or one changed by hand; what the other lines say is used")


def _number(v) -> bool:
    """A finite number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _count(v) -> bool:
    """A whole number, 0 or more (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _optional(check):
    return lambda v: v is None or check(v)


def _text(v) -> bool:
    return isinstance(v, str)


#: the details the readers of the log (jupyter_gkews.cycles, the report, the metrics) compute with, and what
#: each must be when present: a line whose `gpus` is "2" or whose `bytes` is Infinity was trusted, and the
#: report crashed, its JSON was no JSON, and a resume failed in the metrics' sums
_DETAILS = {
    "last_activity": _optional(_number), "kernel_usable": _optional(_number),
    "gpus": _optional(_count), "bytes": _optional(_count), "bytes_written": _optional(_count),
    "environment_released": lambda v: isinstance(v, bool),
    "timeline": lambda v: isinstance(v, dict) and all(_optional(_number)(t) for t in v.values()),
    # pause-requested: whether one is asked for; releasing: the snapshot taken
    "snapshot": lambda v: v is None or isinstance(v, bool) or isinstance(v, dict) and _optional(_count)(v.get("bytes")),
    "path": _text, "old": _text, "new": _text,
    "reason": _optional(_text), "message": _optional(_text), "verdict": _optional(_text),
    "why": _optional(_text), "error": _optional(_text),
    "notebooks": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
    "failed": lambda v: v is None or isinstance(v, dict),
}


def well_formed_event(event) -> bool:
    """What every reader of an event relies on (schema.EVENT): an object with a time and an event name, a
    whole cycle number if it has one, and details of the types the readers compute with (_DETAILS)."""
    if not isinstance(event, dict):
        return False
    cycle = event.get("cycle", 0)
    return (_number(event.get("time")) and isinstance(event.get("event"), str)
            and isinstance(cycle, int) and not isinstance(cycle, bool)
            and all(check(event[key]) for key, check in _DETAILS.items() if key in event))
