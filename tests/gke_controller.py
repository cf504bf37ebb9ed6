"""A Kubernetes API for the GKE backend's tests, and GKE's controllers played by a loop that reacts.

The API server is kmock's KubernetesEmulator, a real HTTP server on a localhost port that stores
objects as JSON (create/get/list/patch/delete); the official `kubernetes` client talks to it like to a
real API server. It runs in its own thread and event loop, so the Jupyter server under test can be in
this process or another one. What kmock does not do is added here, and said so:

- a create answers 201 (kmock answers 200, and the generated client then returns None);
- RBAC: `deny(verb, plural)` makes that call answer 403 the way the API server words it;
- label selectors are ignored by kmock (our code filters on its side too);
- GKE's controllers: `FakeGke._step` reacts to what our code creates, every 50 ms:
  * a PodSnapshotManualTrigger gets a PodSnapshot (UUID name, `gke-pod-snapshot-triggered-by` label,
    origin-pod annotation, finalizer) and the conditions `outcome` asks for: Ready, a failed trigger
    (Triggered False, Failed, "context deadline exceeded"), a failed checkpoint, or nothing (hang);
  * `restore_on="trigger"`: once the snapshot is Ready the Pod is marked restored (new uid, condition
    PodRestored=True naming the snapshot) while the same processes keep running: what a restored copy of
    the server sees when it wakes up inside the snapshot wait;
  * the Workspace controller: spec.paused true stops (deletes) the Pod, status Paused; false creates a new
    Pod, restored from the newest Ready snapshot when `restore_on` is set, started cold otherwise, or left
    Pending/Unschedulable when `capacity` is False; the snapshot add-on, when its annotation is on the
    Workspace or its WorkspaceKind, snapshots the Pod as the pause goes through;
  * objects with a deletionTimestamp lose their finalizers (GKE deletes the storage) and go away.
"""
from __future__ import annotations

import asyncio
import copy
import threading
import time
import uuid

import attrs
import kmock
import yaml

from jupyter_gkews.k8s import (ADDON_ENABLED_ANNOTATION, ADDON_LAST_ANNOTATION, ADDON_STATE_ANNOTATION,
                               ORIGIN_POD_ANNOTATION, SNAPSHOT_GROUP, TRIGGERED_BY_LABEL, WORKSPACE_LABEL)

PODS = kmock.resource("", "v1", "pods")
WORKSPACES = kmock.resource("kubeflow.org", "v1beta1", "workspaces")
KINDS = kmock.resource("kubeflow.org", "v1beta1", "workspacekinds")
POLICIES = kmock.resource(SNAPSHOT_GROUP, "v1", "podsnapshotpolicies")
TRIGGERS = kmock.resource(SNAPSHOT_GROUP, "v1", "podsnapshotmanualtriggers")
SNAPSHOTS = kmock.resource(SNAPSHOT_GROUP, "v1", "podsnapshots")
VERBS = {kmock.action.LIST: "list", kmock.action.WATCH: "watch", kmock.action.FETCH: "get",
         kmock.action.CREATE: "create", kmock.action.UPDATE: "patch", kmock.action.DELETE: "delete"}
UNSCHEDULABLE = ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: "
                 "4 No preemption victims found for incoming pod.")


def stamp(at: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at or time.time()))


@attrs.define(kw_only=True)
class Cluster(kmock.KubernetesEmulator):
    """kmock's emulator with RBAC denials, 201 on create, and a log of (verb, plural, name)."""

    denied: set = attrs.field(factory=set)
    calls: list = attrs.field(factory=list)
    sa: str = "system:serviceaccount:team-a:default-editor"

    async def _handle(self, request):
        if request.resource is not None:
            verb, plural = VERBS.get(request.action, str(request.method).lower()), request.resource.plural
            body = request.data if isinstance(request.data, dict) else {}
            name = request.name or body.get("metadata", {}).get("name")
            self.calls.append((verb, plural, name))
            if (verb, plural) in self.denied:
                group = request.resource.group
                raise kmock.KubernetesError(
                    status=403, reason="Forbidden",
                    message=f'{plural}.{group} "{name or ""}" is forbidden: User "{self.sa}" cannot {verb} resource '
                            f'"{plural}" in API group "{group}" in the namespace "{request.namespace}"')
        response = await super()._handle(request)
        if request.action == kmock.action.CREATE and response.status == 200:
            response.set_status(201)  # what a real API server answers
        return response


