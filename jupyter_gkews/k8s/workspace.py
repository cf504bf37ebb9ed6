"""A Workspace (kubeflow.org/v1beta1) seen through the API: pause, resume, the snapshot add-on, and
the state a person outside the Pod wants to know (paused, waiting for capacity, restoring, ready)."""
from __future__ import annotations

import time

from kernel_state.timestamps import utc_epoch

from . import (ADDON_ENABLED_ANNOTATION, ADDON_LAST_ANNOTATION, ADDON_READINESS_GATE, ADDON_STARTED_ANNOTATION,
               ADDON_STATE_ANNOTATION, GVISOR_RUNTIME_CLASS, MIGRATION_ENABLED_ANNOTATION, SNAPSHOTS, TPU_RESOURCE,
               TRIGGERED_BY_LABEL, TRIGGERS, WORKSPACE_LABEL, WORKSPACES, addon_trigger_name, annotations, condition,
               labels, name_of)
from .api import BUSY, Kube
from .client import KubeError
from .snapshots import SnapshotError, is_ready, of_workspace, snapshot_created, snapshot_progress, trigger_progress


class PauseInProgress(Exception):
    """The snapshot add-on is taking the snapshot of a pause already asked for; asking again would restart it."""


def addon_checkpointing(ws: dict) -> str | None:
    """When the add-on holds a pause (spec.paused kept false, checkpoint-state Checkpointing): since when."""
    found = annotations(ws)
    if found.get(ADDON_STATE_ANNOTATION) != "Checkpointing" or (ws.get("spec") or {}).get("paused"):
        return None
    return found.get(ADDON_STARTED_ANNOTATION) or "an unknown time"


def set_paused(kube: Kube, workspace: str, paused: bool) -> bool:
    """JSON Patch with a `test` op, as the Workspaces backend does: True when this call changed it,
    False when it already was so. A concurrent change makes the test fail and the call is retried.
    A pause while the snapshot add-on is still taking the snapshot of an earlier one raises PauseInProgress:
    its webhook would stamp a new checkpoint-started-at, and its reconciler would delete and redo the trigger."""
    for _ in range(3):
        ws = kube.workspace(workspace)
        current = bool((ws.get("spec") or {}).get("paused", False))
        if current == paused:
            return False
        since = addon_checkpointing(ws)
        if paused and since:
            raise PauseInProgress(f"the Workspace {workspace} is already pausing: the GKE Workspaces snapshot add-on "
                                  f"has been taking its Pod snapshot since {since} and pauses it once the snapshot "
                                  "is Ready; a second pause would restart the snapshot")
        # test-then-set: a concurrent writer makes the test fail, and we read again
        ops = [{"op": "test", "path": "/spec/paused", "value": current}] if "paused" in (ws.get("spec") or {}) else []
        try:
            kube.patch(WORKSPACES, workspace, ops + [{"op": "add", "path": "/spec/paused", "value": paused}])
            return True
        except KubeError as exc:
            # a failed `test` (someone changed it meanwhile), or an API server busy or restarting: read again
            if exc.status not in (409, 422) + BUSY:
                raise
            last = exc
            if exc.status in BUSY:
                time.sleep(1)
    # a failed `test` answers 422 (500 on older API servers), as a webhook's or a schema's refusal does
    raise KubeError(f"spec.paused={paused} could not be set on the Workspace {workspace} in 3 tries: it kept changing, "
                    f"or the API server refused the change (its last answer: {last}); try again", last.status)


def _is(value: str | None, expected: str) -> bool:
    return (value or "").lower() == expected  # the add-on compares with strings.EqualFold


def requests_tpu(pod: dict) -> bool:
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        if any(TPU_RESOURCE in (resources.get(key) or {}) for key in ("limits", "requests")):
            return True
    return False


