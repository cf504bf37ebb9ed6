"""Am I the original process or a restored copy? Evidence, compared against what was true just before
the snapshot was requested: the Pod's PodRestored condition, a changed Pod uid, name or hostname, and
the gVisor checkpoint file's answer ('restore') when the workload wrote to it."""
from __future__ import annotations

import os
import socket
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
    """The gVisor checkpoint file's last answer, if the runtime offers a non-blocking one here.

    Reading it can block until a checkpoint completes, so it is read only when configured
    (c.GkeBackend.gvisor_checkpoint_file, for Pods whose workload wrote `1` to it); otherwise None."""
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None
