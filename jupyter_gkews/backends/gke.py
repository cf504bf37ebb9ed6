"""The GKE backend: inside a GKE Workspace Pod, through the official `kubernetes` client.

Pause: after the application checkpoints, take a Pod snapshot (mode `trigger`: our own manual
PodSnapshotPolicy, `postCheckpoint: resume`, and a PodSnapshotManualTrigger for this Pod; mode `workspace`:
the GKE Workspaces snapshot add-on snapshots the Pod when the Workspace pauses), then release by
`spec.paused: true` on the Workspace, which stops the Pod and gives its GPU node back.

Why `resume`: the request comes from inside the Pod that is snapshotted. With `stop` GKE completes the Pod
right after its checkpoint, so this server could never see the snapshot Ready and pause the Workspace (the
add-on can use `stop` because it drives the pause from outside). With `resume` the Pod goes on, this server
sees Ready and sets spec.paused itself; the restored copy wakes up inside that wait and takes the resume path.

The process that asks for the snapshot is inside it. While it waits, and before each later step, it asks
"do I now run in a restored Pod?" (PodRestored, a new Pod uid/name/hostname, the gVisor checkpoint file);
when it does, the lifecycle runs the resume path: verify every kernel, fall back to the checkpoint for the
ones that fail. A server that starts and finds the state paused is a cold start: it restores the kernels
from their checkpoints without being asked.

Every Kubernetes call blocks, so each runs in a thread (asyncio.to_thread), never on the event loop.
"""
from __future__ import annotations

import asyncio
import functools
import time

from traitlets import Bool, CaselessStrEnum, Float, Int, Unicode, validate

from ..k8s import GVISOR_RUNTIME_CLASS, POLICIES, SNAPSHOTS, TRIGGERED_BY_LABEL, TRIGGERS, addon_policy_name, labels
from ..k8s import cleanup as cleanup_plan
from ..k8s.api import Kube
from ..k8s.client import KubeError
from ..k8s.identity import PodIdentity, own_namespace_and_pod, workspace_of
from ..k8s.restore import Baseline, CheckpointFileReader, baseline, evidence
from ..k8s.snapshots import (SnapshotError, is_ready, policy_body, policy_name, snapshot_created, snapshot_progress,
                             trigger_body, trigger_progress)
from ..k8s.workspace import PauseInProgress, addon_cannot_snapshot, addon_enabled, set_paused
from ..lifecycle.paths import one_line
from ..state import StateStore
from ..states import Phase, State
from .base import SnapshotFailed, in_range
from .local import LocalBackend


class AddonCannotSnapshot(SnapshotError):
    """The add-on would take the pause and never end it: the pause must release nothing."""


