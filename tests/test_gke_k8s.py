"""The GKE backend's Kubernetes side without a Jupyter server: cleanup of old PodSnapshots and spent triggers,
the shapes GKE reports, and who the backend thinks it is (against kmock's emulator)."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
import yaml
from gke_controller import DEPLOY, POLICIES, SNAPSHOTS, TRIGGERS, FakeGke
from traitlets.config import Configurable

from jupyter_gkews.backends.base import SnapshotFailed
from jupyter_gkews.backends.gke import GkeBackend
from jupyter_gkews.k8s.api import Kube
from jupyter_gkews.k8s.identity import own_namespace_and_pod
from jupyter_gkews.k8s.snapshots import (SnapshotError, policy_body, policy_name, snapshot_created, snapshot_progress,
                                         trigger_body, trigger_progress)

WS = "gpu-notebook"
RBAC = DEPLOY / "rbac.yaml"


@pytest.fixture
def fake():
    cluster = FakeGke().start()
    yield cluster
    cluster.stop()


def backend(fake, tmp_path, lifecycle_state=None, **traits) -> GkeBackend:
    parent = Configurable()
    if lifecycle_state is not None:
        parent.lifecycle = SimpleNamespace(state=lifecycle_state)
    return GkeBackend(parent=parent, kubeconfig=fake.pod_kubeconfig(tmp_path / "kubeconfig"), namespace="team-a",
                      pod_name=fake.pod, **traits)


def fire_trigger(fake, kube: Kube) -> dict:
    """A trigger for the Workspace's Pod, as the server creates one; returned once GKE has answered it."""
    trigger = trigger_body(WS, fake.pod)
    kube.create("podsnapshotmanualtriggers", trigger)
    for _ in range(200):
        found = fake.get(TRIGGERS, trigger["metadata"]["name"])
        if found.get("status"):
            return found
        time.sleep(0.05)
    raise AssertionError(f"GKE (the fixture) never answered the trigger {trigger['metadata']['name']}")


def take_snapshots(fake, kube: Kube, n: int) -> list[str]:
    """n snapshots through triggers, as the server takes them; their names, oldest first."""
    kube.create("podsnapshotpolicies", policy_body(policy_name(WS), WS, "gkews-snapshots", "7d"))
    names = []
    for _ in range(n):
        names.append(snapshot_created(fire_trigger(fake, kube)))
        time.sleep(1.1)  # creationTimestamp has one-second resolution: keep the order visible
    return names


def test_cleanup_keeps_the_newest_and_the_one_a_pending_resume_needs(fake, tmp_path):
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    oldest, middle, newest = take_snapshots(fake, kube, 3)
    b = backend(fake, tmp_path, {"state": "paused", "snapshot": {"name": oldest}}, keep_snapshots=1)

    planned = asyncio.run(b.cleanup(dry_run=True))
    assert [(i["kind"], i["name"]) for i in planned] == [
        ("PodSnapshot", middle),
        ("PodSnapshotManualTrigger",
         fake.get(SNAPSHOTS, middle)["metadata"]["labels"]["gke-pod-snapshot-triggered-by"])]
    assert {s["metadata"]["name"] for s in fake.all(SNAPSHOTS)} == {oldest, middle, newest}  # dry run: nothing gone

    done = asyncio.run(b.cleanup())
    assert done == planned
    for _ in range(100):  # the finalizer goes once GKE removed the storage
        if len(fake.all(SNAPSHOTS)) == 2:
            break
        time.sleep(0.05)
    assert {s["metadata"]["name"] for s in fake.all(SNAPSHOTS)} == {oldest, newest}
    assert len(fake.all(TRIGGERS)) == 2 and fake.get(POLICIES, policy_name(WS)) is not None


def test_cleanup_retires_the_policy_only_after_its_snapshots_are_finalized(fake, tmp_path):
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    names = take_snapshots(fake, kube, 2)
    b = backend(fake, tmp_path, {"state": "active", "snapshot": {"name": names[0]}}, keep_snapshots=0)
    done = asyncio.run(b.cleanup())
    assert [i["kind"] for i in done] == ["PodSnapshot"] * 2 + ["PodSnapshotManualTrigger"] * 2
    assert fake.get(POLICIES, policy_name(WS)) is not None  # GKE is still finalizing the snapshots through it
    for _ in range(100):
        if not fake.all(SNAPSHOTS):
            break
        time.sleep(0.05)
    assert fake.all(SNAPSHOTS) == [] and fake.all(TRIGGERS) == []
    assert [i["kind"] for i in asyncio.run(b.cleanup())] == ["PodSnapshotPolicy"]  # the next run retires it
    deletes = [(c[1], c[2]) for c in fake.calls() if c[0] == "delete"]
    assert deletes[-1] == ("podsnapshotpolicies", policy_name(WS))
    assert {n for p, n in deletes if p == "podsnapshots"} == set(names)
    assert fake.get(POLICIES, policy_name(WS)) is None and fake.leaked_storage == []


