"""A cold start after a pause on the GKE backend: the state says paused, but the server and its kernels are
new processes (the Pod was not restored from a snapshot, or the snapshot had failed). The server recovers
at start-up without being asked: kernels for the same notebooks, restored from their checkpoints.

A real `jupyter server` process (tests/serverproc.py) talks over HTTP to kmock's API emulator; GKE's
controllers are played by tests/gke_controller.py. Stopping the server plays "the Pod went away".
"""
from __future__ import annotations

import json
import signal

import pytest
from gke_controller import SNAPSHOTS, TRIGGERS, WORKSPACES, FakeGke
from serverproc import Server
from test_hold import wait_until
from test_lifecycle_restart import SMALL, SMALL_CELL, SMALL_CHECK, SMALL_NAMES, event_names, kill_pids

from jupyter_gkews.k8s.api import Kube

pytestmark = pytest.mark.timeout(600)


def gke_server(tmp_path, fake: FakeGke, monkeypatch) -> Server:
    server = Server(tmp_path)
    config = {"GkewsApp": {"backend_class": "jupyter_gkews.backends.gke.GkeBackend"},
              "GkeBackend": {"poll_interval": 0.1}}
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
    monkeypatch.setenv("KUBECONFIG", fake.pod_kubeconfig(tmp_path / "kubeconfig"))  # as ws-<workspace>
    monkeypatch.setenv("POD_NAME", fake.pod)
    monkeypatch.setenv("POD_NAMESPACE", fake.namespace)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return server


@pytest.mark.parametrize("outcome,why", [
    ("ready", "cold start: this Pod was not restored from a snapshot (GKE started it without the Ready PodSnapshot "),
    ("deleted", "cold start: this Pod was not restored from a snapshot (the PodSnapshot {name} of the pause no "
                "longer exists: it was deleted, or expired, while the Workspace was paused)"),
    ("checkpoint-failed", "cold start after a pause whose Pod snapshot failed (the PodSnapshot "),
])
def test_cold_start_after_pause_restores_from_checkpoints(tmp_path, monkeypatch, outcome, why):
    """The status says why the Pod started cold, and that the snapshot of the pause was not used."""
    fake = FakeGke().start()
    fake.outcome = "ready" if outcome == "deleted" else outcome
    server = gke_server(tmp_path, fake, monkeypatch)
    pids: list[int] = []
    try:
        server.start()
        session = server.open_notebook(SMALL)
        kid = session["kernel"]["id"]
        assert "ready" in server.run_cell(kid, SMALL_CELL)
        before = json.loads(server.run_cell(kid, SMALL_CHECK))
        pids.append(before["pid"])
        assert server.post("gkews/pause")[0] == 202
        s = server.wait_for(("paused", "failed"))
        assert s["state"] == "paused", s["message"]
        name = s["snapshot"].get("name")
        if outcome != "checkpoint-failed":
            assert s["snapshot"]["status"] == "ready" and name
        else:
            assert "the resume will restore the kernels from their application checkpoints" in s["message"]
        assert fake.get(WORKSPACES, fake.workspace)["spec"]["paused"] is True

        server.stop()  # the Workspace paused: the Pod and every process in it went away
        if outcome == "deleted":  # someone deletes the snapshot while the Workspace is paused
            Kube(fake.namespace, fake.kubeconfig(tmp_path / "admin")).delete(SNAPSHOTS.plural, name)
        fake.set_paused(False)  # later someone resumes it; the new Pod starts cold
        server.start()

        s = server.wait_for(("active", "failed"))
        assert s["state"] == "active", s["message"]
        assert s["message"].startswith(why.format(name=name)), s["message"]
        if outcome != "checkpoint-failed":
            assert s["snapshot"]["status"] == "not-used" and s["snapshot"]["name"] == name
            assert s["snapshot"]["why"] in s["message"], s["snapshot"]
        else:
            assert s["snapshot"]["status"] == "failed"
        nb = s["notebooks"][0]
        assert nb["verdict"] == "restored-from-checkpoint" and nb["why_restored"].startswith("a new process")
        assert sorted(nb["restored"]) == SMALL_NAMES and nb["failed"] == {}
        sessions = {x["path"]: x for x in server.get("api/sessions")}
        assert sessions[SMALL]["id"] == session["id"] and sessions[SMALL]["kernel"]["id"] == kid
        after = json.loads(server.run_cell(kid, SMALL_CHECK))
        pids.append(after["pid"])
        assert after.pop("pid") != before.pop("pid") and after == before
        names = event_names(server)
        assert names.index("paused") < names.index("resume-requested") < names.index("resumed")
        assert "recovered-paused" in names
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGKILL)
        kill_pids(pids)
        fake.stop()


def test_a_server_killed_while_waiting_for_the_snapshot_resumes_by_itself_and_withdraws_the_trigger(
        tmp_path, monkeypatch):
    """The server dies (an OOM kill, a container restart) while GKE is still taking the Pod snapshot: the
    container starts again in the same Pod, the Workspace was never paused, the kernels died with the server.
    The new server resumes by itself from the checkpoints, as after a cold start, and withdraws the dead
    pause's trigger, which GKE would otherwise turn into a snapshot that a later Pod start restores."""
    fake = FakeGke().start()
    fake.hold.set()  # GKE has not picked the trigger up yet (a GPU snapshot takes minutes)
    server = gke_server(tmp_path, fake, monkeypatch)
    pids: list[int] = []
    try:
        server.start()
        kid = server.open_notebook(SMALL)["kernel"]["id"]
        assert "ready" in server.run_cell(kid, SMALL_CELL)
        before = json.loads(server.run_cell(kid, SMALL_CHECK))
        pids.append(before["pid"])
        assert server.post("gkews/pause")[0] == 202
        wait_until(lambda: server.get("gkews/status")["phase"] == "snapshotting" and fake.all(TRIGGERS))
        server.signal(signal.SIGKILL)
        kill_pids(pids)  # its kernels go with the container
        server.start()

        s = server.wait_for(("active", "failed"))
        assert s["state"] == "active", s["message"]
        assert s["message"].startswith("the server restarted during the pause, and its kernels stopped with it"), \
            s["message"]
        nb = s["notebooks"][0]
        assert nb["verdict"] == "restored-from-checkpoint" and sorted(nb["restored"]) == SMALL_NAMES
        after = json.loads(server.run_cell(nb["kernel_id"], SMALL_CHECK))
        pids.append(after["pid"])
        assert after.pop("pid") != before.pop("pid") and after == before
        wait_until(lambda: not fake.all(TRIGGERS))
        assert fake.get(WORKSPACES, fake.workspace)["spec"]["paused"] is False  # nothing was released
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGKILL)
        kill_pids(pids)
        fake.stop()
