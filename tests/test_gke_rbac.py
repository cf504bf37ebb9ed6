"""deploy/rbac.yaml grants what the code uses and nothing more: every request the in-Pod backend and the
outside-the-Pod CLI send to the (emulated) API server is allowed by their Role, and every verb a Role grants
is one of them. A verb added to the code without the Role would be a 403 in a real cluster."""
from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from gke_controller import FakeGke
from test_gke_cli import COMMAND
from test_gke_k8s import backend

RBAC = Path(__file__).resolve().parents[1] / "deploy" / "rbac.yaml"


def granted(*names: str) -> set[tuple[str, str]]:
    """(verb, resource) pairs that the Roles or ClusterRoles with these names grant."""
    pairs = set()
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc and doc["kind"] in ("Role", "ClusterRole") and doc["metadata"]["name"] in names:
            for rule in doc["rules"]:
                pairs |= {(verb, resource) for verb in rule["verbs"] for resource in rule["resources"]}
    return pairs


def used(fake) -> set[tuple[str, str]]:
    return {(verb, plural) for verb, plural, _ in fake.calls()}


@pytest.fixture
def fake():
    cluster = FakeGke().start()
    yield cluster
    cluster.stop()


def test_the_backend_in_the_pod_needs_exactly_its_role(fake, tmp_path):
    b = backend(fake, tmp_path, keep_snapshots=0)  # snapshot_mode auto: reads the WorkspaceKind too

    async def a_pause_then_cleanup():
        snapshot = await b.snapshot([])
        assert snapshot["status"] == "ready", snapshot
        assert await b.restored() is None  # the same Pod: not restored
        await b.release([])
        return await b.cleanup()
    removed = asyncio.run(a_pause_then_cleanup())
    assert [item["kind"] for item in removed] == ["PodSnapshot", "PodSnapshotManualTrigger", "PodSnapshotPolicy"]
    role = granted("jupyter-gkews", "jupyter-gkews-read-workspacekinds")
    assert used(fake) <= role, f"calls the Role does not grant: {used(fake) - role}"
    assert role <= used(fake), f"the Role grants verbs the code never uses: {role - used(fake)}"


def test_the_cli_outside_the_pod_needs_exactly_its_role(fake, tmp_path):
    kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    for args in (["status"], ["pause"], ["status"], ["resume"], ["status"]):
        p = subprocess.run([COMMAND, *args, "--workspace", "gpu-notebook", "--kubeconfig", kubeconfig],
                           capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    role = granted("jupyter-gkews-cli")
    assert used(fake) <= role, f"calls the CLI's Role does not grant: {used(fake) - role}"
    assert role <= used(fake), f"the CLI's Role grants verbs the CLI never uses: {role - used(fake)}"
