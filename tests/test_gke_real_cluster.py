"""The same pause / inspect / resume flow against a real GKE cluster. Runs only when a kubeconfig for one is
given (the one skip this suite allows):

    GKEWS_TEST_KUBECONFIG=~/.kube/config GKEWS_TEST_WORKSPACE=my-gpu-notebook [GKEWS_TEST_NAMESPACE=team-a] \
    [GKEWS_TEST_SERVER_URL=https://.../ GKEWS_TEST_SERVER_TOKEN=...] \
    pytest -m gke_cluster tests/test_gke_real_cluster.py

With a server URL (the Workspace's Jupyter server reached through its ingress, which survives the Pod), the
pause is asked of the extension in the Pod (checkpoint, snapshot, Workspace pause) and the verdicts are read
back after the resume; without it the Workspace is paused and resumed from outside with the CLI only.
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

KUBECONFIG = os.environ.get("GKEWS_TEST_KUBECONFIG", "")
WORKSPACE = os.environ.get("GKEWS_TEST_WORKSPACE", "")
NAMESPACE = os.environ.get("GKEWS_TEST_NAMESPACE", "")
SERVER = os.environ.get("GKEWS_TEST_SERVER_URL", "")
TOKEN = os.environ.get("GKEWS_TEST_SERVER_TOKEN", "")
COMMAND = shutil.which("jupyter-gkews", path=str(Path(sys.executable).parent)) or "jupyter-gkews"

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


def wait_for(states: tuple[str, ...], timeout: float = 1800) -> dict:
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        d = status()
        if not seen or seen[-1] != d["state"]:
            seen.append(d["state"])
            print(f"{time.strftime('%H:%M:%S')} {d['state']}: {d['message']}")
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


def test_pause_inspect_resume_on_a_real_cluster():
    assert wait_for(("ready",), timeout=600)["state"] == "ready"
    if SERVER:
        assert server("POST", "gkews/pause")["state"] == "pausing"
    else:
        assert "pause requested" in gkews("pause").stdout
    paused = wait_for(("paused",))
    print("last snapshot:", paused["last_snapshot"])

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
