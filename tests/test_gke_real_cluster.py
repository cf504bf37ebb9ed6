"""The GKE flows against a real cluster, so that the first person with one can confirm them in one command.
Runs only when a kubeconfig for one is given (the one skip this suite allows):

    GKEWS_TEST_KUBECONFIG=~/.kube/config GKEWS_TEST_WORKSPACE=my-gpu-notebook [GKEWS_TEST_NAMESPACE=team-a] \
    [GKEWS_TEST_SERVER_URL=https://.../ GKEWS_TEST_SERVER_TOKEN=...] \
    pytest -m gke_cluster tests/test_gke_real_cluster.py -s

The Workspace must run jupyter-gkews (deploy/workspacekind.yaml, deploy/rbac.yaml applied). What it checks,
in the order of docs/gke.md ("What was checked against the published APIs"):

1. the Pod is found by its label and status.podTemplatePod.name (named ws-<workspace>-<random>-0, not
   <workspace>-0) and runs as the Workspace's own service account ws-<workspace>, which the API server lets do
   every verb of the jupyter-gkews ClusterRole in the namespace (a SubjectAccessReview per verb; your kubeconfig
   needs `create subjectaccessreviews`), and nothing is asked of the cluster-scoped WorkspaceKind;
2. the add-on's enablement as jupyter-gkews reads it (auto mode) agrees with what the add-on's Pod webhook did;
3. a pause completes and the Workspace ends Paused with a Ready snapshot (with the add-on: its Checkpointing
   phase shows as `pausing (snapshot in progress)` and a second pause is refused with exit code 3);
4. the snapshot's conditions are printed, so that the condition types and reasons docs/gke.md lists as
   unconfirmed can be confirmed; any Failed/Error one fails the test with its message;
5. a resume comes back `ready`, and with a server URL the verdicts of the notebooks are read back.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

KUBECONFIG = os.environ.get("GKEWS_TEST_KUBECONFIG", "")
WORKSPACE = os.environ.get("GKEWS_TEST_WORKSPACE", "")
NAMESPACE = os.environ.get("GKEWS_TEST_NAMESPACE", "")
SERVER = os.environ.get("GKEWS_TEST_SERVER_URL", "")
TOKEN = os.environ.get("GKEWS_TEST_SERVER_TOKEN", "")
COMMAND = shutil.which("jupyter-gkews", path=str(Path(sys.executable).parent)) or "jupyter-gkews"
RBAC = Path(__file__).resolve().parents[1] / "deploy" / "rbac.yaml"

pytestmark = [pytest.mark.gke_cluster, pytest.mark.timeout(3600),
              pytest.mark.skipif(not (KUBECONFIG and WORKSPACE),
                                 reason="needs a real GKE cluster: set GKEWS_TEST_KUBECONFIG to its kubeconfig and "
                                 "GKEWS_TEST_WORKSPACE to a Workspace that runs jupyter-gkews")]


def gkews(*args: str, code: int | None = 0) -> subprocess.CompletedProcess:
    ns = ["--namespace", NAMESPACE] if NAMESPACE else []
    p = subprocess.run([COMMAND, *args, "--workspace", WORKSPACE, *ns, "--kubeconfig", KUBECONFIG],
                       capture_output=True, text=True, timeout=300)
    if code is not None:
        assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    return p


def status() -> dict:
    return json.loads(gkews("status", "--json").stdout)


def kube():
    from jupyter_gkews.k8s.api import Kube
    from jupyter_gkews.k8s.client import make_api_client
    client = make_api_client(KUBECONFIG)
    return Kube(NAMESPACE or status()["namespace"], api_client=client)


def wait_for(states: tuple[str, ...], timeout: float = 1800, seen_in_between=None) -> dict:
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        d = status()
        if not seen or seen[-1] != d["state"]:
            seen.append(d["state"])
            print(f"{time.strftime('%H:%M:%S')} {d['state']}"
                  f"{' (snapshot in progress)' if d['snapshot_in_progress'] else ''}: {d['message']}")
        if seen_in_between is not None:
            seen_in_between(d)
        if d["state"] in states:
            return d
        assert time.monotonic() < deadline, f"still {d['state']} after {timeout}s ({seen})"
        time.sleep(5)


def server(method: str, path: str) -> dict:
    req = urllib.request.Request(SERVER.rstrip("/") + "/" + path, method=method,
                                 data=b"{}" if method == "POST" else None,
                                 headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"{}")


def test_the_pod_its_service_account_and_the_addon_rules():
    from kubernetes import client

    from jupyter_gkews.k8s import WORKSPACE_LABEL
    from jupyter_gkews.k8s.workspace import addon_enabled, current_pod
    k = kube()
    ws = k.workspace(WORKSPACE)
    pods = k.list_pods(WORKSPACE_LABEL, WORKSPACE)
    pod = current_pod(ws, pods)
    assert pod is not None, f"the Workspace {WORKSPACE} has no running Pod: resume it first"
    recorded = ws["status"]["podTemplatePod"]
    print("Pod:", pod["metadata"]["name"], "service account:", pod["spec"].get("serviceAccountName"), recorded)
    assert pod["metadata"]["name"] == recorded["name"] and pod["metadata"]["name"] != f"{WORKSPACE}-0"
    assert pod["metadata"]["name"].startswith(f"ws-{WORKSPACE}-") and pod["metadata"]["name"].endswith("-0")
    sa = pod["spec"].get("serviceAccountName")
    assert sa == recorded.get("serviceAccountName") == f"ws-{WORKSPACE}"

    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["metadata"]["name"] == "jupyter-gkews")
    authz = client.AuthorizationV1Api(k.api_client)
    for rule in role["rules"]:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
                    user=f"system:serviceaccount:{k.namespace}:{sa}", resource_attributes=client.V1ResourceAttributes(
                        namespace=k.namespace, verb=verb, group=rule["apiGroups"][0], resource=resource)))
                answer = authz.create_subject_access_review(review).status
                assert answer.allowed, f"{sa} may not {verb} {resource}: {answer.reason} (the WorkspaceKind's " \
                    "serviceAccount.clusterRoles must list jupyter-gkews)"

    enabled = addon_enabled(ws, pod)
    gate = any(g.get("conditionType") == "podsnapshot.gke.kubeflow.org/active"
               for g in pod["spec"].get("readinessGates") or [])
    print("add-on enabled (auto mode picks workspace):", enabled, "readiness gate:", gate,
          "runtimeClassName:", pod["spec"].get("runtimeClassName"))
    assert enabled == gate, "jupyter-gkews and the add-on's Pod webhook disagree about this Workspace"
    assert pod["spec"].get("runtimeClassName") == "gvisor", "the Pod does not run in GKE Sandbox: no snapshot possible"


def test_pause_inspect_resume_on_a_real_cluster():
    assert wait_for(("ready",), timeout=600)["state"] == "ready"
    if SERVER:
        assert server("POST", "gkews/pause")["state"] == "pausing"
    else:
        assert "pause requested" in gkews("pause").stdout
    refused = []

    def second_pause_is_refused(d: dict) -> None:
        if d["snapshot_in_progress"] and not refused:  # the add-on's Checkpointing phase
            p = gkews("pause", code=3)
            assert "is already pausing" in p.stderr, p.stderr
            refused.append(p.stderr.strip())
    paused = wait_for(("paused",), seen_in_between=second_pause_is_refused)
    print("second pause while the add-on snapshotted:", refused or "not seen (trigger mode, or too fast)")
    snap = paused["last_snapshot"]
    print("last snapshot:", snap)
    assert snap and snap["ready"], "the Workspace paused without a Ready Pod snapshot"

    found = kube().get("podsnapshots", snap["name"])
    for c in found["status"]["conditions"]:  # what docs/gke.md lists as unconfirmed: the reasons
        print(f"  {c['type']}={c['status']} reason={c.get('reason')!r} message={c.get('message')!r}")
        assert not (c["status"] == "False" and c.get("reason") in ("Failed", "Error")), c

    assert "resume requested" in gkews("resume").stdout
    pending = status()
    if pending["state"] in ("waiting-for-capacity", "starting", "restoring"):
        assert "already pending" in gkews("resume", code=3).stderr  # no second restore
    ready = wait_for(("ready",))
    print(ready["message"])
    if SERVER:
        deadline = time.monotonic() + 900
        while (s := server("GET", "gkews/status"))["state"] != "active":
            assert s["state"] != "failed", s["error"]
            assert time.monotonic() < deadline, s
            time.sleep(5)
        verdicts = {nb["path"]: nb["verdict"] for nb in s["notebooks"]}
        print("verdicts:", verdicts)
        assert verdicts and all(v in ("live-verified", "restored-from-checkpoint") for v in verdicts.values())
