"""Pause and resume on the GKE backend: a real jupyter_server with real kernels, the official kubernetes
client over HTTP to kmock's emulator, and GKE's controllers played by tests/gke_controller.py.

"Restored Pod" is emulated: the controller marks the Pod restored (new uid, PodRestored=True) while the
same kernel processes keep running, which is what the server sees after a real gVisor restore.
"""
from __future__ import annotations

import asyncio
import errno

import json

import pytest
from gke_controller import POLICIES, SNAPSHOTS, TRIGGERS, WORKSPACES, FakeGke
from serverkit import events, open_notebook, post, run_cell, status, wait_for

WS, NS = "gpu-notebook", "team-a"
SESSION = r'''
import numpy as np
weights = np.random.default_rng(3).standard_normal((256, 256)).astype("float32")
config = {"lr": 3e-4, "layers": [256, 256]}
print("ready")
'''
CHECK = ('print(__import__("json").dumps({"sum": float(weights.sum()), "config": config, '
         '"pid": __import__("os").getpid()}))')


@pytest.fixture
def cluster_options():
    return {}


@pytest.fixture
def fake(tmp_path, cluster_options):
    cluster = FakeGke(namespace=NS, workspace=WS, **cluster_options)
    yield cluster
    cluster.stop()


@pytest.fixture
def backend_traits():
    return {}


@pytest.fixture
def jp_server_config(tmp_path, fake, monkeypatch, backend_traits):
    if not fake.url:
        fake.start()
    monkeypatch.setenv("POD_NAME", fake.pod)  # the downward API: ws-<workspace>-<random>-0
    monkeypatch.setenv("POD_NAMESPACE", NS)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gkews": True}, "allow_unauthenticated_access": False},
            "GkewsApp": {"checkpoint_root": str(tmp_path / "ckpt"), "state_dir": str(tmp_path / "state"),
                         "backend_class": "jupyter_gkews.backends.gke.GkeBackend"},
            "GkeBackend": {"kubeconfig": fake.pod_kubeconfig(tmp_path / "kubeconfig"), "poll_interval": 0.1,
                           **backend_traits}}


async def start_session(jp_fetch, jp_serverapp, jp_root_dir, path="work/train.ipynb"):
    s = await open_notebook(jp_fetch, jp_root_dir, path)
    kid = s["kernel"]["id"]
    assert "ready" in await run_cell(jp_serverapp, kid, SESSION)
    await run_cell(jp_serverapp, kid, "%gkews_checkpoint probe float(weights[:8].sum())")
    return kid, json.loads(await run_cell(jp_serverapp, kid, CHECK))


async def pause_and_wait(jp_fetch, until=("active", "paused", "failed")) -> dict:
    r = await post(jp_fetch, "pause")
    assert r.code == 202, r.body
    return await wait_for(jp_fetch, until)


async def test_snapshot_then_restored_pod_is_live_verified(fake, jp_fetch, jp_serverapp, jp_root_dir):
    fake.restore_on = "trigger"  # the restored copy wakes up inside the snapshot wait
    kid, before = await start_session(jp_fetch, jp_serverapp, jp_root_dir)

    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "active", s["message"]
    nb = s["notebooks"][0]
    assert nb["verdict"] == "live-verified" and nb["same_process"] is True, nb
    assert "PodRestored=True" in s["restored_from"]["reason"]
    assert s["message"].startswith("restored from a snapshot; resumed: 1 live-verified")
    assert s["snapshot"]["status"] == "restored" and s["snapshot"]["name"]
    assert json.loads(await run_cell(jp_serverapp, kid, CHECK)) == before  # same process, same values

    policy = fake.get(POLICIES, f"gkews-{WS}")
    assert policy["spec"]["selector"] == {"matchLabels": {"notebooks.kubeflow.org/workspace-name": WS}}
    assert policy["spec"]["triggerConfig"] == {"type": "manual", "postCheckpoint": "resume"}
    assert policy["spec"]["retentionConfig"] == {"lastAccessTimeout": "7d"}
    assert policy["spec"]["storageConfigName"] == "gkews-snapshots"
    # used once: the snapshot this Pod came back from (and its spent trigger) is retired, so that the next
    # Pod start (a Stop, an eviction) does not bring this older state back; the policy stays for now
    for _ in range(400):
        if not fake.all(SNAPSHOTS) and not fake.all(TRIGGERS):
            break
        await asyncio.sleep(0.05)
    assert fake.all(SNAPSHOTS) == [] and fake.all(TRIGGERS) == [] and fake.leaked_storage == []
    assert [c[1] for c in fake.calls() if c[0] == "create"].count("podsnapshotmanualtriggers") == 1
    names = [e["event"] for e in await events(jp_fetch)]
    assert names.index("snapshotting") < names.index("restored-detected") < names.index("resumed")
    assert "paused" not in names and "releasing" not in names  # the restored copy never finished the pause
    # every line written is one the log's readers take (a detail of another type is skipped as damaged)
    assert jp_serverapp.web_app.settings["gkews_lifecycle"].store.read_events()[1] == []