def test_cleanup_keeps_the_policy_a_hand_made_snapshot_still_needs(fake, tmp_path):
    """Deleting a PodSnapshot deletes its storage through its policy. A snapshot a person took of this Pod with a
    trigger of their own goes through our policy too: the cleanup retired the policy once our own snapshots were
    gone, and that snapshot's files stayed in GCS when it was deleted."""
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    [ours] = take_snapshots(fake, kube, 1)
    theirs_trigger = {**trigger_body(WS, fake.pod), "metadata": {"name": "by-hand"}}
    kube.create("podsnapshotmanualtriggers", theirs_trigger)
    for _ in range(200):
        if snapshot_created(fake.get(TRIGGERS, "by-hand") or {}):
            break
        time.sleep(0.05)
    theirs = snapshot_created(fake.get(TRIGGERS, "by-hand"))
    assert fake.get(SNAPSHOTS, theirs)["spec"]["policyName"] == policy_name(WS)
    b = backend(fake, tmp_path, {"state": "active"}, keep_snapshots=0)
    assert [(i["kind"], i["name"]) for i in asyncio.run(b.cleanup())][0] == ("PodSnapshot", ours)
    for _ in range(100):
        if fake.get(SNAPSHOTS, ours) is None:
            break
        time.sleep(0.05)
    assert asyncio.run(b.cleanup()) == []  # not the policy: their snapshot is deleted through it
    kube.delete("podsnapshots", theirs)  # the person deletes theirs
    for _ in range(100):
        if fake.get(SNAPSHOTS, theirs) is None:
            break
        time.sleep(0.05)
    assert fake.leaked_storage == []
    assert [i["kind"] for i in asyncio.run(b.cleanup())] == ["PodSnapshotPolicy"]


def test_a_trigger_gke_is_still_working_on_is_not_spent(fake, tmp_path):
    """Triggered False with a reason other than Failed or Error is progress (the pause waits on it), and a
    trigger whose snapshot is not listed yet is what a pause is reading: the cleanup during a pause took either
    as spent and deleted it."""
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    fake.hold.set()  # GKE picks up no trigger: the test sets what it says
    says = {("False", "Pending"): {}, ("True", "Complete"): {"snapshotCreated": {"name": "not-listed-yet"}}}
    for (status, reason), more in says.items():
        body = trigger_body(WS, fake.pod)
        kube.create("podsnapshotmanualtriggers", body)
        fake.emu.objects[TRIGGERS, "team-a", body["metadata"]["name"]].patch({"status": {"conditions": [
            {"type": "Triggered", "status": status, "reason": reason, "message": "",
             "lastTransitionTime": "2026-12-06T09:00:00Z"}], **more}})
    b = backend(fake, tmp_path, {"state": "pausing"}, keep_snapshots=0)
    assert asyncio.run(b.cleanup(dry_run=True)) == []


def test_like_gke_the_fixture_lets_no_client_write_a_pod_snapshot(fake, tmp_path):
    """GKE's admission policy: only its controller creates or modifies PodSnapshots; a client may read and
    delete them. A change that labels or annotates one (an ownerReference, say) fails here as on GKE."""
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    name = take_snapshots(fake, kube, 1)[0]
    with pytest.raises(Exception, match="only GKE's Pod snapshot controller creates or modifies PodSnapshots"):
        kube.patch("podsnapshots", name, {"metadata": {"labels": {"mine": "yes"}}})
    assert "mine" not in (fake.get(SNAPSHOTS, name)["metadata"].get("labels") or {})
    kube.delete("podsnapshots", name)  # reading and deleting stay allowed


