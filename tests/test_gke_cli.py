"""`jupyter gkews status|pause|resume --workspace NAME` from outside the Pod: the installed command, run as a
process with a kubeconfig that points at kmock's API emulator (GKE's controllers: tests/gke_controller.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from gke_controller import PODS, TRIGGERS, UNSCHEDULABLE, WORKSPACES, FakeGke

from jupyter_gkews.k8s.api import Kube
from jupyter_gkews.k8s.snapshots import policy_body, policy_name, trigger_body

COMMAND = shutil.which("jupyter-gkews", path=str(Path(sys.executable).parent)) or "jupyter-gkews"


@pytest.fixture
def cluster_options():
    return {}


@pytest.fixture
def fake(cluster_options):
    cluster = FakeGke(**cluster_options).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def gkews(fake, tmp_path):
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}

    def run(*args, code=0):
        p = subprocess.run([COMMAND, *args, "--kubeconfig", kubeconfig], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
        return p
    run.kubeconfig = kubeconfig
    return run


def status(gkews, ws="gpu-notebook") -> dict:
    return json.loads(gkews("status", "--workspace", ws, "--json").stdout)


LOST = ("jupyter gkews pause: the GKE Workspaces snapshot add-on is not enabled for the Workspace "
        "team-a/gpu-notebook, so a pause from here takes no Pod snapshot and no checkpoint: what its kernels hold in "
        "memory (variables, models on the GPU) would be lost when the Pod stops.")


def wait_status(gkews, state: str) -> dict:
    """The controller reacts within 50 ms; poll until the Workspace shows the state."""
    for _ in range(20):
        d = status(gkews)
        if d["state"] == state:
            return d
    raise AssertionError(f"still {d['state']}: {d['message']}")


def test_status_pause_resume_and_capacity(fake, gkews):
    s = gkews("status", "--workspace", "gpu-notebook").stdout  # namespace from the kubeconfig context
    assert s.splitlines()[0] == "Workspace team-a/gpu-notebook: ready"
    assert "not marked restored from a snapshot" in s and "last snapshot: none" in s

    # a snapshot, as the server in the Pod would take one
    kube = Kube("team-a", gkews.kubeconfig)
    kube.create("podsnapshotpolicies",
                policy_body(policy_name("gpu-notebook"), "gpu-notebook", "gkews-snapshots", "7d"))
    kube.create("podsnapshotmanualtriggers", trigger_body("gpu-notebook", fake.pod))
    for _ in range(200):
        if fake.all(TRIGGERS)[0].get("status"):
            break
        __import__("time").sleep(0.05)

    assert gkews("pause", "--workspace", "gpu-notebook", code=3).stderr.startswith(LOST)  # no add-on here
    p = gkews("pause", "--workspace", "gpu-notebook", "--namespace", "team-a", "--discard-kernel-state")
    assert "pause requested" in p.stdout and "warning: paused without a Pod snapshot" in p.stderr
    assert "already paused; nothing to do" in gkews("pause", "--workspace", "gpu-notebook").stdout
    d = wait_status(gkews, "paused")
    assert d["paused"] is True and d["pod"] is None
    assert d["last_snapshot"]["ready"] is True and d["last_snapshot"]["age"].endswith("s ago")

    fake.capacity = False  # no GPU node for the new Pod
    assert "resume requested" in gkews("resume", "--workspace", "gpu-notebook").stdout
    d = wait_status(gkews, "waiting-for-capacity")
    assert d["message"] == f"Unschedulable: {UNSCHEDULABLE}"
    assert fake.get(WORKSPACES, "gpu-notebook")["spec"]["paused"] is False

    second = gkews("resume", "--workspace", "gpu-notebook", code=3)  # refused: one restore is pending
    assert "a resume of gpu-notebook is already pending (waiting-for-capacity: Unschedulable: 0/4 nodes" \
        in second.stderr
    calls = [c for c in fake.calls() if c[0] == "patch" and c[1] == "workspaces"]
    assert len(calls) == 2  # one pause, one resume: the refused resume changed nothing

    fake.restore_on = "resume"
    fake.grant_capacity()
    d = wait_status(gkews, "ready")
    assert "restored from a snapshot (Pod restored from PodSnapshot" in d["message"]
    assert "already running; nothing to do" in gkews("resume", "--workspace", "gpu-notebook").stdout


def test_a_pause_without_the_addon_is_refused_unless_the_kernels_state_may_be_discarded(fake, gkews):
    """From outside the Pod, `pause` only sets spec.paused, as Kubeflow's Stop does: without the add-on nothing
    snapshots the Pod or checkpoints its kernels, and what they hold in memory is lost. That is refused, saying
    what to do instead, unless --discard-kernel-state asks for exactly that (a warning says it then)."""
    p = gkews("pause", "--workspace", "gpu-notebook", "--json", code=3)
    d = json.loads(p.stdout)
    assert d["refused"] is True and d["changed"] is False and d["snapshot_on_pause"] is False
    assert p.stderr.startswith(LOST) and d["reason"] in p.stderr
    assert "Nothing was changed. Pause from inside the session instead (the Pause button, or POST gkews/pause), " \
           "which checkpoints every kernel first" in d["reason"]
    assert 'or enable the add-on for this Workspace (annotation podsnapshot.gke.kubeflow.org/enabled: "true") ' \
           "while it is paused: its next Pod runs in gVisor" in d["reason"]
    assert d["reason"].endswith("pass --discard-kernel-state")
    assert fake.get(WORKSPACES, "gpu-notebook")["spec"]["paused"] is False

    p = gkews("pause", "--workspace", "gpu-notebook", "--discard-kernel-state", "--json")
    d = json.loads(p.stdout)
    assert d["changed"] is True and d["snapshot_on_pause"] is False
    assert p.stderr.startswith("jupyter gkews pause: warning: paused without a Pod snapshot or checkpoint "
                               "(--discard-kernel-state): what the kernels held in memory is lost") \
        and d["warning"] in p.stderr
    wait_status(gkews, "paused")
    p = gkews("pause", "--workspace", "gpu-notebook", "--json")  # nothing to lose any more: no refusal
    assert json.loads(p.stdout)["changed"] is False and p.stderr == ""


@pytest.mark.parametrize("cluster_options", [{"sandbox_admission": False}])  # nothing set gVisor on its Pod
def test_a_pause_the_addon_would_hold_for_ever_is_refused(fake, gkews):
    """The add-on turned on while the Pod ran: it sets gVisor only on Pods it creates, so it would take this pause
    and wait for a snapshot GKE cannot take, the Workspace holding its GPU. Refused, --discard-kernel-state too."""
    from jupyter_gkews.k8s import ADDON_ENABLED_ANNOTATION
    fake.emu.objects[WORKSPACES, "team-a", "gpu-notebook"].patch(
        {"metadata": {"annotations": {ADDON_ENABLED_ANNOTATION: "true"}}})
    for extra in ((), ("--discard-kernel-state",)):
        p = gkews("pause", "--workspace", "gpu-notebook", "--json", *extra, code=3)
        d = json.loads(p.stdout)
        assert d["refused"] is True and d["changed"] is False, d
        assert f"snapshot add-on is on for this Workspace, but the Pod {fake.pod} was created before it was" \
            in d["reason"] and d["reason"].endswith("Nothing was changed")
    assert fake.get(WORKSPACES, "gpu-notebook")["spec"]["paused"] is False


def test_restoring_is_shown_while_the_pod_is_not_ready(fake, gkews):
    fake.call(lambda: fake.emu.objects[PODS, "team-a", fake.pod].patch(
        {"status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                       {"type": "Ready", "status": "False"}]}}))
    d = status(gkews)
    assert d["state"] == "restoring" and d["message"] == "the Pod is Running and not ready yet"
    assert "already pending (restoring" in gkews("resume", "--workspace", "gpu-notebook", code=3).stderr


def test_a_workspace_its_controller_reports_in_error_is_shown_so(fake, gkews):
    """status.state Error (a Pod that cannot be created, say) with a Pod not Ready read as "restoring", and
    resume refused it as a pending resume; the controller's own message was dropped."""
    fake.call(lambda: fake.emu.objects[WORKSPACES, "team-a", "gpu-notebook"].patch(
        {"status": {"state": "Error", "stateMessage": "pods \"ws-gpu-notebook-0\" is forbidden: exceeded quota"}}))
    fake.call(lambda: fake.emu.objects[PODS, "team-a", fake.pod].patch(
        {"status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}}))
    d = status(gkews)
    assert d["state"] == "error" and d["message"] == 'pods "ws-gpu-notebook-0" is forbidden: exceeded quota', d
    resume = gkews("resume", "--workspace", "gpu-notebook", code=1)  # it did nothing, and says what would
    assert "not paused, and in error: pods \"ws-gpu-notebook-0\" is forbidden: exceeded quota. A resume cannot mend" \
        in resume.stderr and "already pending" not in resume.stderr


@pytest.mark.parametrize("cluster_options", [{"addon": True}])
def test_the_addons_checkpointing_is_shown_and_a_second_pause_is_refused(fake, gkews):
    """The add-on's webhook keeps spec.paused false and marks the Workspace Checkpointing until its snapshot is
    Ready (and takes the Pod out of Ready meanwhile): that is a pause in progress, not a Pod restoring, and a
    second pause would restamp it and make the add-on delete and redo its trigger."""
    fake.addon_hold.set()  # the snapshot takes a while
    p = gkews("pause", "--workspace", "gpu-notebook")
    assert "pause requested" in p.stdout and p.stderr == ""  # the add-on snapshots the Pod: no warning
    ws = fake.get(WORKSPACES, "gpu-notebook")
    assert ws["spec"]["paused"] is False  # held by the add-on
    started = ws["metadata"]["annotations"]["podsnapshot.gke.kubeflow.org/checkpoint-started-at"]

    text = gkews("status", "--workspace", "gpu-notebook").stdout
    assert text.splitlines()[0] == "Workspace team-a/gpu-notebook: pausing (snapshot in progress)", text
    d = status(gkews)
    assert d["state"] == "pausing" and d["snapshot_in_progress"] is True and d["pod"] == fake.pod
    assert f"taking a Pod snapshot since {started}" in d["message"]

    second = gkews("pause", "--workspace", "gpu-notebook", code=3)
    assert "is already pausing: the GKE Workspaces snapshot add-on has been taking its Pod snapshot since " \
        f"{started}" in second.stderr and "not asking again" in second.stderr
    assert fake.addon_intercepts == 1
    assert fake.get(WORKSPACES, "gpu-notebook")["metadata"]["annotations"][
        "podsnapshot.gke.kubeflow.org/checkpoint-started-at"] == started

    fake.addon_hold.clear()  # the add-on takes its snapshot and lets the pause through
    d = wait_status(gkews, "paused")
    snap = d["last_snapshot"]  # the add-on's, matched by its trigger's label although the Pod is gone
    assert snap["name"] == fake.get(WORKSPACES, "gpu-notebook")["metadata"]["annotations"][
        "podsnapshot.gke.kubeflow.org/last-checkpoint-name"]
    assert snap["ready"] is True and snap["age"].endswith("s ago"), d


def test_errors_are_named(fake, gkews, tmp_path):
    p = gkews("status", code=2)
    assert "say which Workspace: --workspace NAME [--namespace NS]" in p.stderr
    p = gkews("status", "--workspace", "nope", code=1)
    assert "not found: workspaces/nope in namespace team-a" in p.stderr
    fake.deny("patch", "workspaces")
    p = gkews("pause", "--workspace", "gpu-notebook", "--discard-kernel-state", code=1)
    assert 'may not patch workspaces (apiGroup "kubeflow.org") in namespace team-a' in p.stderr
    fake.stop()
    p = gkews("status", "--workspace", "gpu-notebook", code=1)
    assert f"the Kubernetes API server {fake.url} is unreachable (connection refused)" in p.stderr


def test_a_kubeconfig_that_does_not_exist_is_named_as_such(tmp_path):
    missing = tmp_path / "no-such-kubeconfig"
    p = subprocess.run([COMMAND, "status", "--workspace", "gpu-notebook", f"--kubeconfig={missing}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    # was "could not be loaded (Invalid kube-config file. No configuration found.)"
    assert f"the kubeconfig {missing} does not exist" in p.stderr and "--kubeconfig" in p.stderr, p.stderr


def _wait_failed(gkews) -> dict:
    for _ in range(20):
        d = status(gkews)
        if d["snapshot_failed"]:
            return d
    raise AssertionError(f"not seen failed: {d}")


@pytest.mark.parametrize("cluster_options", [{"addon": True}])
@pytest.mark.parametrize("outcome, words", [
    ("checkpoint-failed", "failed (Checkpoint=False): Failed: gVisor checkpoint failed"),
    ("trigger-failed", "the PodSnapshotManualTrigger ws-gpu-notebook-trigger failed: Failed: context deadline "
                       "exceeded")])
def test_a_failed_addon_snapshot_is_named_with_the_way_out(fake, gkews, outcome, words):
    """The add-on holds a pause until its snapshot is Ready. One that failed left status saying "the Workspace
    pauses once it is Ready" for good (its Pod out of Ready, holding the GPU), pause saying to wait, and resume
    exiting 0 having done nothing. Each names the failure, in GKE's words, and the way out, which works."""
    fake.outcome = outcome
    gkews("pause", "--workspace", "gpu-notebook")
    d = _wait_failed(gkews)
    way_out = "kubectl delete podsnapshotmanualtriggers ws-gpu-notebook-trigger -n team-a"
    assert d["state"] == "pausing" and words in d["message"] and way_out in d["message"], d
    assert gkews("status", "--workspace", "gpu-notebook").stdout.startswith(
        "Workspace team-a/gpu-notebook: pausing (snapshot failed)")
    resume = gkews("resume", "--workspace", "gpu-notebook", code=3)
    assert "gpu-notebook is pausing, not paused: " in resume.stderr and words in resume.stderr
    again = gkews("pause", "--workspace", "gpu-notebook", "--json", code=3)
    assert words in again.stderr and json.loads(again.stdout)["refused"] is True

    fake.outcome = "ready"  # what GKE failed at is mended; the way out the message gives
    fake.call(lambda: fake.emu.objects[TRIGGERS, "team-a", "ws-gpu-notebook-trigger"].delete())
    assert wait_status(gkews, "paused")["last_snapshot"]["ready"] is True


def cli(*args, code: int) -> subprocess.CompletedProcess:
    """The command with only the options given (the gkews fixture adds its own --kubeconfig)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    p = subprocess.run([COMMAND, *args], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    return p


def test_the_context_named_gives_the_namespace(fake, gkews, tmp_path):
    """--context b used b's credentials but the current context's namespace: the command paused a Workspace of
    the same name in another namespace."""
    config = yaml.safe_load(Path(gkews.kubeconfig).read_text())
    base = config["contexts"][0]["context"]
    config["contexts"] = [{"name": "a", "context": {**base, "namespace": "other"}},
                          {"name": "b", "context": {**base, "namespace": "team-a"}}]
    config["current-context"] = "a"
    two = tmp_path / "two-contexts"
    two.write_text(yaml.safe_dump(config))
    p = cli("status", "--workspace", "gpu-notebook", "--kubeconfig", str(two), "--context", "b", code=0)
    assert p.stdout.startswith("Workspace team-a/gpu-notebook: ready"), p.stdout
    p = cli("status", "--workspace", "gpu-notebook", "--kubeconfig", str(two), code=1)  # a's: other
    assert "not found: workspaces/gpu-notebook in namespace other" in p.stderr
    assert "that namespace came from the kubeconfig's current context" in p.stderr and "--namespace" in p.stderr
    p = cli("status", "--workspace", "gpu-notebook", "--kubeconfig", str(two), "--context", "nope", code=1)
    assert "has no context 'nope' (it has: a, b); pass --context with one of them" in p.stderr


def test_a_kubeconfig_that_is_no_kubeconfig_is_named(tmp_path):
    garbage = tmp_path / "garbage"
    garbage.write_text("{{{ not yaml: [")
    for path, words in ((garbage, f"the kubeconfig {garbage} could not be loaded (ParserError"),
                        (tmp_path, f"the kubeconfig {tmp_path} is a directory")):
        p = cli("status", "--workspace", "gpu-notebook", "--kubeconfig", str(path), code=1)
        assert words in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_busy_api_server_is_asked_again(fake, gkews):
    """One 503 or 429 failed the command, and in the Pod the pause that had its snapshot: reads and the
    pause's patch are asked again."""
    fake.fail("get", "workspaces", 503, times=1)
    fake.fail("list", "pods", 429, times=1)
    assert status(gkews)["state"] == "ready"
    fake.fail("patch", "workspaces", 503, times=1)
    assert "pause requested" in gkews("pause", "--workspace", "gpu-notebook", "--discard-kernel-state").stdout
    assert fake.get(WORKSPACES, "gpu-notebook")["spec"]["paused"] is True


def test_a_pod_that_cannot_start_is_an_error_not_a_restore(fake, gkews):
    """A container in CrashLoopBackOff (an image tag mistyped: ImagePullBackOff) read as "restoring", and resume
    said to wait for it."""
    def crash(pods):
        pods[PODS, "team-a", fake.pod].patch({"status": {
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "jupyterlab", "image": "jupyter:1", "imageID": "", "ready": False,
                                   "restartCount": 5, "state": {"waiting": {
                                       "reason": "CrashLoopBackOff",
                                       "message": "back-off 5m0s restarting failed container"}}}]}})
    fake.call(lambda: crash(fake.emu.objects))
    d = status(gkews)
    assert d["state"] == "error" and "its container jupyterlab is waiting with CrashLoopBackOff (back-off 5m0s" \
        in d["message"] and f"kubectl logs {fake.pod} -n team-a" in d["message"], d
    p = gkews("resume", "--workspace", "gpu-notebook", code=1)
    assert "in error" in p.stderr and "already pending" not in p.stderr


def test_snapshots_that_cannot_be_listed_leave_status_and_resume_working(fake, gkews):
    """A role without `list podsnapshots` (or a cluster without the CRD) failed status and resume, so a Workspace
    paused from here could not be resumed from here."""
    fake.deny("list", "podsnapshots")
    gkews("pause", "--workspace", "gpu-notebook", "--discard-kernel-state")
    text = gkews("status", "--workspace", "gpu-notebook").stdout
    assert "last snapshot: unknown (forbidden: your kubeconfig's user may not list podsnapshots" in text, text
    assert "resume requested" in gkews("resume", "--workspace", "gpu-notebook").stdout
    assert fake.get(WORKSPACES, "gpu-notebook")["spec"]["paused"] is False