async def test_restored_pod_falls_back_for_the_kernel_that_changed(fake, jp_fetch, jp_serverapp, jp_root_dir):
    """Verify every kernel: the one whose process is new comes back from its checkpoint, the other stays."""
    fake.restore_on = "trigger"
    fake.hold.set()  # keep the trigger waiting while one kernel is restarted
    kid_a, before_a = await start_session(jp_fetch, jp_serverapp, jp_root_dir, "a.ipynb")
    kid_b, before_b = await start_session(jp_fetch, jp_serverapp, jp_root_dir, "b.ipynb")
    r = await post(jp_fetch, "pause")
    assert r.code == 202
    for _ in range(600):
        if fake.all(TRIGGERS):
            break
        await __import__("asyncio").sleep(0.05)
    assert fake.all(TRIGGERS), (await status(jp_fetch))["message"]
    await jp_fetch("api", "kernels", kid_b, "restart", method="POST", body="")
    fake.hold.clear()

    s = await wait_for(jp_fetch, ("active", "paused", "failed"))
    assert s["state"] == "active", s["message"]
    verdicts = {nb["path"]: nb for nb in s["notebooks"]}
    assert verdicts["a.ipynb"]["verdict"] == "live-verified"
    b = verdicts["b.ipynb"]
    assert b["verdict"] == "restored-from-checkpoint" and b["why_restored"].startswith("a new process"), b
    assert sorted(b["restored"]) == ["config", "np", "weights"] and b["failed"] == {}
    after_b = json.loads(await run_cell(jp_serverapp, kid_b, CHECK))
    assert after_b.pop("pid") != before_b.pop("pid") and after_b == before_b
    assert json.loads(await run_cell(jp_serverapp, kid_a, CHECK)) == before_a


async def workspace_paused(fake) -> dict:
    """The Workspace once the controller (the fixture's thread) has marked it Paused, or as it is after 30 s."""
    for _ in range(600):
        ws = fake.get(WORKSPACES, WS)
        if ws["status"]["state"] == "Paused":
            break
        await asyncio.sleep(0.05)
    return ws


async def test_trigger_pause_completes_because_the_pod_lives_on_after_its_checkpoint(fake, jp_fetch, jp_serverapp,
                                                                                     jp_root_dir):
    """The fixture plays postCheckpoint as GKE documents it: `stop` completes the Pod right after its checkpoint
    and its processes send nothing more. Our policy says `resume`, so the server sees the snapshot Ready and
    pauses the Workspace itself."""
    await start_session(jp_fetch, jp_serverapp, jp_root_dir)
    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "paused", s["message"]
    assert s["snapshot"]["status"] == "ready" and s["snapshot"]["mode"] == "trigger"
    assert fake.get(POLICIES, f"gkews-{WS}")["spec"]["triggerConfig"]["postCheckpoint"] == "resume"
    ws = await workspace_paused(fake)
    assert ws["spec"]["paused"] is True and ws["status"]["state"] == "Paused"
    assert not any(c == ("patch", "workspaces", WS) for c in fake.calls(user="system:admin"))  # the Pod paused it


@pytest.mark.parametrize("cluster_options,backend_traits", [({"addon": True}, {"snapshot_mode": "auto"})])
async def test_workspace_addon_snapshots_on_pause_and_the_resumed_pod_is_verified(fake, jp_fetch, jp_serverapp,
                                                                                  jp_root_dir):
    kid, before = await start_session(jp_fetch, jp_serverapp, jp_root_dir)

    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "paused", s["message"]
    assert s["snapshot"]["mode"] == "workspace"
    assert fake.get(POLICIES, f"gkews-{WS}") is None
    ws = await workspace_paused(fake)  # the add-on held the pause until its snapshot was Ready, then let it through
    assert ws["spec"]["paused"] is True and ws["status"]["state"] == "Paused"
    assert ws["metadata"]["annotations"]["podsnapshot.gke.kubeflow.org/checkpoint-state"] == "Ready"
    assert fake.addon_intercepts == 1  # one pause asked once
    # the snapshot came from the add-on's own trigger (it makes it after our pause request, so look now)
    assert [t["metadata"]["name"] for t in fake.all(TRIGGERS)] == [f"ws-{WS}-trigger"]

    fake.restore_on = "resume"
    fake.set_paused(False)  # someone resumes the Workspace; GKE restores the Pod from the add-on's snapshot
    s = await wait_for(jp_fetch, ("active", "failed"))
    assert s["state"] == "active", s["message"]
    assert s["notebooks"][0]["verdict"] == "live-verified"
    assert "PodRestored=True" in s["restored_from"]["reason"]
    assert json.loads(await run_cell(jp_serverapp, kid, CHECK)) == before
    assert jp_serverapp.web_app.settings["gkews_lifecycle"].store.read_events()[1] == []