class FakeGke:
    def __init__(self, namespace: str = "team-a", workspace: str = "gpu-notebook", kind: str = "jupyterlab-gpu"):
        self.namespace, self.workspace, self.kind = namespace, workspace, kind
        self.pod = f"{workspace}-0"
        self.outcome = "ready"          # ready | trigger-failed | checkpoint-failed | hang
        self.restore_on: str | None = None  # "trigger" | "resume" | None (a resumed Pod starts cold)
        self.capacity = True
        self.addon = False
        self.snapshot_created_as_string = False
        self.hold = threading.Event()  # while set, triggers wait
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="fake-gke", daemon=True)
        self.url = ""

    # -- hosting -------------------------------------------------------------------------------------
    def start(self) -> "FakeGke":
        ready = threading.Event()
        self._ready = ready
        self._thread.start()
        assert ready.wait(30), "the Kubernetes emulator did not start"
        return self

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with Cluster() as emu, kmock.Server(emu) as server:
            self.emu, self.url = emu, str(server.url).rstrip("/")
            for res in (PODS, WORKSPACES, KINDS, POLICIES, TRIGGERS, SNAPSHOTS):
                emu.resources[res] = kmock.ResourceInfo()
            self._seed()
            self._ready.set()
            while not self._stop.is_set():
                self._step()
                try:
                    await asyncio.wait_for(self._stop.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass

    def stop(self) -> None:
        """Stop the API server: from now on it is unreachable."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)

    def call(self, fn, *args):
        """Run fn in the emulator's thread (objects are only touched there)."""
        async def run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def kubeconfig(self, path) -> str:
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {"token": "test-token"}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                         "namespace": self.namespace}}]}
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        return str(path)

    # -- reading, from the test's thread --------------------------------------------------------------
    def get(self, res, name: str, namespace: str | None = "ns") -> dict | None:
        ns = self.namespace if namespace == "ns" else namespace

        def read():
            key = (res, ns, name)
            if key not in self.emu.objects or self.emu.objects[key].deleted:
                return None
            return copy.deepcopy(self.emu.objects[key].raw)
        return self.call(read)

    def all(self, res) -> list[dict]:
        return self.call(lambda: [copy.deepcopy(o.raw) for (r, _, _), o in list(self.emu.objects.items())
                                  if r == res and not o.deleted])

    def deny(self, verb: str, plural: str) -> None:
        self.call(lambda: self.emu.denied.add((verb, plural)))

    def calls(self) -> list[tuple]:
        return self.call(lambda: list(self.emu.calls))

    def set_paused(self, paused: bool) -> None:
        workspace = (WORKSPACES, self.namespace, self.workspace)
        self.call(lambda: self.emu.objects[workspace].patch({"spec": {"paused": paused}}))

    def grant_capacity(self) -> None:
        """The GPU node came: the Pending Pod is scheduled and starts."""
        self.capacity = True
        self.call(self._start_pending)

    # -- the cluster's objects --------------------------------------------------------------------------
    def _seed(self) -> None:
        kind_annotations = {ADDON_ENABLED_ANNOTATION: "true"} if self.addon else {}
        self.emu.objects[KINDS, None, self.kind] = {
            "apiVersion": "kubeflow.org/v1beta1", "kind": "WorkspaceKind",
            "metadata": {"name": self.kind, "annotations": kind_annotations}, "spec": {"spawner": {}}}
        self.emu.objects[WORKSPACES, self.namespace, self.workspace] = {
            "apiVersion": "kubeflow.org/v1beta1", "kind": "Workspace",
            "metadata": {"name": self.workspace, "namespace": self.namespace},
            "spec": {"kind": self.kind, "paused": False},
            "status": {"state": "Running", "stateMessage": "", "pauseTime": 0}}
        self._make_pod(restored_from=None)

    def _make_pod(self, restored_from: str | None, pending: bool = False) -> None:
        now = stamp()
        if pending:
            conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": UNSCHEDULABLE, "lastTransitionTime": now}]
            status = {"phase": "Pending", "conditions": conditions}
        else:
            conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                          {"type": "Ready", "status": "True", "lastTransitionTime": now}]
            if restored_from:
                conditions.append({"type": "PodRestored", "status": "True", "lastTransitionTime": now,
                                   "message": f"Pod restored from PodSnapshot {restored_from}"})
            status = {"phase": "Running", "conditions": conditions}
        self.emu.objects[PODS, self.namespace, self.pod] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.pod, "namespace": self.namespace, "uid": str(uuid.uuid4()),
                         "labels": {WORKSPACE_LABEL: self.workspace, "statefulset.kubernetes.io/pod-name": self.pod}},
            "spec": {"runtimeClassName": "gvisor", "containers": [{"name": "jupyterlab", "image": "jupyter-gkews"}]},
            "status": status}

    def _start_pending(self) -> None:
        key = (PODS, self.namespace, self.pod)
        if key in self.emu.objects and not self.emu.objects[key].deleted:
            if self.emu.objects[key].raw["status"]["phase"] == "Pending":
                self._make_pod(self._newest_ready() if self.restore_on else None)
                self.emu.objects[WORKSPACES, self.namespace, self.workspace].patch({"status": {"state": "Running"}})

    def _newest_ready(self) -> str | None:
        def is_ready(o):
            return any(c["type"] == "Ready" and c["status"] == "True"
                       for c in o.raw.get("status", {}).get("conditions", []))
        ready = [o.raw for (r, _, _), o in self.emu.objects.items() if r == SNAPSHOTS and not o.deleted and is_ready(o)]
        ready.sort(key=lambda s: s["metadata"]["creationTimestamp"])
        return ready[-1]["metadata"]["name"] if ready else None

    # -- the controllers --------------------------------------------------------------------------------
    def _step(self) -> None:
        for (res, ns, name), obj in list(self.emu.objects.items()):
            if obj.deleted:
                continue
            raw = obj.raw
            if raw.get("metadata", {}).get("deletionTimestamp"):
                obj.delete()  # GKE removed the storage and the finalizer
            elif res == TRIGGERS and not raw.get("status") and not self.hold.is_set():
                self._react_trigger(ns, name, raw)
            elif res == WORKSPACES:
                self._react_workspace(ns, name, raw)

    def _new_snapshot(self, ns: str, triggered_by: str, pod: str, ready: bool, failed: str | None = None) -> str:
        name = str(uuid.uuid4())
        now = stamp()
        if failed:
            conditions = [{"type": "Checkpoint", "status": "False", "reason": "Failed", "message": failed,
                           "lastTransitionTime": now},
                          {"type": "Ready", "status": "False", "reason": "Failed", "lastTransitionTime": now}]
        else:
            conditions = [{"type": "Checkpoint", "status": "True", "reason": "Complete", "lastTransitionTime": now},
                          {"type": "StorageReplicated", "status": "True", "lastTransitionTime": now},
                          {"type": "Ready", "status": "True" if ready else "False",
                           "reason": "AllSnapshotsAvailable" if ready else "AwaitingCheckpoint",
                           "lastTransitionTime": now}]
        self.emu.objects[SNAPSHOTS, ns, name] = {
            "apiVersion": f"{SNAPSHOT_GROUP}/v1", "kind": "PodSnapshot",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": now,
                         "labels": {TRIGGERED_BY_LABEL: triggered_by,
                                    "podsnapshot.gke.io/origin-node": "gke-gpu-node-1"},
                         "annotations": {ORIGIN_POD_ANNOTATION: pod},
                         "finalizers": ["podsnapshot.gke.io/podsnapshot-finalizer"]},
            "spec": {"policyName": f"gkews-{self.workspace}"},
            "status": {"conditions": conditions,
                       "storageStatus": {"gcs": {"observedGCSPath": f"gs://snapshots/{ns}/{name}"}}}}
        return name

    def _react_trigger(self, ns: str, name: str, raw: dict) -> None:
        now = stamp()
        trigger = self.emu.objects[TRIGGERS, ns, name]
        if self.outcome == "hang":
            return
        if self.outcome == "trigger-failed":
            failed = {"type": "Triggered", "status": "False", "reason": "Failed",
                      "message": "context deadline exceeded", "lastTransitionTime": now}
            trigger.patch({"status": {"conditions": [failed]}})
            return
        failed = "gVisor checkpoint failed: not enough host memory to stage GPU memory" \
            if self.outcome == "checkpoint-failed" else None
        snap = self._new_snapshot(ns, name, raw["spec"]["targetPod"], ready=True, failed=failed)
        created = snap if self.snapshot_created_as_string else {"name": snap}
        trigger.patch({"status": {"conditions": [{"type": "Triggered", "status": "True", "reason": "Complete",
                                                  "lastTransitionTime": now}], "snapshotCreated": created}})
        if self.restore_on == "trigger" and not failed:
            self._make_pod(restored_from=snap)

    def _react_workspace(self, ns: str, name: str, raw: dict) -> None:
        ws = self.emu.objects[WORKSPACES, ns, name]
        state = raw.get("status", {}).get("state")
        pod_key = (PODS, ns, self.pod)
        if raw["spec"].get("paused") and state != "Paused":
            kind = self.emu.objects[KINDS, None, raw["spec"]["kind"]].raw
            addon = "true" in (raw["metadata"].get("annotations", {}).get(ADDON_ENABLED_ANNOTATION),
                               kind["metadata"].get("annotations", {}).get(ADDON_ENABLED_ANNOTATION))
            annotations = {}
            if addon:  # the add-on holds the pause, snapshots the Pod, then lets the pause through
                snap = self._new_snapshot(ns, f"addon-{name}-{int(time.time() * 1000)}", self.pod, ready=True)
                annotations = {ADDON_STATE_ANNOTATION: "Ready", ADDON_LAST_ANNOTATION: snap}
            if pod_key in self.emu.objects and not self.emu.objects[pod_key].deleted:
                self.emu.objects[pod_key].delete()
            ws.patch({"metadata": {"annotations": annotations} if annotations else {},
                      "status": {"state": "Paused", "pauseTime": int(time.time() * 1000),
                                 "stateMessage": "Workspace is paused"}})
        elif not raw["spec"].get("paused") and state == "Paused":
            if self.capacity:
                self._make_pod(self._newest_ready() if self.restore_on else None)
                ws.patch({"status": {"state": "Running", "pauseTime": 0, "stateMessage": ""}})
            else:
                self._make_pod(None, pending=True)
                ws.patch({"status": {"state": "Pending", "pauseTime": 0,
                                     "stateMessage": "Pod is unschedulable: waiting for a GPU node"}})
