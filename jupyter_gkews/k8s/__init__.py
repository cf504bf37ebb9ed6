"""The Kubernetes side of the GKE backend: names and shapes from GKE's Pod snapshot CRDs, the Kubeflow
Notebooks v2 Workspace API and the GKE Workspaces snapshot add-on (docs/gke.md, "Where each assumption
comes from", names the source of each), one small module per job.

Everything here is synchronous (the official ``kubernetes`` client blocks); callers on the server's
event loop run it through ``asyncio.to_thread``.
"""
from __future__ import annotations

SNAPSHOT_GROUP, SNAPSHOT_VERSION = "podsnapshot.gke.io", "v1"
POLICIES, TRIGGERS, SNAPSHOTS = "podsnapshotpolicies", "podsnapshotmanualtriggers", "podsnapshots"
WORKSPACE_GROUP, WORKSPACE_VERSION = "kubeflow.org", "v1beta1"
WORKSPACES, WORKSPACE_KINDS = "workspaces", "workspacekinds"

WORKSPACE_LABEL = "notebooks.kubeflow.org/workspace-name"
TRIGGERED_BY_LABEL = "gke-pod-snapshot-triggered-by"
ORIGIN_POD_ANNOTATION = "podsnapshot.gke.io/origin-pod"
ADDON_ENABLED_ANNOTATION = "podsnapshot.gke.kubeflow.org/enabled"
ADDON_STATE_ANNOTATION = "podsnapshot.gke.kubeflow.org/checkpoint-state"
ADDON_LAST_ANNOTATION = "podsnapshot.gke.kubeflow.org/last-checkpoint-name"
ADDON_STARTED_ANNOTATION = "podsnapshot.gke.kubeflow.org/checkpoint-started-at"
MIGRATION_ENABLED_ANNOTATION = "pod-migration.gke.io/enabled"
#: The readiness gate the add-on's Pod webhook adds to every Pod it configures for snapshots.
ADDON_READINESS_GATE = "podsnapshot.gke.kubeflow.org/active"
#: The extended resource of TPU chips: gVisor cannot host them, so the add-on never snapshots such Pods.
TPU_RESOURCE = "google.com/tpu"
GVISOR_RUNTIME_CLASS = "gvisor"
#: Our own mark on the objects we create, so cleanup never touches anyone else's.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "jupyter-gkews"


def condition(obj: dict | None, kind: str) -> dict | None:
    """The status condition of this type, or None."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def addon_trigger_name(workspace: str) -> str:
    """The add-on's one PodSnapshotManualTrigger per Workspace; GKE labels its snapshots with this name."""
    return f"ws-{workspace}-trigger"


def addon_policy_name(workspace: str) -> str:
    """The add-on's PodSnapshotPolicy (postCheckpoint: stop), which it leaves in place once made."""
    return f"ws-{workspace}-policy"


def labels(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("annotations") or {}


def name_of(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name", "")