def test_the_deployed_kind_sends_the_addons_snapshots_to_the_deployed_storage_config():
    """The add-on's policy stored snapshots in its default StorageConfig (kubeflow-pod-snapshot-storage-config),
    not in deploy/podsnapshot-storage.yaml's bucket that the docs set up: the kind names that one."""
    kind = next(d for d in yaml.safe_load_all((DEPLOY / "workspacekind.yaml").read_text())
                if d and d["kind"] == "WorkspaceKind")
    storage = yaml.safe_load((DEPLOY / "podsnapshot-storage.yaml").read_text())
    cluster = FakeGke(kind_annotations=kind["metadata"]["annotations"]).start()
    try:
        policy = None
        for _ in range(200):  # the add-on reconciles within a few of the fixture's steps
            policy = cluster.get(POLICIES, f"ws-{cluster.workspace}-policy")
            if policy:
                break
            time.sleep(0.05)
        assert policy["spec"]["storageConfigName"] == storage["metadata"]["name"] == "gkews-snapshots"
    finally:
        cluster.stop()


def test_cleanup_forbidden_names_the_verb(fake, tmp_path):
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    take_snapshots(fake, kube, 1)
    fake.deny("delete", "podsnapshots")
    with pytest.raises(Exception, match='may not delete podsnapshots .apiGroup "podsnapshot.gke.io". in namespace '
                                        'team-a: add the verb "delete" on "podsnapshots"'):
        asyncio.run(backend(fake, tmp_path, keep_snapshots=0).cleanup())
    assert len(fake.all(SNAPSHOTS)) == 1


def test_gke_shapes():
    assert snapshot_created({"status": {"snapshotCreated": "3f2a"}}) == "3f2a"  # as documented
    assert snapshot_created({"status": {"snapshotCreated": {"name": "3f2a"}}}) == "3f2a"  # as seen
    assert snapshot_created({}) == ""
    failed = {"metadata": {"name": "t1"}, "status": {"conditions": [
        {"type": "Triggered", "status": "False", "reason": "Error", "message": "agent not ready"}]}}
    with pytest.raises(SnapshotError, match="PodSnapshotManualTrigger t1 failed: Error: agent not ready"):
        trigger_progress(failed)
    assert trigger_progress({"metadata": {"name": "t"}})[0] == "pending"
    uploading = {"metadata": {"name": "s"}, "status": {"conditions": [
        {"type": "Checkpoint", "status": "True"},
        {"type": "Ready", "status": "False", "reason": "AwaitingCheckpoint"}]}}
    assert snapshot_progress(uploading) == ("pending", "AwaitingCheckpoint")
    for kind in ("Checkpoint", "StorageReplicated", "Ready"):  # each one can end the snapshot
        for reason in ("Failed", "Error"):
            failed = {"metadata": {"name": "s"}, "status": {"conditions": [
                {"type": kind, "status": "False", "reason": reason, "message": "boom"}]}}
            with pytest.raises(SnapshotError, match=f"PodSnapshot s failed .{kind}=False.: {reason}: boom"):
                snapshot_progress(failed)
    # a reason no CRD defines is waited out (it may be progress), but named: a timeout says which step stood still
    stuck = {"metadata": {"name": "s"}, "status": {"conditions": [
        {"type": "Checkpoint", "status": "False", "reason": "CheckpointFailed", "message": "agent gone"},
        {"type": "Ready", "status": "False", "reason": "AwaitingCheckpoint"}]}}
    assert snapshot_progress(stuck) == ("pending",
                                        "Checkpoint=False (CheckpointFailed: agent gone); AwaitingCheckpoint")


ON = "podsnapshot.gke.kubeflow.org/enabled"


@pytest.mark.parametrize("case,cluster,mode", [
    ("kind annotated true", dict(addon=True), "workspace"),
    ("kind annotated True (the add-on compares case-insensitively)", dict(kind_annotations={ON: "True"}), "workspace"),
    ("Workspace FALSE overrides the kind's true", dict(addon=True, workspace_annotations={ON: "FALSE"}), "trigger"),
    ("Workspace opts in with pod-migration.gke.io/enabled",
     dict(workspace_annotations={"pod-migration.gke.io/enabled": "true"}), "workspace"),
    ("kind pod-migration.gke.io/enabled TRUE", dict(kind_annotations={"pod-migration.gke.io/enabled": "TRUE"}),
     "workspace"),
    ("a TPU podConfig is never snapshotted by the add-on", dict(addon=True, tpu=True), "trigger"),
    ("no annotation anywhere", dict(), "trigger"),
])
def test_auto_mode_follows_the_addons_own_rules(tmp_path, case, cluster, mode):
    """auto picks `workspace` exactly when the add-on (played by the fixture from its own rules) snapshots the
    Workspace on pause, reading only the Workspace and this Pod: the Pod's service account is granted
    deploy/rbac.yaml through the WorkspaceKind's clusterRoles, a RoleBinding, which cannot cover the
    cluster-scoped WorkspaceKind."""
    fake = FakeGke(rbac=list(yaml.safe_load_all(RBAC.read_text())), **cluster).start()
    try:
        assert asyncio.run(backend(fake, tmp_path).mode()) == mode, case
        assert ("get", "workspacekinds", "jupyterlab-gpu") not in fake.calls()
    finally:
        fake.stop()


