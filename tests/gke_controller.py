"""A Kubernetes API for the GKE backend's tests, and GKE's controllers played by a loop that reacts.

The API server is kmock's KubernetesEmulator, a real HTTP server on a localhost port that stores
objects as JSON (create/get/list/patch/delete); the official `kubernetes` client talks to it like to a
real API server. It runs in its own thread and event loop, so the Jupyter server under test can be in
this process or another one. What kmock does not do is added here, and said so:

- a create answers 201 (kmock answers 200, and the generated client then returns None);
- identities: the bearer token of a kubeconfig is the user (`kubeconfig(path, user=...)`); the Pod's
  processes run as its service account `system:serviceaccount:<ns>:ws-<workspace>`, as Kubeflow runs them;
- RBAC, when `rbac` is given the manifests (e.g. deploy/rbac.yaml): Roles, ClusterRoles and their
  bindings are evaluated for every request, plus the RoleBinding the Kubeflow controller makes for each
  ClusterRole of the WorkspaceKind's `spec.podTemplate.serviceAccount.clusterRoles`; a request they do not
  allow answers 403 as the API server words it. `deny(verb, plural)` forces a 403 for one call;
  `fail(verb, plural, status, times)` answers the next `times` such calls with a transient error (5xx);
- admission: writes to the CRD resources are checked against the published schemas and their CEL rules
  (tests/crd_schemas.py) and refused with 422, as the API server refuses them;
- label selectors are ignored by kmock (our code filters on its side too);
- GKE's controllers: `FakeGke._step` reacts to what our code creates, every 50 ms:
  * a PodSnapshotManualTrigger gets a PodSnapshot (UUID name, `gke-pod-snapshot-triggered-by` label,
    origin-pod annotation, finalizer) and the conditions `outcome` asks for: Ready, a failed trigger
    (Triggered False, Failed, "context deadline exceeded"), a failed checkpoint, upload
    (StorageReplicated False) or snapshot (Ready False, Error), or nothing (hang). A Pod that does not run
    under gVisor is refused. The policy that selects the Pod decides what happens next: `resume` lets it go
    on; `stop` completes it (phase Succeeded), and from then on its processes are gone: every request
    sent with the Pod's identity answers 503 (it could not have been sent);
  * `restore_on="trigger"`: once the snapshot is Ready the Pod is marked restored (new uid, condition
    PodRestored=True naming the snapshot) while the same processes keep running: what a restored copy of
    the server sees when it wakes up inside the snapshot wait;
  * the Workspace controller (Kubeflow Notebooks v2): the Pod is `ws-<workspace>-<5 random>-0`, recorded in
    status.podTemplatePod.name; spec.paused true stops (deletes) it, status Paused; false creates it again,
    restored from the newest Ready snapshot (or the one the add-on pinned) when `restore_on` is set, started
    cold otherwise, or left Pending/Unschedulable when `capacity` is False;
  * the GKE Workspaces snapshot add-on, on by its own rules (case-insensitive `enabled` annotation, the
    Workspace's "false" first, `pod-migration.gke.io/enabled`, TPU podConfigs off): its Pod webhook sets
    runtimeClassName gvisor and its readiness gate; its Workspace webhook turns a pause into
    spec.paused=false + checkpoint-state Checkpointing + checkpoint-started-at; its reconciler creates the
    trigger `ws-<workspace>-trigger` (policy `ws-<workspace>-policy`, postCheckpoint stop), waits for the
    snapshot to be Ready (unless `addon_hold` is set), then lets the pause through; after a restore it
    retires its snapshots and trigger. A trigger whose stamp is not the Workspace's is deleted and redone;
  * objects with a deletionTimestamp lose their finalizers (GKE deletes the storage) and go away.
Not modelled: the StatefulSet replacing a completed Pod, the add-on's socket-settle delay.
"""
from __future__ import annotations

import asyncio
import copy
import random
import threading
import time
import uuid
from pathlib import Path

import attrs
import crd_schemas
import kmock
import yaml
from kmock._internal.dicts import patch_dict

from jupyter_gkews.k8s import (ADDON_ENABLED_ANNOTATION, ADDON_LAST_ANNOTATION, ADDON_READINESS_GATE,
                               ADDON_STARTED_ANNOTATION, ADDON_STATE_ANNOTATION, MIGRATION_ENABLED_ANNOTATION,
                               ORIGIN_POD_ANNOTATION, SNAPSHOT_GROUP, TPU_RESOURCE,
                               TRIGGERED_BY_LABEL, WORKSPACE_LABEL)

