"""PodSnapshotPolicy, PodSnapshotManualTrigger and PodSnapshot: what we create and how we read them."""
from __future__ import annotations

import hashlib
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


_STAMP = r"\d{8}-\d{6}-[0-9a-f]{4}"  # what follows the prefix in a trigger's name: time and 4 random hex
_STAMP_LEN = 20


def trigger_prefix(workspace: str) -> str:
    """`gkews-<workspace>-`, short enough that the stamp always fits in 63 characters (a long name is cut
    and ends with a digest of the whole, so that two long names never share a prefix)."""
    base = dns_name("gkews", workspace)
    room = 63 - 1 - _STAMP_LEN
    if len(base) > room:
        base = dns_name(base, limit=room - 7) + "-" + hashlib.sha256(workspace.encode()).hexdigest()[:6]
    return base + "-"


def is_our_trigger(name: str, workspace: str) -> bool:
    """Exactly a name trigger_body gives for this Workspace: `gkews-foo-` also begins the triggers of a
    Workspace `foo-bar`, which are not ours to delete."""
    return re.fullmatch(re.escape(trigger_prefix(workspace)) + _STAMP, name) is not None


def policy_body(name: str, workspace: str, storage_config: str, retention: str) -> dict:
    """Manual triggers, and `resume`: the Pod that asks for its own snapshot must live on to pause its
    Workspace once the snapshot is Ready (with `stop` GKE completes it right after the checkpoint)."""
    spec = {"selector": {"matchLabels": {WORKSPACE_LABEL: workspace}}, "storageConfigName": storage_config,
            "triggerConfig": {"type": "manual", "postCheckpoint": "resume"}}
    if retention:
        spec["retentionConfig"] = {"lastAccessTimeout": retention}
    return {"apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}", "kind": "PodSnapshotPolicy",
            "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY, WORKSPACE_LABEL: workspace}},
            "spec": spec}


def trigger_body(workspace: str, pod: str) -> dict:
    name = trigger_prefix(workspace) + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)
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


#: The PodSnapshot conditions GKE sets; any of them False with one of FAILED_REASONS ends the snapshot.
SNAPSHOT_CONDITIONS = ("Checkpoint", "StorageReplicated", "Ready")
FAILED_REASONS = ("Failed", "Error")


def snapshot_progress(snapshot: dict) -> tuple[str, str]:
    """('ready'|'pending', detail); raises SnapshotError when the checkpoint, its upload or the snapshot failed."""
    name = snapshot["metadata"]["name"]
    for kind in SNAPSHOT_CONDITIONS:
        c = condition(snapshot, kind)
        if c is not None and c.get("status") == "False" and c.get("reason") in FAILED_REASONS:
            raise SnapshotError(f"the PodSnapshot {name} failed ({kind}=False): {c.get('reason')}: "
                                f"{c.get('message') or 'no message'}")
    ready = condition(snapshot, "Ready")
    if ready is not None and ready.get("status") == "True":
        return "ready", ready.get("reason") or "Ready"
    # No CRD defines the reasons: a step False with another one may be a failure GKE words its own way.
    # It is waited out (it may be progress), but named, so a timeout says which step stood still.
    false = [f"{kind}=False ({c.get('reason') or 'no reason'}: {c.get('message') or 'no message'})"
             for kind in ("Checkpoint", "StorageReplicated") for c in [condition(snapshot, kind)]
             if c is not None and c.get("status") == "False"]
    return "pending", "; ".join(false + [(ready or {}).get("reason") or "AwaitingCheckpoint"])


def is_ready(snapshot: dict) -> bool:
    c = condition(snapshot, "Ready")
    return bool(c and c.get("status") == "True")


def of_workspace(snapshots: list[dict], workspace: str, pods: set[str] = frozenset(),
                 names: set[str] = frozenset(), *, ours_only: bool = False) -> list[dict]:
    """This Workspace's PodSnapshots, newest first: triggered by one of our triggers for it or by the add-on's
    trigger for it (GKE labels each snapshot with its trigger's name), taken of one of its Pods (the
    origin-pod annotation), or named in `names` (the add-on's last-checkpoint-name). ours_only: only those
    of our own triggers (cleanup never deletes the add-on's: it retires them itself after a restore)."""
    from . import ORIGIN_POD_ANNOTATION, addon_trigger_name, annotations, name_of
    addon = addon_trigger_name(workspace)

    def mine(s: dict) -> bool:
        by = labels(s).get(TRIGGERED_BY_LABEL, "")
        if ours_only:
            return is_our_trigger(by, workspace)
        return (is_our_trigger(by, workspace) or by == addon or name_of(s) in names
                or annotations(s).get(ORIGIN_POD_ANNOTATION, "").rsplit("/", 1)[-1] in pods)
    return sorted(filter(mine, snapshots), key=lambda s: s["metadata"].get("creationTimestamp") or "", reverse=True)