def test_trigger_mode_refuses_a_pod_outside_gvisor_by_name(tmp_path):
    """Without the add-on nothing sets runtimeClassName: gvisor (a WorkspaceKind cannot); GKE cannot snapshot it."""
    fake = FakeGke(sandbox_admission=False).start()
    try:
        with pytest.raises(SnapshotFailed, match=f"the Pod {fake.pod} does not run in GKE Sandbox "
                                                 ".spec.runtimeClassName is not set, not gvisor."):
            asyncio.run(backend(fake, tmp_path, snapshot_mode="trigger").snapshot([]))
        assert fake.all(TRIGGERS) == []  # nothing asked of GKE
    finally:
        fake.stop()


def test_the_addon_turned_on_for_a_running_pod_outside_gvisor_releases_nothing(tmp_path):
    """The add-on decides by the Workspace's annotation now, but sets gVisor only on Pods it creates: annotated
    while its Pod ran, the Workspace went to workspace mode, and the add-on would hold its pause (and GPU) for a
    snapshot GKE cannot take. The pause is refused, to release nothing (abort), naming the fix."""
    from gke_controller import WORKSPACES
    from jupyter_gkews.k8s import ADDON_ENABLED_ANNOTATION
    fake = FakeGke(sandbox_admission=False).start()
    try:
        annotated = {"metadata": {"annotations": {ADDON_ENABLED_ANNOTATION: "true"}}}
        fake.emu.objects[WORKSPACES, "team-a", WS].patch(annotated)
        said = f"snapshot add-on is on for this Workspace, but the Pod {fake.pod} was created before it was"
        with pytest.raises(SnapshotFailed, match=said) as refused:
            asyncio.run(backend(fake, tmp_path).snapshot([]))
        assert refused.value.abort and "set it back to \"true\" and start it" in str(refused.value)
    finally:
        fake.stop()


def test_a_policy_left_with_postcheckpoint_stop_is_named(fake, tmp_path):
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    old = policy_body(policy_name(WS), WS, "gkews-snapshots", "7d")
    old["spec"]["triggerConfig"]["postCheckpoint"] = "stop"  # what an earlier version created
    kube.create("podsnapshotpolicies", old)
    with pytest.raises(SnapshotFailed, match="PodSnapshotPolicy gkews-gpu-notebook says postCheckpoint: stop"):
        asyncio.run(backend(fake, tmp_path).snapshot([]))
    assert fake.all(TRIGGERS) == []


def test_a_policy_the_addon_left_behind_is_named_before_any_trigger(fake, tmp_path):
    """The add-on's ws-<workspace>-policy (postCheckpoint: stop) stays once the add-on is off for the Workspace:
    beside ours it selects the Pod, and GKE could stop the Pod right after our snapshot."""
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    left = policy_body(f"ws-{WS}-policy", WS, "kubeflow-pod-snapshot-storage-config", "7d")
    left["spec"]["triggerConfig"]["postCheckpoint"] = "stop"
    kube.create("podsnapshotpolicies", left)
    said = f"the PodSnapshotPolicy ws-{WS}-policy, which the GKE Workspaces snapshot add-on made .* still selects " \
        "this Pod with postCheckpoint: stop"
    with pytest.raises(SnapshotFailed, match=said):
        asyncio.run(backend(fake, tmp_path).snapshot([]))
    assert fake.all(TRIGGERS) == []
    left["spec"]["selector"]["matchLabels"] = {"notebooks.kubeflow.org/workspace-name": "another-one"}
    kube.delete("podsnapshotpolicies", left["metadata"]["name"])
    kube.create("podsnapshotpolicies", left)  # another Workspace's: not in the way
    assert asyncio.run(backend(fake, tmp_path).snapshot([]))["status"] == "ready"


