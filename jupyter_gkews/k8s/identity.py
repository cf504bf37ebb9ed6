"""Who we are in the cluster: namespace, Pod and Workspace of the process running the server.

Namespace and Pod come from the downward API (POD_NAMESPACE, POD_NAME), else the service account's
namespace file and the hostname (a StatefulSet Pod's hostname is its name). After a gVisor restore the
environment is the one supplied at restore time, in /proc/gvisor/spec_environ: it wins when present.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from . import WORKSPACE_LABEL, labels

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
SPEC_ENVIRON = "/proc/gvisor/spec_environ"


@dataclass
class PodIdentity:
    namespace: str
    pod: str
    workspace: str = ""


def restore_environ(path: str = SPEC_ENVIRON) -> dict:
    """The environment a restored Pod was given (NUL- or newline-separated KEY=VALUE), or {}."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.replace(b"\n", b"\0").split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep:
            out[key] = value
    return out


def own_namespace_and_pod(namespace: str = "", pod: str = "") -> tuple[str, str]:
    env = {**os.environ, **restore_environ()}
    ns = namespace or env.get("POD_NAMESPACE", "")
    if not ns:
        try:
            with open(SA_NAMESPACE_FILE) as f:
                ns = f.read().strip()
        except OSError:
            pass
    name = pod or env.get("POD_NAME") or socket.gethostname()
    if not ns:
        raise ValueError("cannot tell this Pod's namespace: set POD_NAMESPACE through the downward API "
                         "(fieldRef metadata.namespace) or c.GkeBackend.namespace")
    return ns, name


def workspace_of(pod: dict) -> str:
    name = labels(pod).get(WORKSPACE_LABEL, "")
    if not name:
        raise ValueError(f"the Pod {pod['metadata']['name']} has no label {WORKSPACE_LABEL}: it is not a "
                         "Workspace's Pod; set c.GkeBackend.workspace to name the Workspace")
    return name