@pytest.mark.parametrize("cluster_options,backend_traits", [({"addon": True}, {"snapshot_mode": "trigger"})])
async def test_trigger_mode_refuses_a_workspace_the_addon_snapshots(fake, jp_fetch, jp_serverapp, jp_root_dir):
    """snapshot_mode 'trigger' set by hand on a Workspace the add-on snapshots: two policies select the Pod,
    the add-on's with postCheckpoint: stop, and the add-on holds our pause for a snapshot of its own. No
    trigger of ours is made; the pause goes on with the checkpoints and says what to set."""
    await start_session(jp_fetch, jp_serverapp, jp_root_dir)
    s = await pause_and_wait(jp_fetch)
    assert "c.GkeBackend.snapshot_mode is 'trigger', but the GKE Workspaces snapshot add-on is on" in \
        s["snapshot"]["error"], s["snapshot"]
    assert "c.GkeBackend.snapshot_mode = 'auto'" in s["snapshot"]["error"]
    assert fake.get(POLICIES, f"gkews-{WS}") is None
    assert not [t for t in fake.all(TRIGGERS) if t["metadata"]["name"].startswith("gkews-")]


@pytest.mark.parametrize("cause,expected,backend_traits", [
    ("trigger-failed", "failed: Failed: context deadline exceeded", {}),
    ("trigger-error", "failed: Error: the node's snapshot agent is unreachable", {}),
    ("checkpoint-failed", "failed (Checkpoint=False): Failed: gVisor checkpoint failed", {}),
    ("storage-failed", "failed (StorageReplicated=False): Failed: upload to gs://snapshots failed",
     {"snapshot_timeout": 120.0}),
    ("ready-failed", "failed (Ready=False): Error: snapshot metadata could not be recorded",
     {"snapshot_timeout": 120.0}),
    ("rbac", 'may not create podsnapshotmanualtriggers (apiGroup "podsnapshot.gke.io") in namespace team-a: '
             'add the verb "create" on "podsnapshotmanualtriggers"', {}),
    ("hang", "no Ready PodSnapshot 1 s after the trigger gkews-gpu-notebook-", {"snapshot_timeout": 1.0}),
])
async def test_snapshot_failure_is_named_and_the_pause_completes_on_the_checkpoint(
        fake, jp_fetch, jp_serverapp, jp_root_dir, cause, expected):
    if cause == "rbac":
        fake.deny("create", "podsnapshotmanualtriggers")
    else:
        fake.outcome = cause
    await start_session(jp_fetch, jp_serverapp, jp_root_dir)

    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "paused", s["message"]
    assert expected in s["snapshot"]["error"] and s["snapshot"]["resume_from"] == "checkpoint"
    assert expected in s["message"]
    assert "the resume will restore the kernels from their application checkpoints" in s["message"]
    assert s["notebooks"][0]["status"] == "released" and s["notebooks"][0]["checkpoint"]
    assert s["timeline"]["snapshot_ready"] is None
    assert fake.get(WORKSPACES, WS)["spec"]["paused"] is True  # the GPU is released all the same
    assert "snapshot-failed" in [e["event"] for e in await events(jp_fetch)]
    # withdrawn before the release: GKE must not act on it late, nor leave a snapshot a Pod start would restore
    assert await gone(fake, TRIGGERS) == [] and await gone(fake, SNAPSHOTS) == []
    if cause == "hang":
        assert "this pause's trigger gkews-gpu-notebook-" in s["snapshot"]["error"]