def addon_enabled(workspace: dict, pod: dict) -> bool:
    """Does the GKE Workspaces snapshot add-on snapshot this Workspace when it pauses? Its own rules, in its
    order: the Workspace's `enabled` annotation "false" (any case) wins; a Pod that requests TPUs is never
    snapshotted (gVisor cannot host them); the Workspace's `enabled` or `pod-migration.gke.io/enabled`
    "true" (any case) turns it on; else the WorkspaceKind's annotations decide. The kind is cluster-scoped,
    and a Workspace's service account cannot be granted a read of it, so its verdict is read from this Pod:
    the add-on's Pod webhook adds its readiness gate to exactly the Pods its rules enabled at creation."""
    found = annotations(workspace)
    if _is(found.get(ADDON_ENABLED_ANNOTATION), "false"):
        return False
    if requests_tpu(pod):
        return False
    if _is(found.get(ADDON_ENABLED_ANNOTATION), "true") or _is(found.get(MIGRATION_ENABLED_ANNOTATION), "true"):
        return True
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    return any(g.get("conditionType") == ADDON_READINESS_GATE for g in gates)


def addon_cannot_snapshot(pod: dict, pod_name: str) -> str | None:
    """Why the add-on, on for the Workspace, cannot snapshot this Pod (None when it can): its Pod webhook sets
    gVisor on the Pods created while it is on, and a Pod from before runs without it. The add-on would still take
    the Workspace's pause and hold it, with its GPU, for a snapshot GKE cannot take."""
    runtime = (pod.get("spec") or {}).get("runtimeClassName")
    if runtime == GVISOR_RUNTIME_CLASS:
        return None
    return (f"the GKE Workspaces snapshot add-on is on for this Workspace, but the Pod {pod_name} was created before "
            f"it was (spec.runtimeClassName is {runtime or 'not set'}, not {GVISOR_RUNTIME_CLASS}, which its Pod "
            "webhook sets on new Pods): GKE cannot snapshot it, and the add-on would hold the Workspace's pause, with "
            "its GPU, waiting for a snapshot that never comes. Set the Workspace's annotation "
            f'{ADDON_ENABLED_ANNOTATION} to "false", pause it, set it back to "true" and start it: its new Pod runs '
            "in gVisor")


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


def current_pod(ws: dict, pods: list[dict]) -> dict | None:
    """The Workspace's Pod: the one its status.podTemplatePod.name names (the controller's StatefulSet names it
    ws-<workspace>-<random>-0), else the labelled one that is not being deleted."""
    recorded = ((ws.get("status") or {}).get("podTemplatePod") or {}).get("name")
    named = [p for p in pods if recorded and name_of(p) == recorded]
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    return (named or live or pods or [None])[0]


def describe(kube: Kube, workspace: str) -> dict:
    """What a person outside the Pod wants to know: paused / pausing / waiting-for-capacity / starting /
    restoring / ready, why, and the last snapshot with its age."""
    ws = kube.workspace(workspace)
    spec, status = ws.get("spec") or {}, ws.get("status") or {}
    pods = kube.list_pods(WORKSPACE_LABEL, workspace)
    pod = current_pod(ws, pods)
    paused = bool(spec.get("paused"))
    checkpointing_since = addon_checkpointing(ws)
    out = {"workspace": workspace, "namespace": kube.namespace, "paused": paused,
           "workspace_state": status.get("state"), "pod": name_of(pod) if pod else None,
           "addon_state": annotations(ws).get(ADDON_STATE_ANNOTATION), "snapshot_in_progress": False,
           "snapshot_failed": False}
    snaps, unreadable = _snapshots(kube, ws, workspace, pods)
    failed = addon_snapshot_failure(kube, workspace, snaps) if checkpointing_since else None
    if failed:
        out.update(state="pausing", snapshot_failed=True,
                   message=f"the snapshot add-on's Pod snapshot of this pause failed ({failed}); the Workspace does "
                           "not pause until a snapshot is Ready, and its Pod keeps its GPU. Delete the add-on's "
                           f"trigger so that it takes a new one: kubectl delete podsnapshotmanualtriggers "
                           f"{addon_trigger_name(workspace)} -n {kube.namespace}")
    elif checkpointing_since:  # the add-on holds spec.paused false (and the Pod unready) until its snapshot is Ready
        out.update(state="pausing", snapshot_in_progress=True,
                   message=f"the snapshot add-on has been taking a Pod snapshot since {checkpointing_since}; "
                           "the Workspace pauses once it is Ready")
    elif not paused and status.get("state") in ("Error", "Unknown"):  # its controller's word, with its message
        out.update(state="error", message=status.get("stateMessage") or
                   f"the Workspace controller reports {status['state']} and says no more; kubectl describe "
                   f"workspace {workspace} -n {kube.namespace} shows its events")
    elif paused:
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
                   if restored and restored.get("status") == "True" else
                   "not marked restored from a snapshot (GKE adds PodRestored up to some seconds after Ready)")
            out.update(state="ready", message=f"the Pod is ready; {how}")
        elif _pod_trouble(pod):
            name = name_of(pod)
            out.update(state="error", message=f"the Pod {name} {_pod_trouble(pod)}; `kubectl describe pod {name} -n "
                                              f"{kube.namespace}` and `kubectl logs {name} -n {kube.namespace}` say "
                                              "more")
        else:
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            out.update(state="restoring", message=f"the Pod is {phase} and not ready yet")
        if out["state"] != "ready" and out["addon_state"] == "Restoring":
            out["message"] += "; the snapshot add-on is restoring"
    last_addon = annotations(ws).get(ADDON_LAST_ANNOTATION)
    last = next((s for s in snaps if is_ready(s)), snaps[0] if snaps else None)
    if last is None and last_addon:
        last = {"metadata": {"name": last_addon}}
    out["last_snapshot"] = None if last is None else {
        "name": name_of(last), "ready": is_ready(last), "created": last["metadata"].get("creationTimestamp"),
        "age": age(last["metadata"].get("creationTimestamp"))}
    if unreadable:
        out["snapshots_unreadable"] = unreadable
    return out


