"""Cleanup of what our Workspace left in the cluster: old PodSnapshots (each one holds GCS storage) and
spent triggers; snapshots first, their policy only once they are all gone (deleting a snapshot needs its
policy's storage config). The snapshot a pending resume needs is never deleted."""
from __future__ import annotations

from . import POLICIES, SNAPSHOTS, TRIGGERS, WORKSPACE_LABEL, condition, labels, name_of
from .api import Kube
from .client import KubeError
from .snapshots import FAILED_REASONS, is_our_trigger, is_ready, of_workspace, policy_name, snapshot_created


def plan(kube: Kube, workspace: str, keep: int, needed: set[str], *, pausing: bool = False) -> list[dict]:
    """What to delete, in order: [{kind, name, bytes, why}]. pausing: a pause may be waiting for a snapshot
    still being taken (its name not yet known): no snapshot that is not Ready yet, and no trigger GKE has not
    picked up, is deleted."""
    every = kube.list(SNAPSHOTS)
    snaps = of_workspace(every, workspace, ours_only=True)
    # a snapshot another trigger took through our policy (a hand-made trigger on this Pod) needs it as well
    through_policy = [s for s in every if (s.get("spec") or {}).get("policyName") == policy_name(workspace)]
    listed = {name_of(s) for s in snaps}
    ready = [name_of(s) for s in snaps if is_ready(s)]  # newest first
    kept = set(ready[:max(keep, 0)]) | (needed & listed)
    if pausing:
        kept |= {name_of(s) for s in snaps if not is_ready(s)}
    out = [{"kind": "PodSnapshot", "name": name_of(s), "bytes": 0,
            "why": "older than the newest kept" if is_ready(s) else "never became Ready"}
           for s in snaps if name_of(s) not in kept]
    remaining = listed - {o["name"] for o in out}
    for t in kube.list(TRIGGERS):
        if not is_our_trigger(name_of(t), workspace) or labels(t).get(WORKSPACE_LABEL, workspace) != workspace:
            continue
        # spent: GKE took its snapshot, or refused it for good; Triggered False with another reason is progress
        triggered = condition(t, "Triggered") or {}
        spent = triggered.get("status") == "True" or triggered.get("reason") in FAILED_REASONS
        if spent and pausing and triggered.get("status") == "True" and snapshot_created(t) not in listed:
            continue  # its snapshot is not listed yet: the pause waiting for it reads it through the trigger
        if spent and snapshot_created(t) not in remaining:
            out.append({"kind": "PodSnapshotManualTrigger", "name": name_of(t), "bytes": 0, "why": "spent"})
        elif not spent and not pausing:  # left by a pause that stopped (its server died): GKE could still act on it
            out.append({"kind": "PodSnapshotManualTrigger", "name": name_of(t), "bytes": 0,
                        "why": "never picked up, and no pause waits for it"})
    if not snaps and not through_policy and kube.find(POLICIES, policy_name(workspace)) is not None:
        # only once GKE has finalized every snapshot (a deleted one stays, Terminating, until its storage
        # is gone): the finalizer finds the bucket through the policy, and without it leaves the files
        # in GCS. So a cleanup that deletes the last snapshots retires the policy on its next run.
        out.append({"kind": "PodSnapshotPolicy", "name": policy_name(workspace), "bytes": 0,
                    "why": "no snapshot of this Workspace is left"})
    return out


_PLURAL = {"PodSnapshot": SNAPSHOTS, "PodSnapshotManualTrigger": TRIGGERS, "PodSnapshotPolicy": POLICIES}


def run(kube: Kube, items: list[dict]) -> None:
    for item in items:  # in plan order: snapshots before their policy
        try:
            kube.delete(_PLURAL[item["kind"]], item["name"])
        except KubeError as exc:
            if exc.status != 404:  # 404: already gone, as wanted
                raise