class GkeBackend(LocalBackend):
    """Pod snapshot + Workspace pause on GKE; kernels restarted and restored from checkpoints when the Pod
    was not restored (select with c.GkewsApp.backend_class = "jupyter_gkews.backends.gke.GkeBackend")."""

    name = "gke"
    releases_environment = True  # the Pod goes, with every kernel in it

    snapshot_mode = CaselessStrEnum(
        ("auto", "trigger", "workspace"), "auto", config=True,
        help="How the Pod snapshot is taken. trigger: this server creates a manual PodSnapshotPolicy for its "
        "Workspace and a PodSnapshotManualTrigger for its Pod, waits for the PodSnapshot to be Ready, then pauses "
        "the Workspace. workspace: the GKE Workspaces snapshot add-on snapshots the Pod when the Workspace "
        "pauses; the server only pauses it. auto: workspace when the add-on is on for this Workspace by its own "
        "rules (docs/gke.md), else trigger; it reads only this Pod and its Workspace, never the cluster-scoped "
        "WorkspaceKind.")
    kubeconfig = Unicode("", config=True, help="A kubeconfig to use instead of the Pod's service account "
                         "(default: the service account in a Pod, else $KUBECONFIG or ~/.kube/config).")
    kube_context = Unicode("", config=True, help="The kubeconfig context (default: its current context).")
    namespace = Unicode("", config=True, help="This Pod's namespace (default: $POD_NAMESPACE from the downward "
                        "API, else the service account's namespace file).")
    pod_name = Unicode("", config=True, help="This Pod's name (default: $POD_NAME, else the hostname).")
    workspace = Unicode("", config=True, help="The Workspace (default: the Pod's label "
                        "notebooks.kubeflow.org/workspace-name).")
    storage_config = Unicode("gkews-snapshots", config=True,
                             help="The PodSnapshotStorageConfig (cluster-scoped) our PodSnapshotPolicy uses.")
    retention = Unicode("7d", config=True, help="The policy's retentionConfig.lastAccessTimeout (units y, mo, d, "
                        "h, min); empty for none.")
    snapshot_timeout = Float(1200.0, config=True, help="Seconds to wait for the trigger and a Ready PodSnapshot "
                             "(large GPU memory takes minutes to upload).")
    poll_interval = Float(2.0, config=True, help="Seconds between reads of the trigger, snapshot and Pod.")
    abort_on_snapshot_failure = Bool(
        False, config=True,
        help="When the Pod snapshot fails: False (default) completes the pause on the application checkpoints "
        "(the resume restores from them); True fails the pause and releases nothing.")
    keep_snapshots = Int(0, config=True, help="Ready PodSnapshots of this Workspace, beyond the one a pending "
                         "resume needs, that cleanup keeps (newest). GKE restores the newest Ready snapshot at the "
                         "Workspace's next Pod start, rolling its kernels back to it: more than 0 is for inspecting "
                         "snapshots only.")

    @validate("snapshot_timeout", "poll_interval")
    def _more_than_zero(self, proposal):
        return in_range(proposal, 0, strict=True)

    @validate("keep_snapshots")  # 0: none beyond the one a pending resume needs, which is always kept
    def _zero_or_more(self, proposal):
        return in_range(proposal, 0)
    gvisor_checkpoint_file = Unicode(
        "", config=True, help="Read this gVisor checkpoint file (/proc/gvisor/checkpoint) as restore evidence; "
        "only for Pods whose workload writes `1` to it (triggerConfig.type: workload), since the read blocks "
        "until a checkpoint completes. Empty (default): not read.")

    _kube: Kube | None = None
    _identity: PodIdentity | None = None
    _baseline: Baseline | None = None
    _made: dict | None = None  # this pause's trigger and snapshot, until the Workspace is paused
    _checkpoint_file: CheckpointFileReader | None = None

    # -- plumbing -----------------------------------------------------------------------------------
    async def _io(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    def _connect(self) -> tuple[Kube, PodIdentity]:
        """Blocking: the client and who we are (namespace, Pod, Workspace); cached once known."""
        if self._kube is None or self._identity is None:
            namespace, pod = own_namespace_and_pod(self.namespace, self.pod_name)
            kube = Kube(namespace, self.kubeconfig, self.kube_context)
            workspace = self.workspace or workspace_of(kube.get_pod(pod))
            self._kube, self._identity = kube, PodIdentity(namespace, pod, workspace)
        return self._kube, self._identity

    async def connect(self) -> tuple[Kube, PodIdentity]:
        return await self._io(self._connect)

    def _say(self, message: str) -> None:
        """Progress of a long wait, shown in the status message while the pause is snapshotting."""
        self.log.info("gkews: %s", one_line(message))
        lifecycle = getattr(self.parent, "lifecycle", None)
        if lifecycle is not None and lifecycle.state.get("phase") == Phase.SNAPSHOTTING:
            lifecycle.note(message)

    async def mode(self, pod: dict | None = None) -> str:
        if self.snapshot_mode != "auto":
            return self.snapshot_mode
        kube, me = await self.connect()
        ws = await self._io(kube.workspace, me.workspace)
        pod = pod or await self._io(kube.get_pod, me.pod)
        return "workspace" if addon_enabled(ws, pod) else "trigger"

    # -- pause ----------------------------------------------------------------------------------------
    async def snapshot(self, notebooks: list[dict]) -> dict | None:
        self._made = None
        try:
            return await self._snapshot()
        except (KubeError, SnapshotError, ValueError) as exc:
            # Withdrawn whether the kernels run on (abort) or the Workspace pauses next: GKE may still act on
            # the trigger, and must not freeze or snapshot a Pod that is going, nor leave a snapshot that a
            # later Pod start would restore.
            if self._made:
                raise SnapshotFailed(f"{exc}; {await self._withdraw()}") from None
            raise SnapshotFailed(str(exc), abort=isinstance(exc, AddonCannotSnapshot)) from None

    async def _refuse_a_stopping_policy(self, kube: Kube, name: str, pod: dict) -> None:
        """The add-on's policy outlives its time on this Workspace (it is not deleted when the add-on is turned
        off): selecting this Pod with postCheckpoint: stop beside ours, it could have GKE stop the Pod right after
        our snapshot, mid-pause, and the Workspace would never be paused (its GPU kept)."""
        found = await self._io(kube.find, POLICIES, name)
        spec = (found or {}).get("spec") or {}
        wanted = (spec.get("selector") or {}).get("matchLabels") or {}
        if found is None or (spec.get("triggerConfig") or {}).get("postCheckpoint", "resume") != "stop" or \
                any(labels(pod).get(k) != v for k, v in wanted.items()):
            return
        raise SnapshotError(
            f"the PodSnapshotPolicy {name}, which the GKE Workspaces snapshot add-on made when it was on for this "
            "Workspace, still selects this Pod with postCheckpoint: stop, so GKE could stop the Pod right after our "
            f"snapshot; delete it (kubectl delete podsnapshotpolicy {name}) and pause again, or turn the add-on on "
            "again for this Workspace (snapshot_mode auto then lets it snapshot)")

    async def _snapshot(self) -> dict:
        kube, me = await self.connect()
        pod = await self._io(kube.get_pod, me.pod)
        self._baseline = baseline(pod)  # what "not restored" looks like, from before the request
        mode = await self.mode(pod)
        if mode == "workspace":
            cannot = addon_cannot_snapshot(pod, me.pod)
            if cannot:
                raise AddonCannotSnapshot(cannot + ", then pause again")
            return {"mode": "workspace", "status": "on-pause", "workspace": me.workspace,
                    "message": "the GKE Workspaces snapshot add-on snapshots the Pod when the Workspace pauses"}
        if self.snapshot_mode == "trigger" and addon_enabled(await self._io(kube.workspace, me.workspace), pod):
            raise SnapshotError(
                "c.GkeBackend.snapshot_mode is 'trigger', but the GKE Workspaces snapshot add-on is on for this "
                "Workspace: its own policy (postCheckpoint: stop) selects this Pod too, so GKE could stop the Pod "
                "after our snapshot, and the add-on holds the pause to take a snapshot of its own. Set "
                "c.GkeBackend.snapshot_mode = 'auto' (the add-on snapshots when the Workspace pauses), or turn the "
                "add-on off for this Workspace")
        await self._refuse_a_stopping_policy(kube, addon_policy_name(me.workspace), pod)
        runtime = (pod.get("spec") or {}).get("runtimeClassName")
        if runtime != GVISOR_RUNTIME_CLASS:
            raise SnapshotError(
                f"the Pod {me.pod} does not run in GKE Sandbox (spec.runtimeClassName is {runtime or 'not set'}, "
                f"not {GVISOR_RUNTIME_CLASS}) and GKE snapshots only gVisor Pods. A WorkspaceKind cannot set it: "
                "enable the GKE Workspaces snapshot add-on for this Workspace (its Pod webhook sets it; snapshot_mode "
                "auto then lets the add-on snapshot) or have your cluster's admission set it on Workspace Pods, then "
                "restart the Workspace")
        started = time.monotonic()
        policy = policy_name(me.workspace)
        found = await self._io(kube.find, POLICIES, policy)
        if found is None:
            body = policy_body(policy, me.workspace, self.storage_config, self.retention)
            await self._io(kube.create, POLICIES, body)
        elif ((found.get("spec") or {}).get("triggerConfig") or {}).get("postCheckpoint", "resume") != "resume":
            raise SnapshotError(
                f"the PodSnapshotPolicy {policy} says postCheckpoint: stop, so GKE would stop this Pod right after its "
                "checkpoint and this server could never pause the Workspace; delete it (`jupyter gkews cleanup` "
                "removes it once its snapshots are gone, or kubectl delete podsnapshotpolicy) and pause again: "
                "the next pause creates it with postCheckpoint: resume")
        drift = _policy_drift(found, policy_body(policy, me.workspace, self.storage_config, self.retention))
        if drift:  # we may not patch it (RBAC: get, create, delete); this snapshot follows it, and says so
            drift = (f"the PodSnapshotPolicy {policy} was made with other settings ({drift}); this snapshot follows "
                     "it. Delete it (`jupyter gkews cleanup` removes it once its snapshots are gone) for the next "
                     "pause to make it with c.GkeBackend's")
            self.log.warning("gkews: %s", drift)
        body = trigger_body(me.workspace, me.pod)
        name = body["metadata"]["name"]
        await self._io(kube.create, TRIGGERS, body)
        self._made = {"trigger": name, "snapshot": "", "warning": drift or None}
        self._say(f"snapshot requested: PodSnapshotManualTrigger {name} for Pod {me.pod}")
        self._detail = "waiting for GKE to pick up the trigger"
        deadline = started + self.snapshot_timeout
        while True:
            try:
                found = await self._progress(kube, name, policy, started)
            except KubeError as exc:  # GKE goes on whether or not we could read: so do we, until the deadline
                if not (exc.transient or exc.status == 401):  # 401: a restored Pod's token is renewed soon
                    raise
                self._say(f"the API server did not answer ({exc}); asking again")
            else:
                if found is not None:
                    return found
            if time.monotonic() > deadline:
                raise SnapshotError(f"no Ready PodSnapshot {self.snapshot_timeout:.0f} s after the trigger {name} "
                                    f"(last seen: {self._detail}); raise c.GkeBackend.snapshot_timeout for large "
                                    "GPU memory")
            await asyncio.sleep(self.poll_interval)

    async def _progress(self, kube: Kube, name: str, policy: str, started: float) -> dict | None:
        """One look at the trigger, its snapshot and this Pod: the pause's snapshot, or None to wait on."""
        trigger = await self._io(kube.get, TRIGGERS, name)
        snap_name = snapshot_created(trigger)
        if await self._detect():  # we are the restored copy: the lifecycle takes the resume path
            if not snap_name:  # the trigger we read may predate the restore; it names the snapshot now
                snap_name = snapshot_created(await self._io(kube.get, TRIGGERS, name))
            return {"mode": "trigger", "status": "restored", "name": snap_name or None, "trigger": name,
                    "policy": policy}
        self._detail = trigger_progress(trigger)[1]
        if not snap_name:
            return None
        self._made["snapshot"] = snap_name
        snap = await self._io(kube.find, SNAPSHOTS, snap_name)
        if snap is None:
            if self._made.get("found") == snap_name:  # there at a look before: deleted, and never to be Ready
                raise SnapshotError(f"the PodSnapshot {snap_name} was deleted while the pause waited for it to be "
                                    "Ready (kubectl delete, or a cleanup); pause again to take another")
            return None  # not in the API server's cache yet
        self._made["found"] = snap_name
        ready, self._detail = snapshot_progress(snap)
        if ready != "ready":
            self._say(f"PodSnapshot {snap_name}: {self._detail} ({time.monotonic() - started:.0f} s)")
            return None
        seconds = round(time.monotonic() - started, 1)
        self._say(f"PodSnapshot {snap_name} is Ready after {seconds} s")
        path = ((snap.get("status") or {}).get("storageStatus") or {}).get("gcs", {})
        return {"mode": "trigger", "status": "ready", "name": snap_name, "trigger": name,
                "policy": policy, "seconds": seconds, "gcs_path": path.get("observedGCSPath"),
                **({"warning": self._made["warning"]} if self._made.get("warning") else {})}

    async def release(self, notebooks: list[dict]) -> None:
        """Pause the Workspace: its controller stops the Pod and the GPU node is released."""
        kube, me = await self.connect()
        try:
            changed = await self._io(set_paused, kube, me.workspace, True)
        except PauseInProgress as exc:  # the add-on already holds a pause: asking again would restart its snapshot
            self.log.info("gkews: %s", exc)
            return
        except KubeError as exc:
            if self._made:  # the pause fails and the kernels run on
                raise KubeError(f"{exc}; {await self._withdraw()}", exc.status) from None
            raise
        self._made = None  # the snapshot is the paused Workspace's now: the resume needs it
        self.log.info("gkews: Workspace %s/%s %s", me.namespace, me.workspace,
                      "paused" if changed else "was already paused")

    # -- am I the restored copy? ----------------------------------------------------------------------
    async def _detect(self) -> str | None:
        if self._baseline is None:
            return None
        try:
            kube, me = await self.connect()
            pod_name = (await self._io(own_namespace_and_pod, self.namespace, self.pod_name))[1]  # reads files
            pod = await self._io(kube.get_pod, pod_name)
        except (KubeError, ValueError) as exc:
            if getattr(exc, "status", None) != 404:  # 404: the Pod is being replaced; ask again later
                self.log.warning("gkews: cannot read this Pod to tell whether it was restored: %s", exc)
            pod_name, pod = self._baseline.pod, None
        if self._checkpoint_file is None or self._checkpoint_file.path != self.gvisor_checkpoint_file:
            self._checkpoint_file = CheckpointFileReader(self.gvisor_checkpoint_file)
        return evidence(self._baseline, pod_name, pod, self._checkpoint_file.answer())

    async def restored(self) -> dict | None:
        why = await self._detect()
        if not why:
            return None
        self._baseline = self._made = None  # one restore, one resume
        self._checkpoint_file = None  # its answer is this restore's: the next checkpoint answers anew
        self._retire_used_snapshots()
        return {"reason": why, "pod": self._identity.pod if self._identity else None}

    async def pause_failed(self) -> str:
        """A failure of the lifecycle between snapshot() and release() (its state could not be written)."""
        return await self._withdraw() if self._made else ""

    async def _retire_snapshots(self, trigger: str = "") -> None:
        """Delete our PodSnapshots of this Workspace and their spent triggers (and `trigger`, spent or not);
        their policy goes on the next cleanup, once GKE has finalized them."""
        kube, me = await self.connect()
        items = await self._io(cleanup_plan.plan, kube, me.workspace, 0, set())
        if trigger and trigger not in {item["name"] for item in items}:
            items.append({"kind": "PodSnapshotManualTrigger", "name": trigger, "bytes": 0, "why": "its pause failed"})
        await self._io(cleanup_plan.run, kube, items)

    async def _withdraw(self) -> str:
        """A pause that fails after its trigger leaves the kernels running: its snapshot, left Ready, would bring
        them back to this moment at the next Pod start (a Kubeflow Stop, an eviction). Delete it and the
        trigger (GKE could still act on one it has not picked up); say what was done, or what to do."""
        made, self._made = self._made, None
        kube, me = await self.connect()
        snap, trigger = made["snapshot"], made["trigger"]
        try:
            await self._retire_snapshots(trigger)
        except Exception as exc:
            if snap:
                command = f"kubectl delete podsnapshot {snap} -n {me.namespace}"
                self._mark_snapshot(snap, "ready", f"left by a failed pause: run `{command}` before this Pod restarts")
                what = f"the PodSnapshot {snap} this pause took"
            else:
                command = (f"kubectl delete podsnapshotmanualtrigger {trigger} -n {me.namespace}; kubectl delete "
                           f"podsnapshots -n {me.namespace} -l {TRIGGERED_BY_LABEL}={trigger}")
                what = f"this pause's trigger {trigger} (and any PodSnapshot of it)"
            return (f"{what} could not be deleted ({exc}): delete it before this Pod restarts (`{command}`), or "
                    "the restart brings the kernels back as they were at this pause")
        if snap:
            self._mark_snapshot(snap, "deleted", "the pause failed after it: deleted so that no Pod start brings "
                                                 "the kernels back to it")
            return f"the PodSnapshot {snap} this pause took was deleted: no Pod start can roll the kernels back to it"
        return f"this pause's trigger {trigger} was withdrawn, so GKE takes no late snapshot of this Pod"

    def _mark_snapshot(self, name: str, status: str, why: str) -> None:
        """Show in the server's status what became of the snapshot it recorded."""
        lifecycle = getattr(self.parent, "lifecycle", None)
        snap = lifecycle.state.get("snapshot") if lifecycle is not None else None
        if name and snap and snap.get("name") == name:
            snap.update(status=status, why=why)

    def _retire_used_snapshots(self) -> None:
        """Each snapshot is used once. GKE restores the newest Ready snapshot that matches a starting Pod:
        once this Pod came back (restored, or cold), one left Ready would bring that older state back at the
        next Pod start (a Kubeflow Stop, an eviction, a pause without a snapshot), under newer files and
        state. So ours are deleted now."""
        async def retire():
            try:
                await self._retire_snapshots()
            except Exception as exc:  # nothing is lost: `jupyter gkews cleanup` retires them later
                self.log.warning("gkews: could not delete the PodSnapshots this Pod came back from: %s; run "
                                 "`jupyter gkews cleanup`", exc)
        task = asyncio.get_running_loop().create_task(retire())
        self._retiring = getattr(self, "_retiring", set())  # the loop keeps only weak references to tasks
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def wait_restored(self) -> dict | None:
        while self._baseline is not None:
            found = await self.restored()
            if found:
                return found
            await asyncio.sleep(self.poll_interval)
        return None

    # -- start-up and cleanup ---------------------------------------------------------------------------
    async def recover_paused(self, lifecycle, found: str = State.PAUSED) -> None:
        """A server that starts while the state says paused is a new process: the Pod started cold (a restored
        Pod would have kept the old server). Bring the kernels back from their checkpoints, unasked. So too
        after a pause this server stopped in (killed, or the Pod stopped before `paused` was written): the
        kernels stopped with the old server, whether or not the Workspace was paused."""
        from ..errors import LifecycleError
        if found == State.RESUMING:  # the resume it stopped in restores from the checkpoints again: the user's click
            return
        snap = lifecycle.state.get("snapshot") or {}
        if found == State.PAUSING:
            why = "the server restarted during the pause, and its kernels stopped with it"
        elif snap.get("status") == "failed":
            why = f"cold start after a pause whose Pod snapshot failed ({snap['error']})"
        elif snap.get("name"):  # before the retirement below deletes it
            unused = await self._why_not_restored(snap["name"])
            snap.update(status="not-used", why=unused)
            why = f"cold start: this Pod was not restored from a snapshot ({unused})"
        else:
            why = "cold start: this Pod was not restored from a snapshot"
        lifecycle.note(f"{why}; restoring the kernels from their checkpoints")
        self._retire_used_snapshots()
        try:
            await lifecycle.request_resume(why=why)
        except LifecycleError as exc:
            lifecycle.note(f"{why}; the automatic resume was refused: {exc}")

    async def _why_not_restored(self, name: str) -> str:
        """Why the Pod started without the snapshot of the pause: gone, not Ready, or GKE did not use it."""
        try:
            kube, _ = await self.connect()
            found = await self._io(kube.find, SNAPSHOTS, name)
        except (KubeError, ValueError) as exc:
            return f"whether the PodSnapshot {name} of the pause still exists could not be read: {exc}"
        if found is None:
            return (f"the PodSnapshot {name} of the pause no longer exists: it was deleted, or expired, while the "
                    "Workspace was paused")
        if not is_ready(found):
            return f"the PodSnapshot {name} of the pause is not Ready"
        return (f"GKE started it without the Ready PodSnapshot {name}: it does so when the snapshot no longer "
                "matches the Pod, e.g. a changed image or Pod template, or cannot be restored")

    def _lifecycle_state(self) -> dict | None:
        """The server's state: live when the server runs this cleanup, else as it last wrote it (the
        `jupyter gkews cleanup` command runs without a server)."""
        lifecycle = getattr(self.parent, "lifecycle", None)
        if lifecycle is not None:
            return lifecycle.state
        state_dir = getattr(self.parent, "state_dir", None)
        return StateStore(state_dir).load() if state_dir else None

    async def cleanup(self, *, dry_run: bool = False) -> list[dict]:
        kube, me = await self.connect()
        needed = set()
        state = await self._io(self._lifecycle_state)
        if state and state.get("state") in (State.PAUSED, State.RESUMING, State.PAUSING):
            name = (state.get("snapshot") or {}).get("name")
            if name:
                needed.add(name)  # a pending resume restores from it
        pausing = bool(state and state.get("state") == State.PAUSING)
        items = await self._io(functools.partial(cleanup_plan.plan, pausing=pausing), kube, me.workspace,
                               self.keep_snapshots, needed)
        if not dry_run:
            await self._io(cleanup_plan.run, kube, items)
        return items


def _policy_drift(found: dict | None, wanted: dict) -> str:
    """How an existing policy differs from the one the settings would make (storage, retention, selector)."""
    if found is None:
        return ""
    have, want = found.get("spec") or {}, wanted["spec"]
    return "; ".join(f"{key} {have.get(key)!r}, not {want.get(key)!r}"
                     for key in ("storageConfigName", "retentionConfig", "selector") if have.get(key) != want.get(key))