async def test_transient_api_errors_during_the_snapshot_wait_do_not_cost_the_snapshot(
        fake, jp_fetch, jp_serverapp, jp_root_dir):
    """A Pod snapshot takes minutes and the Pod is frozen while it uploads, so the wait's reads meet an API server
    that fails now and then (503, dead pooled connections after the freeze). GKE goes on meanwhile: so does the
    wait, until its deadline; the snapshot comes and the pause completes on it."""
    fake.hold.set()  # GKE is still checkpointing the Pod
    await start_session(jp_fetch, jp_serverapp, jp_root_dir)
    r = await post(jp_fetch, "pause")
    assert r.code == 202, r.body
    while not fake.all(TRIGGERS):
        await asyncio.sleep(0.05)
    fake.fail("get", "podsnapshotmanualtriggers", 503, times=3)
    while fake.faults_left() and (await status(jp_fetch))["state"] == "pausing":  # each failed read answered
        await asyncio.sleep(0.05)
    fake.hold.clear()

    s = await wait_for(jp_fetch, ("active", "paused", "failed"))
    assert s["state"] == "paused", s["message"]
    assert s["snapshot"]["status"] == "ready", s["snapshot"]
    assert "snapshot failed" not in s["message"]
    assert fake.get(WORKSPACES, WS)["spec"]["paused"] is True


async def test_a_snapshot_deleted_while_it_uploads_ends_the_wait_at_once(fake, jp_fetch, jp_serverapp, jp_root_dir):
    """GKE uploads a snapshot for minutes (Ready False, AwaitingCheckpoint). One deleted meanwhile (kubectl
    delete, a cleanup) will never be Ready: the wait waited for it until snapshot_timeout (20 minutes by
    default). It ends at once, naming the snapshot, and the pause completes on the checkpoints."""
    fake.upload_hold.set()
    await start_session(jp_fetch, jp_serverapp, jp_root_dir)
    r = await post(jp_fetch, "pause")
    assert r.code == 202, r.body
    while not fake.all(SNAPSHOTS) or "AwaitingCheckpoint" not in (await status(jp_fetch))["message"]:
        await asyncio.sleep(0.05)  # the wait has seen it uploading
    name = fake.all(SNAPSHOTS)[0]["metadata"]["name"]
    fake.call(lambda: fake.emu.objects[SNAPSHOTS, fake.namespace, name].delete())

    s = await wait_for(jp_fetch, ("active", "paused", "failed"))
    assert s["state"] == "paused", s["message"]
    assert f"the PodSnapshot {name} was deleted while the pause waited for it" in s["snapshot"]["error"]
    assert s["snapshot"]["resume_from"] == "checkpoint" and s["notebooks"][0]["checkpoint"]
    assert await gone(fake, TRIGGERS) == []


@pytest.mark.parametrize("backend_traits", [{"abort_on_snapshot_failure": True}])
async def test_snapshot_forbidden_with_abort_releases_nothing(fake, jp_fetch, jp_serverapp, jp_root_dir):
    fake.deny("create", "podsnapshotmanualtriggers")
    kid, before = await start_session(jp_fetch, jp_serverapp, jp_root_dir)

    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "failed"
    assert 'forbidden: the service account may not create podsnapshotmanualtriggers' in s["error"]["reason"]
    assert s["error"]["next_step"].startswith("Nothing was released: every kernel is still running")
    assert fake.get(WORKSPACES, WS)["spec"]["paused"] is False
    assert json.loads(await run_cell(jp_serverapp, kid, CHECK)) == before  # the kernel was left alone
    listed = json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]
    assert [c["notebook"] for c in listed] == ["work/train.ipynb"]  # its checkpoint is kept


async def test_api_unreachable_is_named_and_the_kernels_keep_running(fake, jp_fetch, jp_serverapp, jp_root_dir):
    kid, before = await start_session(jp_fetch, jp_serverapp, jp_root_dir)
    fake.stop()

    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "failed", s["message"]
    assert s["error"]["reason"].startswith("The pause stopped at releasing: KubeError: the Kubernetes API server "
                                           f"{fake.url} is unreachable (connection refused) while trying to get "
                                           f"pods/{fake.pod} in namespace {NS}; check the network and the API address")
    assert "is unreachable" in s["snapshot"]["error"]  # the snapshot failed first, for the same reason
    assert json.loads(await run_cell(jp_serverapp, kid, CHECK)) == before


async def gone(fake, res) -> list[dict]:
    """The objects of this kind left once GKE (the fixture) has finalized the deleted ones (or after 10 s)."""
    for _ in range(200):
        left = fake.all(res)
        if not left:
            break
        await asyncio.sleep(0.05)
    return left


