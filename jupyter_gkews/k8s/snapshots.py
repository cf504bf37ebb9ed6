"""PodSnapshotPolicy, PodSnapshotManualTrigger and PodSnapshot: what we create and how we read them."""
from __future__ import annotations

import re
import secrets
import time

from . import (MANAGED_BY, MANAGED_BY_LABEL, SNAPSHOT_GROUP, SNAPSHOT_VERSION, TRIGGERED_BY_LABEL, WORKSPACE_LABEL,
               condition, labels)


def dns_name(*parts: str, limit: int = 63) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return name[:limit].rstrip("-")


def policy_name(workspace: str) -> str:
    return dns_name("gkews", workspace)


def trigger_prefix(workspace: str) -> str:
    return dns_name("gkews", workspace) + "-"


def policy_body(name: str, workspace: str, storage_config: str, post_checkpoint: str, retention: str) -> dict:
    spec = {"selector": {"matchLabels": {WORKSPACE_LABEL: workspace}}, "storageConfigName": storage_config,
            "triggerConfig": {"type": "manual", "postCheckpoint": post_checkpoint}}
    if retention:
        spec["retentionConfig"] = {"lastAccessTimeout": retention}
    return {"apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}", "kind": "PodSnapshotPolicy",
            "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY, WORKSPACE_LABEL: workspace}},
            "spec": spec}


def trigger_body(workspace: str, pod: str) -> dict:
    name = dns_name(trigger_prefix(workspace) + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-"
                    + secrets.token_hex(2))
    return {"apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}", "kind": "PodSnapshotManualTrigger",
            "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY, WORKSPACE_LABEL: workspace}},
            "spec": {"targetPod": pod}}


def snapshot_created(trigger: dict) -> str:
    """status.snapshotCreated is documented as a string and seen as {name: ...}: accept both."""
    value = (trigger.get("status") or {}).get("snapshotCreated")
    if isinstance(value, dict):
        return value.get("name") or ""
    return value or ""


class SnapshotError(Exception):
    pass


def trigger_progress(trigger: dict) -> tuple[str, str]:
    """('pending'|'triggered', detail); raises SnapshotError when GKE says the trigger failed."""
    c = condition(trigger, "Triggered")
    if c is None:
        return "pending", "waiting for GKE to pick up the trigger"
    if c.get("status") == "True":
        return "triggered", c.get("reason") or "Complete"
    if c.get("reason") in ("Failed", "Error"):
        raise SnapshotError(f"the PodSnapshotManualTrigger {trigger['metadata']['name']} failed: "
                            f"{c.get('reason')}: {c.get('message') or 'no message'}")
    return "pending", f"{c.get('reason') or 'Triggered False'}: {c.get('message') or ''}".strip(": ")


def snapshot_progress(snapshot: dict) -> tuple[str, str]:
    """('ready'|'pending', detail); raises SnapshotError when the checkpoint failed."""
    name = snapshot["metadata"]["name"]
    checkpoint = condition(snapshot, "Checkpoint")
    if (checkpoint is not None and checkpoint.get("status") == "False"
            and checkpoint.get("reason") in ("Failed", "Error")):
        raise SnapshotError(f"the PodSnapshot {name} failed its checkpoint: {checkpoint.get('reason')}: "
                            f"{checkpoint.get('message') or 'no message'}")
    ready = condition(snapshot, "Ready")
    if ready is not None and ready.get("status") == "True":
        return "ready", ready.get("reason") or "Ready"
    return "pending", (ready or {}).get("reason") or "AwaitingCheckpoint"


def is_ready(snapshot: dict) -> bool:
    c = condition(snapshot, "Ready")
    return bool(c and c.get("status") == "True")


def of_workspace(snapshots: list[dict], workspace: str, pods: set[str] = frozenset()) -> list[dict]:
    """This Workspace's PodSnapshots: triggered by one of our triggers for it, or taken of one of its Pods
    (the add-on's). Newest first."""
    from . import ORIGIN_POD_ANNOTATION, annotations
    prefix = trigger_prefix(workspace)
    mine = [s for s in snapshots if labels(s).get(TRIGGERED_BY_LABEL, "").startswith(prefix)
            or (pods and annotations(s).get(ORIGIN_POD_ANNOTATION, "").rsplit("/", 1)[-1] in pods)]
    return sorted(mine, key=lambda s: s["metadata"].get("creationTimestamp") or "", reverse=True)