def test_a_policy_made_with_other_settings_is_used_and_named(fake, tmp_path):
    """A policy made before c.GkeBackend.storage_config or retention changed was reused as it was: the snapshots
    went to the old bucket and nobody was told. The pause still takes its snapshot with it (the server may not
    patch policies) and the snapshot says what differs and how to have it made again."""
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    kube.create("podsnapshotpolicies", policy_body(policy_name(WS), WS, "old-bucket", "1d"))
    snapshot = asyncio.run(backend(fake, tmp_path).snapshot([]))
    assert snapshot["status"] == "ready", snapshot
    assert "storageConfigName 'old-bucket', not 'gkews-snapshots'" in snapshot["warning"], snapshot
    assert "retentionConfig {'lastAccessTimeout': '1d'}, not {'lastAccessTimeout': '7d'}" in snapshot["warning"]
    assert "Delete it (`jupyter gkews cleanup` removes it once its snapshots are gone)" in snapshot["warning"]


@pytest.mark.timeout(120)
def test_a_gvisor_checkpoint_file_that_does_not_answer_holds_up_nothing(fake, tmp_path):
    """c.GkeBackend.gvisor_checkpoint_file is read as restore evidence, and its read blocks until a checkpoint
    completes: where no workload wrote `1` (a manual trigger) it never returned, inside the snapshot wait, so the
    pause hung past snapshot_timeout. It is read in a thread of its own; its answer counts once it comes."""
    import os
    fifo = tmp_path / "checkpoint"
    os.mkfifo(fifo)  # opening it for reading blocks until someone writes: as the gVisor file does
    gke = backend(fake, tmp_path, gvisor_checkpoint_file=str(fifo))
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(gke.snapshot([]))["status"] == "ready"
        assert loop.run_until_complete(gke.restored()) is None
        with open(fifo, "w") as f:  # what gVisor answers in the restored copy
            f.write("restore\n")
        deadline = time.monotonic() + 60
        while (found := loop.run_until_complete(gke.restored())) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert found is not None and found["reason"] == "the gVisor checkpoint file answered 'restore'", found
    finally:
        loop.close()