@pytest.mark.parametrize("denied", [[], [("delete", "podsnapshots")]])
async def test_a_pause_that_fails_after_its_snapshot_does_not_leave_it_to_roll_the_kernels_back(
        fake, jp_fetch, jp_serverapp, jp_root_dir, denied):
    """The snapshot is Ready, then the release is refused (403 on patch workspaces): the pause fails and the kernels
    run on. A snapshot left Ready would bring them back to this moment at the next Pod start (a Kubeflow Stop, an
    eviction), so the pause deletes it; when it cannot, the failure names it and the command that deletes it."""
    kid, before = await start_session(jp_fetch, jp_serverapp, jp_root_dir)
    fake.deny("patch", "workspaces")
    for verb, plural in denied:
        fake.deny(verb, plural)

    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "failed", s["message"]
    reason, name = s["error"]["reason"], s["snapshot"]["name"]
    assert 'may not patch workspaces (apiGroup "kubeflow.org") in namespace team-a' in reason
    assert fake.get(WORKSPACES, WS)["spec"]["paused"] is False
    assert json.loads(await run_cell(jp_serverapp, kid, CHECK)) == before  # the kernels run on
    if denied:
        assert f"the PodSnapshot {name} this pause took could not be deleted (forbidden: the service account may " \
               "not delete podsnapshots" in reason
        assert f"`kubectl delete podsnapshot {name} -n {NS}`" in reason
        assert s["snapshot"]["status"] == "ready" and "left by a failed pause: run `kubectl delete podsnapshot" \
            in s["snapshot"]["why"]
        return
    assert f"the PodSnapshot {name} this pause took was deleted" in reason
    assert s["snapshot"]["status"] == "deleted" and "the pause failed after it" in s["snapshot"]["why"]
    assert await gone(fake, SNAPSHOTS) == [] and await gone(fake, TRIGGERS) == []

    fake.call(fake.emu.denied.clear)  # the Role is fixed: the next pause goes through
    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "paused", s["message"]
    assert s["snapshot"]["status"] == "ready" and s["snapshot"]["name"] != name
    assert [x["metadata"]["name"] for x in fake.all(SNAPSHOTS)] == [s["snapshot"]["name"]]


async def test_a_pause_whose_state_cannot_be_written_after_the_snapshot_takes_the_snapshot_back(
        fake, jp_fetch, jp_serverapp, jp_root_dir):
    """The volume of the state fills up between the snapshot and the release: the pause fails and the kernels run
    on, and the snapshot it took goes too (left Ready, a later Pod start would roll the kernels back to it)."""
    kid, before = await start_session(jp_fetch, jp_serverapp, jp_root_dir)
    store = jp_serverapp.web_app.settings["gkews_lifecycle"].store
    save = store.save

    def full_once_releasing(state):
        if state["phase"] == "releasing" and not full_once_releasing.done:
            full_once_releasing.done = True
            raise OSError(errno.ENOSPC, "No space left on device", store.directory)
        return save(state)
    full_once_releasing.done = False
    store.save = full_once_releasing

    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "failed", s["message"]
    reason = s["error"]["reason"]
    assert "The pause stopped at releasing: OSError" in reason and "No space left on device" in reason, reason
    assert f"The PodSnapshot {s['snapshot']['name']} this pause took was deleted" in reason, reason
    assert await gone(fake, SNAPSHOTS) == [] and await gone(fake, TRIGGERS) == []
    assert fake.get(WORKSPACES, WS)["spec"]["paused"] is False
    assert json.loads(await run_cell(jp_serverapp, kid, CHECK)) == before


@pytest.mark.parametrize("backend_traits", [{"abort_on_snapshot_failure": True, "snapshot_timeout": 1.0}])
async def test_an_aborted_pause_withdraws_its_trigger(fake, jp_fetch, jp_serverapp, jp_root_dir):
    """The snapshot times out and abort_on_snapshot_failure fails the pause: its trigger goes, so that GKE, picking
    it up late, cannot make a Ready snapshot of kernels that run on."""
    fake.hold.set()  # GKE is slow to pick the trigger up
    kid, before = await start_session(jp_fetch, jp_serverapp, jp_root_dir)

    s = await pause_and_wait(jp_fetch)
    assert s["state"] == "failed", s["message"]
    assert "no Ready PodSnapshot 1 s after the trigger" in s["error"]["reason"]
    assert "this pause's trigger gkews-gpu-notebook-" in s["error"]["reason"]
    assert await gone(fake, TRIGGERS) == []
    fake.hold.clear()
    await asyncio.sleep(0.3)  # the fixture would have answered a trigger left behind by now
    assert fake.all(SNAPSHOTS) == []
    assert json.loads(await run_cell(jp_serverapp, kid, CHECK)) == before
