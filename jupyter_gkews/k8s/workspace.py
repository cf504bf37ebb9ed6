"""A Workspace (kubeflow.org/v1beta1) seen through the API: pause, resume, the snapshot add-on, and
the state a person outside the Pod wants to know (paused, waiting for capacity, restoring, ready)."""
from __future__ import annotations

import time

from kernel_state.timestamps import utc_epoch

from . import (ADDON_ENABLED_ANNOTATION, ADDON_LAST_ANNOTATION, ADDON_STATE_ANNOTATION, SNAPSHOTS, WORKSPACE_KINDS,
               WORKSPACE_LABEL, WORKSPACES, annotations, condition, name_of)
from .api import Kube
from .client import KubeError
from .snapshots import is_ready, of_workspace


def set_paused(kube: Kube, workspace: str, paused: bool) -> bool:
    """JSON Patch with a `test` op, as the Workspaces backend does: True when this call changed it,
    False when it already was so. A concurrent change makes the test fail and the call is retried."""
    for _ in range(3):
        ws = kube.workspace(workspace)
        current = bool((ws.get("spec") or {}).get("paused", False))
        if current == paused:
            return False
        # test-then-set: a concurrent writer makes the test fail, and we read again
        ops = [{"op": "test", "path": "/spec/paused", "value": current}] if "paused" in (ws.get("spec") or {}) else []
        try:
            kube.patch(WORKSPACES, workspace, ops + [{"op": "add", "path": "/spec/paused", "value": paused}])
            return True
        except KubeError as exc:
            if exc.status not in (409, 422, 500):  # a failed `test` (someone changed it meanwhile): read again
                raise
    raise KubeError(f"the Workspace {workspace} kept changing while we tried to set spec.paused={paused}; try again")


def addon_enabled(kube: Kube, workspace: dict) -> bool:
    """The GKE Workspaces snapshot add-on is on for this Workspace (its annotation, or its WorkspaceKind's)."""
    if annotations(workspace).get(ADDON_ENABLED_ANNOTATION) == "true":
        return True
    kind = (workspace.get("spec") or {}).get("kind")
    if not kind:
        return False
    found = kube.find(WORKSPACE_KINDS, kind, namespaced=False)
    return bool(found and annotations(found).get(ADDON_ENABLED_ANNOTATION) == "true")


def age(timestamp: str | None, now: float | None = None) -> str:
    if not timestamp:
        return "unknown age"
    try:
        then = utc_epoch(timestamp[:19], "%Y-%m-%dT%H:%M:%S")  # Kubernetes writes UTC: "...T08:30:00Z"
    except ValueError:
        return "unknown age"
    seconds = max(0, int((now or time.time()) - then))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def describe(kube: Kube, workspace: str) -> dict:
    """What a person outside the Pod wants to know: paused / pausing / waiting-for-capacity / starting /
    restoring / ready, why, and the last snapshot with its age."""
    ws = kube.workspace(workspace)
    spec, status = ws.get("spec") or {}, ws.get("status") or {}
    pods = kube.list_pods(WORKSPACE_LABEL, workspace)
    pod = pods[0] if pods else None
    paused = bool(spec.get("paused"))
    out = {"workspace": workspace, "namespace": kube.namespace, "paused": paused,
           "workspace_state": status.get("state"), "pod": name_of(pod) if pod else None,
           "addon_state": annotations(ws).get(ADDON_STATE_ANNOTATION)}
    if paused:
        out.update(state="pausing" if pod and not _terminated(pod) else "paused",
                   message=status.get("stateMessage") or ("the Pod is stopping" if pod else "the Workspace is paused"))
    elif pod is None:
        out.update(state="starting", message="the Workspace is not paused and has no Pod yet")
    else:
        scheduled = condition(pod, "PodScheduled")
        ready = condition(pod, "Ready")
        restored = condition(pod, "PodRestored")
        if scheduled is not None and scheduled.get("status") == "False":
            why = f"{scheduled.get('reason') or 'Unschedulable'}: {scheduled.get('message') or ''}"
            out.update(state="waiting-for-capacity", message=why.strip())
        elif ready is not None and ready.get("status") == "True":
            how = (f"restored from a snapshot ({restored.get('message') or 'PodRestored'})"
                   if restored and restored.get("status") == "True" else "started (not restored from a snapshot)")
            out.update(state="ready", message=f"the Pod is ready; {how}")
        else:
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            out.update(state="restoring", message=f"the Pod is {phase} and not ready yet")
        if out["state"] != "ready" and out["addon_state"] == "Restoring":
            out["message"] += "; the snapshot add-on is restoring"
    snaps = of_workspace(kube.list(SNAPSHOTS), workspace, {name_of(p) for p in pods} | {f"{workspace}-0"})
    last_addon = annotations(ws).get(ADDON_LAST_ANNOTATION)
    last = next((s for s in snaps if is_ready(s)), snaps[0] if snaps else None)
    if last is None and last_addon:
        last = {"metadata": {"name": last_addon}}
    out["last_snapshot"] = None if last is None else {
        "name": name_of(last), "ready": is_ready(last), "created": last["metadata"].get("creationTimestamp"),
        "age": age(last["metadata"].get("creationTimestamp"))}
    return out


def _terminated(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