def test_identity_from_the_downward_api_and_the_pod_label(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("POD_NAME", fake.pod)
    monkeypatch.setenv("POD_NAMESPACE", "team-a")
    assert own_namespace_and_pod() == ("team-a", fake.pod)
    b = GkeBackend(kubeconfig=fake.pod_kubeconfig(tmp_path / "kc"))
    kube, me = asyncio.run(b.connect())
    assert (me.namespace, me.pod, me.workspace) == ("team-a", fake.pod, WS)
    assert fake.pod.startswith(f"ws-{WS}-") and fake.pod != f"{WS}-0"  # ws-<workspace>-<random>-0, never guessed
    assert asyncio.run(b.mode()) == "trigger"  # no add-on annotation on the Workspace or its kind
    monkeypatch.delenv("POD_NAMESPACE")
    monkeypatch.setattr("jupyter_gkews.k8s.identity.SA_NAMESPACE_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="set POD_NAMESPACE through the downward API"):
        own_namespace_and_pod()


def test_cleanup_command_keeps_the_snapshot_the_paused_server_needs(fake, tmp_path):
    """`jupyter gkews cleanup` runs without a server: it reads the server's last state to know which
    snapshot a pending resume needs, and removes the others beyond keep_snapshots."""
    import json

    from clikit import jupyter_gkews

    from jupyter_gkews.state import StateStore, initial_state
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    oldest, middle, newest = take_snapshots(fake, kube, 3)
    state_dir = tmp_path / "state"
    StateStore(str(state_dir)).save({**initial_state("gke"), "state": "paused", "snapshot": {"name": oldest}})
    (tmp_path / "ckpt").mkdir()
    r = jupyter_gkews("cleanup", f"--checkpoint-root={tmp_path / 'ckpt'}", "--json",
                      "--GkewsApp.backend_class=jupyter_gkews.backends.gke.GkeBackend",
                      f"--GkewsApp.state_dir={state_dir}", f"--GkeBackend.kubeconfig={tmp_path / 'kc'}",
                      "--GkeBackend.namespace=team-a", f"--GkeBackend.pod_name={fake.pod}",
                      "--GkeBackend.keep_snapshots=1", home=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    snapshots = [(o["kind"], o["name"]) for o in report["backend"] if o["kind"] == "PodSnapshot"]
    assert snapshots == [("PodSnapshot", middle)]
    for _ in range(100):
        if len(fake.all(SNAPSHOTS)) == 2:
            break
        time.sleep(0.05)
    assert {s["metadata"]["name"] for s in fake.all(SNAPSHOTS)} == {oldest, newest}


def test_the_pod_is_the_one_the_workspace_names_never_a_guessed_name():
    """Two labelled Pods (a leftover one still terminating, the current one): status.podTemplatePod.name decides."""
    from jupyter_gkews.k8s.workspace import current_pod

    def pod(name, deleting=False):
        meta = {"name": name, "labels": {"notebooks.kubeflow.org/workspace-name": WS}}
        return {"metadata": {**meta, "deletionTimestamp": "2026-11-30T10:00:00Z"} if deleting else meta}
    old, new = pod(f"ws-{WS}-b4k2z-0", deleting=True), pod(f"ws-{WS}-x7k2p-0")
    ws = {"status": {"podTemplatePod": {"name": f"ws-{WS}-x7k2p-0"}}}
    assert current_pod(ws, [old, new]) is new
    assert current_pod({"status": {"podTemplatePod": {"name": ""}}}, [old, new]) is new  # paused: not recorded
    assert current_pod(ws, []) is None


def test_cleanup_of_one_workspace_never_touches_another_whose_name_it_begins():
    """`gkews-foo-` also begins `gkews-foo-bar-...`: the cleanup of Workspace foo must leave foo-bar's
    triggers and snapshots alone (their GCS data is foo-bar's pending resume). Names too long for 63
    characters still carry the whole stamp, and never collide."""
    from jupyter_gkews.k8s import TRIGGERED_BY_LABEL, WORKSPACE_LABEL
    from jupyter_gkews.k8s import cleanup as cleanup_plan
    from jupyter_gkews.k8s.snapshots import is_our_trigger, trigger_body

    triggers = {ws: trigger_body(ws, "pod") for ws in ("foo", "foo-bar")}

    class Cluster:
        def list(self, plural):
            if plural == TRIGGERS.plural:
                return list(triggers.values())
            return [{"metadata": {"name": f"snap-{ws}", "creationTimestamp": "2026-12-01T00:00:00Z",
                                  "labels": {TRIGGERED_BY_LABEL: t["metadata"]["name"]}},
                     "status": {"conditions": [{"type": "Ready", "status": "True"}]}} for ws, t in triggers.items()]

        def find(self, plural, name):
            return None
    for ws in triggers:
        triggers[ws]["status"] = {"conditions": [{"type": "Triggered", "status": "True"}],
                                  "snapshotCreated": {"name": f"snap-{ws}"}}
    planned = cleanup_plan.plan(Cluster(), "foo", 0, set())
    assert {(i["kind"], i["name"]) for i in planned} == {
        ("PodSnapshot", "snap-foo"), ("PodSnapshotManualTrigger", triggers["foo"]["metadata"]["name"])}
    assert all(t["metadata"]["labels"][WORKSPACE_LABEL] == ws for ws, t in triggers.items())
    long_a, long_b = "w" * 70, "w" * 69 + "v"
    a, b = trigger_body(long_a, "p")["metadata"]["name"], trigger_body(long_b, "p")["metadata"]["name"]
    assert len(a) <= 63 and len(b) <= 63 and is_our_trigger(a, long_a) and not is_our_trigger(a, long_b)


def test_a_cleanup_during_a_pause_spares_the_snapshot_being_taken():
    """The pause waits (up to its timeout) for a snapshot that is not Ready yet and whose name it does not
    know yet: a periodic cleanup meanwhile must not call it "never became Ready" and delete it."""
    from jupyter_gkews.k8s import TRIGGERED_BY_LABEL
    from jupyter_gkews.k8s import cleanup as cleanup_plan
    from jupyter_gkews.k8s.snapshots import trigger_body

    by = trigger_body("foo", "pod")["metadata"]["name"]

    class Cluster:
        def list(self, plural):
            if plural == TRIGGERS.plural:
                return []
            return [{"metadata": {"name": "uploading", "creationTimestamp": "2026-12-01T00:00:00Z",
                                  "labels": {TRIGGERED_BY_LABEL: by}}, "status": {"conditions": []}}]

        def find(self, plural, name):
            return None
    assert cleanup_plan.plan(Cluster(), "foo", 1, set(), pausing=True) == []
    assert [i["why"] for i in cleanup_plan.plan(Cluster(), "foo", 1, set())] == ["never became Ready"]