def _snapshots(kube: Kube, ws: dict, workspace: str, pods: list[dict]) -> tuple[list[dict], str | None]:
    """The Workspace's PodSnapshots, newest first, and why they could not be listed: a cluster without GKE's
    Pod snapshot CRDs, or a role without `list podsnapshots`, still has a state to tell and a resume to do."""
    last_addon = annotations(ws).get(ADDON_LAST_ANNOTATION)
    status = ws.get("status") or {}
    pod_names = {name_of(p) for p in pods} | {((status.get("podTemplatePod") or {}).get("name") or "")} - {""}
    try:
        found = kube.list(SNAPSHOTS)
    except KubeError as exc:
        if exc.status not in (403, 404):
            raise
        return [], str(exc)
    return of_workspace(found, workspace, pod_names, {last_addon} if last_addon else set()), None


def addon_snapshot_failure(kube: Kube, workspace: str, snaps: list[dict]) -> str | None:
    """GKE's words for why the add-on's trigger or the snapshot it made failed; None while it may still come."""
    try:
        trigger = kube.find(TRIGGERS, addon_trigger_name(workspace))
    except KubeError:  # a role without `get` on triggers: what the snapshots say is all there is to tell
        trigger = None
    created = snapshot_created(trigger) if trigger else ""
    try:
        if trigger is not None:
            trigger_progress(trigger)
        by_addon = [s for s in snaps if labels(s).get(TRIGGERED_BY_LABEL) == addon_trigger_name(workspace)]
        # the snapshot its trigger made; with no trigger to read (gone, or not ours to read), the add-on's newest
        made = [s for s in snaps if name_of(s) == created] if trigger is not None else by_addon[:1]
        if made:
            snapshot_progress(made[0])
    except SnapshotError as exc:
        return str(exc)
    return None


#: a container waiting for one of these does not start by itself: the image, its configuration or its program
STUCK_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerError",
                 "CreateContainerConfigError", "RunContainerError")


def _pod_trouble(pod: dict) -> str | None:
    """Why a Pod that is not ready will not become ready by waiting (a failed or evicted Pod, a container that
    cannot start), in the kubelet's words; None while it may still."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return f"failed ({status.get('reason') or 'Failed'}: {status.get('message') or 'no message'})"
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            return (f"cannot start: its container {c.get('name')} is waiting with {waiting['reason']}"
                    + (f" ({waiting['message']})" if waiting.get("message") else ""))
    return None


def _terminated(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