# the add-on pins the snapshot a new Pod restores from (the server never sets it; only this fixture plays it)
PINNED_SNAPSHOT_ANNOTATION = "podsnapshot.gke.io/ps-name"
ADDON_STORAGE_ANNOTATION = "podsnapshot.gke.kubeflow.org/storage-config"  # the add-on's; the server never reads it
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
DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ADMIN = "system:admin"  # the token of a kubeconfig written without a user: allowed everything


def stamp(at: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at or time.time()))


def generated_suffix(n: int = 5) -> str:
    """What metadata.generateName appends (Kubernetes' alphabet without vowels and look-alikes)."""
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))


READY_SNAPSHOT = (("Checkpoint", "True", "Complete"), ("StorageReplicated", "True", "Succeeded"),
                  ("Ready", "True", "AllSnapshotsAvailable"))


def _cond(kind: str, status: str, reason: str, message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": stamp()}


def _is(value: str | None, expected: str) -> bool:
    return (value or "").lower() == expected


def _rule_allows(rule: dict, verb: str, group: str, plural: str) -> bool:
    return ((group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
            and (plural in rule.get("resources", []) or "*" in rule.get("resources", []))
            and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", [])))


def _subject_is(subject: dict, user: str, binding_namespace: str | None) -> bool:
    if subject.get("kind") == "ServiceAccount":
        return user == f"system:serviceaccount:{subject.get('namespace') or binding_namespace}:{subject['name']}"
    if subject.get("kind") == "User":
        return user == subject["name"]
    if subject.get("kind") == "Group" and user.startswith("system:serviceaccount:"):
        return subject["name"] in ("system:serviceaccounts", "system:serviceaccounts:" + user.split(":")[2])
    return False


@attrs.define(kw_only=True)
class Cluster(kmock.KubernetesEmulator):
    """kmock's emulator with identities, RBAC, schema admission, the add-on's Workspace webhook, 201 on create,
    and a log of (verb, plural, name) with the user of each call."""

    gke: "FakeGke" = attrs.field(default=None)
    denied: set = attrs.field(factory=set)
    faults: list = attrs.field(factory=list)  # [verb, plural, status, times left]: transient errors to answer
    calls: list = attrs.field(factory=list)
    callers: list = attrs.field(factory=list)

    async def _handle(self, request):
        if request.resource is not None:
            request = self._admit(request)
        response = await super()._handle(request)
        if request.action == kmock.action.CREATE and response.status == 200:
            response.set_status(201)  # what a real API server answers
        return response

    @staticmethod
    def _check_patch_type(request, plural: str, name) -> None:
        """The real API server decodes a PATCH by its Content-Type (kmock by the body's shape): a list sent
        as a merge patch replaces the object with an array and is refused; a strategic merge patch is not
        served for custom resources."""
        kind = next((v for k, v in request.headers.items() if k.lower() == "content-type"), "").split(";")[0]
        if isinstance(request.data, list) and kind != "application/json-patch+json":
            raise kmock.KubernetesError(
                status=422, reason="Invalid",
                message=f'{plural} "{name}" is invalid: patch: Invalid value: "[...]": json: cannot unmarshal '
                        f"array into Go value of type map[string]interface {{}} (sent as {kind or 'no type'})")
        if kind == "application/strategic-merge-patch+json" and plural not in ("pods", "events"):
            raise kmock.KubernetesError(status=415, reason="UnsupportedMediaType",
                                        message="the body of the request was in an unknown format - accepted "
                                                "media types include: application/json-patch+json, "
                                                "application/merge-patch+json, application/apply-patch+yaml")

    def _admit(self, request):
        gke = self.gke
        verb, plural, group = VERBS.get(request.action, str(request.method).lower()), request.resource.plural, \
            request.resource.group
        name = request.name or (request.data.get("metadata", {}).get("name")
                                if isinstance(request.data, dict) else None)
        user = gke.user_of(request.headers)
        self.calls.append((verb, plural, name))
        self.callers.append(user)
        if user == gke.pod_user and gke.pod_stopped:
            raise kmock.KubernetesError(
                status=503, reason="ServiceUnavailable",
                message=f"the Pod {gke.pod} was completed after its checkpoint (postCheckpoint: stop): its processes "
                        "are gone, so this request could not have been sent")
        for fault in self.faults:
            if fault[:2] == [verb, plural] and fault[3] > 0:
                fault[3] -= 1
                raise kmock.KubernetesError(status=fault[2], reason="ServiceUnavailable" if fault[2] == 503 else
                                            "InternalError", message=f"injected: a transient {fault[2]} on {verb} "
                                                                     f"{plural} (the API server or its etcd)")
        forbidden = (verb, plural) in self.denied or not gke.allowed(user, verb, group, plural, request.namespace)
        if forbidden:
            where = f' in the namespace "{request.namespace}"' if request.namespace else " at the cluster scope"
            raise kmock.KubernetesError(
                status=403, reason="Forbidden",
                message=f'{plural}.{group} "{name or ""}" is forbidden: User "{user}" cannot {verb} resource '
                        f'"{plural}" in API group "{group}"{where}')
        if plural == "podsnapshots" and verb in ("create", "patch", "update"):  # GKE's admission policy
            raise kmock.KubernetesError(
                status=422, reason="Invalid",
                message=f"podsnapshots.{group} \"{name or ''}\" is forbidden: ValidatingAdmissionPolicy "
                        "'podsnapshot-controller-only' denied request: only GKE's Pod snapshot controller creates "
                        "or modifies PodSnapshots; clients may get, list, watch and delete them")
        if verb == "patch":
            self._check_patch_type(request, plural, name)
        if plural not in crd_schemas.CRDS or verb not in ("create", "patch"):
            return request
        key = (request.resource, request.namespace, name)
        old = copy.deepcopy(self.objects[key].raw) if key in self.objects and not self.objects[key].deleted else None
        if verb == "create":
            new = request.data
        else:
            try:
                new = patch_dict(old or {}, request.data)
            except Exception:  # a failed JSON Patch `test`: kmock answers it as it does
                return request
            if plural == "workspaces":
                mutated = gke.workspace_webhook(old, copy.deepcopy(new))
                if mutated != new:  # the webhook's changes go into the request (kmock keeps the same request object)
                    new = mutated
                    whole = [{"op": "replace", "path": "/spec", "value": new["spec"]},
                             {"op": "replace", "path": "/metadata", "value": new["metadata"]}]
                    if isinstance(request.data, list):
                        request.data[:] = whole
                    else:
                        request.data.clear()
                        request.data.update(spec=new["spec"], metadata=new["metadata"])
        problems = crd_schemas.errors(new, old if verb == "patch" else None, plural)
        if problems:
            raise kmock.KubernetesError(status=422, reason="Invalid",
                                        message=f'{plural} "{name}" is invalid: ' + "; ".join(problems))
        return request


class FakeGke:
    def __init__(self, namespace: str = "team-a", workspace: str = "gpu-notebook", kind: str = "jupyterlab-gpu", *,
                 addon: bool = False, kind_annotations: dict | None = None, workspace_annotations: dict | None = None,
                 tpu: bool = False, sandbox_admission: bool = True, rbac: list[dict] | None = None):
        self.namespace, self.workspace, self.kind = namespace, workspace, kind
        self.pod = f"ws-{workspace}-{generated_suffix()}-0"  # the StatefulSet's Pod: generateName, then -0
        self.service_account = f"ws-{workspace}"
        self.pod_user = f"system:serviceaccount:{namespace}:{self.service_account}"
        self.kind_annotations = dict(kind_annotations or ({ADDON_ENABLED_ANNOTATION: "true"} if addon else {}))
        self.workspace_annotations = dict(workspace_annotations or {})
        self.tpu = tpu
        self.sandbox_admission = sandbox_admission  # the cluster's own admission sets runtimeClassName: gvisor
        self.rbac = rbac  # None: RBAC is not enforced (the tests' admin and the Pod may do anything)
        # ready | trigger-failed | trigger-error | checkpoint-failed | storage-failed | ready-failed | hang
        self.outcome = "ready"
        self.restore_on: str | None = None  # "trigger" | "resume" | None (a resumed Pod starts cold)
        self.capacity = True
        self.pod_stopped = False
        self.snapshot_created_as_string = False
        self.hold = threading.Event()  # while set, triggers wait
        # a snapshot that will be Ready is first uploading (Ready False, AwaitingCheckpoint) for this many of
        # the controller's steps, and for as long as upload_hold is set: GKE takes 12 s to minutes
        self.upload_steps = 2
        self.upload_hold = threading.Event()
        self._uploading: dict[tuple, int] = {}  # (namespace, snapshot) -> steps left
        self._restore_when_ready: dict[tuple, bool] = {}  # restore_on="trigger": restored once Ready
        self.addon_hold = threading.Event()  # while set, the add-on does not create its trigger
        self.addon_intercepts = 0  # pauses the add-on's webhook held
        self.leaked_storage: list[str] = []  # snapshots finalized after their policy was gone: GCS files left
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
        async with Cluster(gke=self) as emu, kmock.Server(emu) as server:
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

    def kubeconfig(self, path, user: str = ADMIN) -> str:
        """A kubeconfig whose bearer token is `user` (the Pod's is `self.pod_user`)."""
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {"token": user}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                         "namespace": self.namespace}}]}
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        return str(path)

    def pod_kubeconfig(self, path) -> str:
        return self.kubeconfig(path, self.pod_user)

    @staticmethod
    def user_of(headers) -> str:
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        token = auth.split(" ", 1)[-1] if auth else ""
        return ADMIN if token in ("", "test-token") else token

    # -- RBAC -----------------------------------------------------------------------------------------
    def allowed(self, user: str, verb: str, group: str, plural: str, namespace: str | None) -> bool:
        if self.rbac is None or user == ADMIN:
            return True
        docs = [d for d in self.rbac if d] + self._kubeflow_role_bindings()
        roles = {(d["kind"], d["metadata"].get("namespace") if d["kind"] == "Role" else None, d["metadata"]["name"]): d
                 for d in docs if d["kind"] in ("Role", "ClusterRole")}
        for binding in docs:
            if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            bns = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
            if binding["kind"] == "RoleBinding" and bns != namespace:
                continue  # a RoleBinding grants inside its namespace only, never cluster-scoped resources
            if not any(_subject_is(s, user, bns) for s in binding.get("subjects") or []):
                continue
            ref = binding["roleRef"]
            role = roles.get((ref["kind"], bns if ref["kind"] == "Role" else None, ref["name"]))
            if role and any(_rule_allows(r, verb, group, plural) for r in role.get("rules") or []):
                return True
        return False

    def _kubeflow_role_bindings(self) -> list[dict]:
        """The Workspace controller's RoleBindings: one per ClusterRole the WorkspaceKind lists, to ws-<workspace>."""
        kind = self._obj(KINDS, None, self.kind) or {}
        roles = ((kind.get("spec") or {}).get("podTemplate") or {}).get("serviceAccount", {}).get("clusterRoles") or []
        return [{"kind": "RoleBinding", "metadata": {"name": f"ws-{self.workspace}-{i}", "namespace": self.namespace},
                 "subjects": [{"kind": "ServiceAccount", "name": self.service_account, "namespace": self.namespace}],
                 "roleRef": {"kind": "ClusterRole", "name": r["name"]}} for i, r in enumerate(roles)]

    # -- reading, from the test's thread --------------------------------------------------------------
    def get(self, res, name: str, namespace: str | None = "ns") -> dict | None:
        ns = self.namespace if namespace == "ns" else namespace
        return self.call(lambda: copy.deepcopy(self._obj(res, ns, name)))

    def all(self, res) -> list[dict]:
        return self.call(lambda: [copy.deepcopy(o.raw) for (r, _, _), o in list(self.emu.objects.items())
                                  if r == res and not o.deleted])

    def deny(self, verb: str, plural: str) -> None:
        self.call(lambda: self.emu.denied.add((verb, plural)))

    def fail(self, verb: str, plural: str, status: int = 503, times: int = 1) -> None:
        """The next `times` such requests answer `status`, as a real API server does now and then (an apiserver
        restarting, etcd slow, a Pod just unfrozen after its snapshot upload holding dead connections)."""
        self.call(lambda: self.emu.faults.append([verb, plural, status, times]))

    def faults_left(self) -> int:
        return self.call(lambda: sum(f[3] for f in self.emu.faults))

    def calls(self, user: str | None = None) -> list[tuple]:
        return self.call(lambda: [c for c, u in zip(self.emu.calls, self.emu.callers) if user in (None, u)])

    def set_paused(self, paused: bool) -> None:
        """What `kubectl patch` does: through the add-on's Workspace webhook."""
        def patch():
            ws = self.emu.objects[WORKSPACES, self.namespace, self.workspace]
            new = copy.deepcopy(ws.raw)
            new["spec"]["paused"] = paused
            new = self.workspace_webhook(copy.deepcopy(ws.raw), new)
            ws.patch({"spec": {"paused": new["spec"]["paused"]},
                      "metadata": {"annotations": new["metadata"].get("annotations") or {}}})
        self.call(patch)

    def grant_capacity(self) -> None:
        """The GPU node came: the Pending Pod is scheduled and starts."""
        self.capacity = True
        self.call(self._start_pending)

    # -- the cluster's objects --------------------------------------------------------------------------
    def _obj(self, res, ns, name) -> dict | None:
        key = (res, ns, name)
        if key not in self.emu.objects or self.emu.objects[key].deleted:
            return None
        return self.emu.objects[key].raw

    def _seed(self) -> None:
        kind = next(d for d in yaml.safe_load_all((DEPLOY / "workspacekind.yaml").read_text())
                    if d and d["kind"] == "WorkspaceKind")
        kind["metadata"] = {"name": self.kind, "annotations": self.kind_annotations}
        if self.tpu:
            kind["spec"]["podTemplate"]["options"]["podConfig"]["values"][0]["spec"]["resources"]["limits"] = \
                {TPU_RESOURCE: "4"}
        self.emu.objects[KINDS, None, self.kind] = kind
        self.emu.objects[WORKSPACES, self.namespace, self.workspace] = {
            "apiVersion": "kubeflow.org/v1beta1", "kind": "Workspace",
            "metadata": {"name": self.workspace, "namespace": self.namespace,
                         "annotations": self.workspace_annotations},
            "spec": {"kind": self.kind, "paused": False,
                     "podTemplate": {"options": {"imageConfig": "jupyterlab-gkews", "podConfig": "l4"},
                                     "volumes": {"home": f"home-{self.workspace}"}}},
            "status": {"state": "Running", "stateMessage": "", "pauseTime": 0, "podTemplatePod": self._pod_status()}}
        self._make_pod(restored_from=None)

    def _pod_status(self, running: bool = True) -> dict:
        return {"name": self.pod if running else "", "nodeName": "gke-gpu-node-1" if running else "",
                "serviceAccountName": self.service_account}

    def addon_on(self, ws: dict) -> bool:
        """The add-on's snapshotEnabled: Workspace "false" first, TPU podConfig, Workspace opt-in, then the kind."""
        found = ws["metadata"].get("annotations") or {}
        if ADDON_ENABLED_ANNOTATION in found and _is(found[ADDON_ENABLED_ANNOTATION], "false"):
            return False
        opted_in = (_is(found.get(ADDON_ENABLED_ANNOTATION), "true")
                    or _is(found.get(MIGRATION_ENABLED_ANNOTATION), "true"))
        kind = self._obj(KINDS, None, ws["spec"].get("kind"))
        if kind is None:
            return opted_in
        config = ws["spec"].get("podTemplate", {}).get("options", {}).get("podConfig")
        for value in kind["spec"]["podTemplate"]["options"]["podConfig"]["values"]:
            resources = value.get("spec", {}).get("resources", {})
            if value["id"] == config and any(TPU_RESOURCE in (resources.get(k) or {}) for k in ("limits", "requests")):
                return False
        kind_found = kind["metadata"].get("annotations") or {}
        return opted_in or _is(kind_found.get(ADDON_ENABLED_ANNOTATION), "true") \
            or _is(kind_found.get(MIGRATION_ENABLED_ANNOTATION), "true")

    def _addon_storage_config(self, ws: dict) -> str:
        """The add-on's StorageConfig: the Workspace's annotation, else its kind's, else the add-on's default."""
        kind = self._obj(KINDS, None, ws["spec"].get("kind")) or {"metadata": {}}
        for obj in (ws, kind):
            name = (obj["metadata"].get("annotations") or {}).get(ADDON_STORAGE_ANNOTATION)
            if name:
                return name
        return "kubeflow-pod-snapshot-storage-config"

    def _workspace_obj(self) -> dict:
        return self._obj(WORKSPACES, self.namespace, self.workspace)

    def _make_pod(self, restored_from: str | None, pending: bool = False) -> None:
        now = stamp()
        ws = self._workspace_obj()
        addon = self.addon_on(ws) and not self.tpu
        if pending:
            conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": UNSCHEDULABLE, "lastTransitionTime": now}]
            status = {"phase": "Pending", "conditions": conditions}
        else:
            conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                          {"type": "Ready", "status": "True", "lastTransitionTime": now}]
            if addon:
                conditions.append({"type": ADDON_READINESS_GATE, "status": "True", "lastTransitionTime": now})
            if restored_from:
                conditions.append({"type": "PodRestored", "status": "True", "lastTransitionTime": now,
                                   "message": f"Pod restored from PodSnapshot {restored_from}"})
            status = {"phase": "Running", "conditions": conditions}
        container = {"name": "jupyterlab", "image": "jupyter-gkews"}
        if self.tpu:
            container["resources"] = {"limits": {TPU_RESOURCE: "4"}}
        spec = {"serviceAccountName": self.service_account, "containers": [container]}
        annotations = {}
        if addon:  # the add-on's Pod webhook
            spec.update(runtimeClassName="gvisor", readinessGates=[{"conditionType": ADDON_READINESS_GATE}])
            last = (ws["metadata"].get("annotations") or {}).get(ADDON_LAST_ANNOTATION)
            if last:
                annotations[PINNED_SNAPSHOT_ANNOTATION] = last
        elif self.sandbox_admission:
            spec["runtimeClassName"] = "gvisor"
        self.pod_stopped = False
        self.emu.objects[PODS, self.namespace, self.pod] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.pod, "namespace": self.namespace, "uid": str(uuid.uuid4()),
                         "annotations": annotations,
                         "labels": {WORKSPACE_LABEL: self.workspace, "statefulset.kubernetes.io/pod-name": self.pod}},
            "spec": spec, "status": status}

    def _set_pod_ready(self, ready: bool) -> None:
        pod = self._obj(PODS, self.namespace, self.pod)
        if pod is not None:
            conditions = [dict(c, status="True" if ready else "False") if c["type"] in ("Ready", ADDON_READINESS_GATE)
                          else c for c in pod["status"]["conditions"]]
            self.emu.objects[PODS, self.namespace, self.pod].patch({"status": {"conditions": conditions}})

    def _start_pending(self) -> None:
        pod = self._obj(PODS, self.namespace, self.pod)
        if pod is not None and pod["status"]["phase"] == "Pending":
            self._make_pod(self._restore_source() if self.restore_on else None)
            self.emu.objects[WORKSPACES, self.namespace, self.workspace].patch(
                {"status": {"state": "Running", "podTemplatePod": self._pod_status()}})

    def _restore_source(self) -> str | None:
        """The snapshot GKE restores from: the one the add-on pins on the new Pod, else the newest Ready one."""
        ws = self._workspace_obj()
        pinned = (ws["metadata"].get("annotations") or {}).get(ADDON_LAST_ANNOTATION)
        if pinned and self.addon_on(ws) and not self.tpu:
            return pinned
        ready = [o.raw for (r, _, _), o in self.emu.objects.items() if r == SNAPSHOTS and not o.deleted
                 and any(c["type"] == "Ready" and c["status"] == "True"
                         for c in o.raw.get("status", {}).get("conditions", []))]
        ready.sort(key=lambda s: s["metadata"]["creationTimestamp"])
        return ready[-1]["metadata"]["name"] if ready else None

    # -- the add-on's Workspace webhook ---------------------------------------------------------------
    def workspace_webhook(self, old: dict | None, new: dict) -> dict:
        """mutateWorkspace: hold a pause (spec.paused false, Checkpointing) while the add-on snapshots the Pod."""
        was = bool(((old or {}).get("spec") or {}).get("paused"))
        now = bool((new.get("spec") or {}).get("paused"))
        if was == now or not self.addon_on(new):
            return new
        annotations = dict(new["metadata"].get("annotations") or {})
        state = annotations.get(ADDON_STATE_ANNOTATION)
        if now and state != "Ready":
            pod = self._obj(PODS, self.namespace, self.pod)
            if pod is None or pod["status"]["phase"] != "Running":
                return new
            self._set_pod_ready(False)  # the add-on's readiness gate: out of the Service while it checkpoints
            self.addon_intercepts += 1
            annotations.update({ADDON_STATE_ANNOTATION: "Checkpointing",
                                ADDON_STARTED_ANNOTATION: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
                                + f".{self.addon_intercepts}Z"})
            new["spec"]["paused"] = False
        elif not now and state == "Ready":
            annotations[ADDON_STATE_ANNOTATION] = "Restoring"
        new["metadata"]["annotations"] = annotations
        return new

    # -- the controllers --------------------------------------------------------------------------------
    def _step(self) -> None:
        for (res, ns, name), obj in list(self.emu.objects.items()):
            if obj.deleted:
                continue
            raw = obj.raw
            if raw.get("metadata", {}).get("deletionTimestamp"):
                if res == SNAPSHOTS and self._obj(POLICIES, ns, (raw.get("spec") or {}).get("policyName")) is None:
                    # the finalizer finds the bucket through the policy: without it the object goes, the
                    # checkpoint files stay in GCS
                    self.leaked_storage.append(name)
                obj.delete()  # GKE removed the storage and the finalizer
            elif res == TRIGGERS and not raw.get("status") and not self.hold.is_set():
                self._react_trigger(ns, name, raw)
            elif res == SNAPSHOTS and (ns, name) in self._uploading and not self.upload_hold.is_set():
                self._uploading[ns, name] -= 1
                if self._uploading[ns, name] <= 0:
                    del self._uploading[ns, name]
                    obj.patch({"status": {"conditions": [_cond(*c) for c in READY_SNAPSHOT]}})
                    if self._restore_when_ready.pop((ns, name), False):
                        self._make_pod(restored_from=name)
            elif res == WORKSPACES:
                self._addon_reconcile(ns, name, raw)
                self._react_workspace(ns, name, self._obj(WORKSPACES, ns, name))

    def _policy_for(self, ns: str, pod: dict) -> dict | None:
        for (r, pns, _), o in self.emu.objects.items():
            if r == POLICIES and pns == ns and not o.deleted:
                wanted = o.raw["spec"]["selector"].get("matchLabels") or {}
                if all(pod["metadata"]["labels"].get(k) == v for k, v in wanted.items()):
                    return o.raw
        return None

    def _new_snapshot(self, ns: str, triggered_by: str, pod: str, policy: str) -> str:
        name = str(uuid.uuid4())
        ok = READY_SNAPSHOT[:2]
        conditions = {
            "ready": READY_SNAPSHOT,
            "checkpoint-failed": (("Checkpoint", "False", "Failed"), ("Ready", "False", "Failed")),
            "storage-failed": (ok[0], ("StorageReplicated", "False", "Failed"),
                               ("Ready", "False", "AwaitingCheckpoint")),
            "ready-failed": ok + (("Ready", "False", "Error"),),
        }[self.outcome]
        if self.outcome == "ready" and (self.upload_steps > 0 or self.upload_hold.is_set()):
            conditions = (ok[0], ("Ready", "False", "AwaitingCheckpoint"))
            self._uploading[ns, name] = self.upload_steps
        messages = {"Checkpoint": "gVisor checkpoint failed: not enough host memory to stage GPU memory",
                    "StorageReplicated": "upload to gs://snapshots failed: 403 the Pod's service account may not write",
                    "Ready": "snapshot metadata could not be recorded"}
        self.emu.objects[SNAPSHOTS, ns, name] = {
            "apiVersion": f"{SNAPSHOT_GROUP}/v1", "kind": "PodSnapshot",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": stamp(),
                         "labels": {TRIGGERED_BY_LABEL: triggered_by,
                                    "podsnapshot.gke.io/origin-node": "gke-gpu-node-1"},
                         "annotations": {ORIGIN_POD_ANNOTATION: pod},
                         "finalizers": ["podsnapshot.gke.io/podsnapshot-finalizer"]},
            "spec": {"policyName": policy},
            "status": {"conditions": [_cond(k, s, r, messages[k] if s == "False" and r in ("Failed", "Error") else "")
                                      for k, s, r in conditions],
                       "storageStatus": {"gcs": {"observedGCSPath": f"gs://snapshots/{ns}/{name}"}}}}
        return name

    def _react_trigger(self, ns: str, name: str, raw: dict) -> None:
        trigger = self.emu.objects[TRIGGERS, ns, name]
        pod = self._obj(PODS, ns, raw["spec"]["targetPod"])
        if self.outcome == "hang":
            return
        refused = ("context deadline exceeded" if self.outcome == "trigger-failed" else
                   "the node's snapshot agent is unreachable" if self.outcome == "trigger-error" else
                   f"Pod {raw['spec']['targetPod']} not found" if pod is None else
                   f"Pod {pod['metadata']['name']} is not running in gVisor (runtimeClassName: gvisor)"
                   if pod["spec"].get("runtimeClassName") != "gvisor" else None)
        policy = None if refused else self._policy_for(ns, pod)
        if not refused and policy is None:
            refused = f"no PodSnapshotPolicy selects Pod {pod['metadata']['name']}"
        if refused:
            reason = "Error" if self.outcome == "trigger-error" else "Failed"  # GKE reports either
            trigger.patch({"status": {"conditions": [_cond("Triggered", "False", reason, refused)]}})
            return
        snap = self._new_snapshot(ns, name, raw["spec"]["targetPod"], policy["metadata"]["name"])
        created = snap if self.snapshot_created_as_string else {"name": snap}
        trigger.patch({"status": {"conditions": [_cond("Triggered", "True", "Complete")], "snapshotCreated": created}})
        if self.outcome != "ready":
            return
        if policy["spec"]["triggerConfig"].get("postCheckpoint", "resume") == "stop":
            self.emu.objects[PODS, ns, pod["metadata"]["name"]].patch(
                {"status": {"phase": "Succeeded", "conditions": [_cond("Ready", "False", "PodCompleted")]}})
            self.pod_stopped = True
        elif self.restore_on == "trigger" and (ns, snap) in self._uploading:
            self._restore_when_ready[ns, snap] = True  # GKE restores only from a Ready snapshot
        elif self.restore_on == "trigger":
            self._make_pod(restored_from=snap)

    def _addon_reconcile(self, ns: str, name: str, raw: dict) -> None:
        """reconcileWorkspace: the add-on's policy, its trigger while Checkpointing, retirement after a restore."""
        if not self.addon_on(raw):
            return
        policy, trigger_name = f"ws-{name}-policy", f"ws-{name}-trigger"
        if self._obj(POLICIES, ns, policy) is None:
            self.emu.objects[POLICIES, ns, policy] = {
                "apiVersion": f"{SNAPSHOT_GROUP}/v1", "kind": "PodSnapshotPolicy",
                "metadata": {"name": policy, "namespace": ns},
                "spec": {"storageConfigName": self._addon_storage_config(raw),
                         "selector": {"matchLabels": {WORKSPACE_LABEL: name}},
                         "triggerConfig": {"type": "manual", "postCheckpoint": "stop"},
                         "retentionConfig": {"lastAccessTimeout": "7d"}}}
        found = raw["metadata"].get("annotations") or {}
        ws = self.emu.objects[WORKSPACES, ns, name]
        pod = self._obj(PODS, ns, self.pod)
        if found.get(ADDON_STATE_ANNOTATION) == "Checkpointing":
            trigger = self._obj(TRIGGERS, ns, trigger_name)
            if pod is None:
                ws.patch({"spec": {"paused": True}, "metadata": {"annotations": {
                    ADDON_STATE_ANNOTATION: "Ready", ADDON_STARTED_ANNOTATION: None}}})
            elif trigger is None:
                if not self.addon_hold.is_set():
                    self.emu.objects[TRIGGERS, ns, trigger_name] = {
                        "apiVersion": f"{SNAPSHOT_GROUP}/v1", "kind": "PodSnapshotManualTrigger",
                        "metadata": {"name": trigger_name, "namespace": ns,
                                     "annotations": {ADDON_STARTED_ANNOTATION: found.get(ADDON_STARTED_ANNOTATION)}},
                        "spec": {"targetPod": self.pod}}
            elif (trigger["metadata"]["annotations"].get(ADDON_STARTED_ANNOTATION)
                  != found.get(ADDON_STARTED_ANNOTATION)):
                self.emu.objects[TRIGGERS, ns, trigger_name].delete()  # from an earlier pause: redo it
            else:
                created = (trigger.get("status") or {}).get("snapshotCreated") or {}
                snap = self._obj(SNAPSHOTS, ns, created.get("name") if isinstance(created, dict) else created)
                if snap and any(c["type"] == "Ready" and c["status"] == "True" for c in snap["status"]["conditions"]):
                    ws.patch({"spec": {"paused": True}, "metadata": {"annotations": {
                        ADDON_STATE_ANNOTATION: "Ready", ADDON_STARTED_ANNOTATION: None,
                        ADDON_LAST_ANNOTATION: snap["metadata"]["name"]}}})
        elif not raw["spec"].get("paused") and found.get(ADDON_STATE_ANNOTATION) and pod is not None \
                and pod["status"]["phase"] == "Running" and any(
                    c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"]):
            for (r, sns, sname), o in list(self.emu.objects.items()):  # the consumed snapshot goes, and its trigger
                if r == SNAPSHOTS and sns == ns and not o.deleted and \
                        o.raw["metadata"]["labels"].get(TRIGGERED_BY_LABEL) == trigger_name:
                    o.patch({"metadata": {"deletionTimestamp": stamp()}})
            if self._obj(TRIGGERS, ns, trigger_name) is not None:
                self.emu.objects[TRIGGERS, ns, trigger_name].delete()
            ws.patch({"metadata": {"annotations": {ADDON_STATE_ANNOTATION: None, ADDON_LAST_ANNOTATION: None}}})

    def _react_workspace(self, ns: str, name: str, raw: dict) -> None:
        ws = self.emu.objects[WORKSPACES, ns, name]
        state = raw.get("status", {}).get("state")
        if raw["spec"].get("paused") and state != "Paused":
            if self._obj(PODS, ns, self.pod) is not None:
                self.emu.objects[PODS, ns, self.pod].delete()
            self.pod_stopped = False  # the Pod is gone; a new one starts with new processes
            ws.patch({"status": {"state": "Paused", "pauseTime": int(time.time() * 1000),
                                 "stateMessage": "Workspace is paused", "podTemplatePod": self._pod_status(False)}})
        elif not raw["spec"].get("paused") and state == "Paused":
            if self.capacity:
                self._make_pod(self._restore_source() if self.restore_on else None)
                ws.patch({"status": {"state": "Running", "pauseTime": 0, "stateMessage": "",
                                     "podTemplatePod": self._pod_status()}})
            else:
                self._make_pod(None, pending=True)
                ws.patch({"status": {"state": "Pending", "pauseTime": 0, "podTemplatePod": self._pod_status(),
                                     "stateMessage": "Pod is unschedulable: waiting for a GPU node"}})
