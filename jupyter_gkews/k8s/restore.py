"""Am I the original process or a restored copy? Evidence, compared against what was true just before
the snapshot was requested: the Pod's PodRestored condition, a changed Pod uid, name or hostname, and
the gVisor checkpoint file's answer ('restore') when the workload wrote to it."""
from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field

from . import condition


@dataclass
class Baseline:
    pod: str
    uid: str | None
    hostname: str
    restored_marker: tuple | None  # a PodRestored condition already present before the request
    extra: dict = field(default_factory=dict)


def baseline(pod: dict) -> Baseline:
    return Baseline(pod=pod["metadata"]["name"], uid=pod["metadata"].get("uid"), hostname=socket.gethostname(),
                    restored_marker=_marker(pod))


def _marker(pod: dict) -> tuple | None:
    c = condition(pod, "PodRestored")
    if c is None or c.get("status") != "True":
        return None
    return (c.get("lastTransitionTime"), c.get("message"))


def evidence(before: Baseline, pod_name: str, pod: dict | None, checkpoint_answer: str | None = None) -> str | None:
    """A sentence saying why this process runs in a restored Pod, or None when nothing says so."""
    if checkpoint_answer == "restore":
        return "the gVisor checkpoint file answered 'restore'"
    if pod_name != before.pod:
        return f"the Pod name changed from {before.pod} to {pod_name}"
    if socket.gethostname() != before.hostname:
        return f"the hostname changed from {before.hostname} to {socket.gethostname()}"
    if pod is not None:
        marker = _marker(pod)
        if marker is not None and marker != before.restored_marker:
            return f"the Pod has the condition PodRestored=True ({marker[1] or 'no message'})"
        uid = pod["metadata"].get("uid")
        if before.uid and uid and uid != before.uid:
            return f"the Pod was replaced (uid {before.uid} -> {uid}) while this process kept its memory"
    return None


def read_checkpoint_file(path: str) -> str | None:
    """The gVisor checkpoint file's answer (`resume`, `restore` or `error`); None where there is none. The read
    blocks until a checkpoint completes: CheckpointFileReader reads it off the caller's way."""
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


class CheckpointFileReader:
    """Reads the gVisor checkpoint file once, in a daemon thread of its own, for the restore check to look at
    without waiting: a read blocked until a checkpoint completes (for ever, if the workload never wrote `1`)
    held the snapshot wait past its deadline, and a pool thread blocked in it would hold up the server's exit."""

    def __init__(self, path: str):
        self.path = path
        self._answer: str | None = None
        self._thread: threading.Thread | None = None

    def answer(self) -> str | None:
        """What the file answered so far: None until its read returns."""
        if self._thread is None and self.path and os.path.exists(self.path):
            self._thread = threading.Thread(target=self._read, name="gkews-gvisor-checkpoint", daemon=True)
            self._thread.start()
        return self._answer

    def _read(self) -> None:
        self._answer = read_checkpoint_file(self.path)
