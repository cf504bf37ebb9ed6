"""deploy/rbac.yaml grants what the code uses and nothing more, to the identities a real cluster uses.

The fixture enforces RBAC from the manifests: the in-Pod backend runs as the Workspace's own service account
`ws-<workspace>` (as Kubeflow Notebooks runs it), which holds the `jupyter-gkews` ClusterRole only through the
RoleBinding the Workspace controller makes for each of the WorkspaceKind's `serviceAccount.clusterRoles`
(deploy/workspacekind.yaml). The CLI runs as a user bound in the namespace. Every request either is allowed
or fails the test with the API server's 403, and every verb a role grants is one the code uses.
"""
from __future__ import annotations

import asyncio
import os
import subprocess

import pytest
import yaml
from gke_controller import DEPLOY, SNAPSHOTS, FakeGke
from test_gke_cli import COMMAND
from test_gke_k8s import backend

RBAC = DEPLOY / "rbac.yaml"
CLI_BINDING = DEPLOY / "examples" / "cli-rolebinding.yaml"  # the example binding of a CLI user
CLI_USER = "alice@example.com"


def manifests() -> list[dict]:
    return [d for path in (RBAC, CLI_BINDING) for d in yaml.safe_load_all(path.read_text()) if d]


def granted(*names: str) -> set[tuple[str, str]]:
    """(verb, resource) pairs that the Roles or ClusterRoles with these names grant."""
    pairs = set()
    for doc in manifests():
        if doc["kind"] in ("Role", "ClusterRole") and doc["metadata"]["name"] in names:
            for rule in doc["rules"]:
                pairs |= {(verb, resource) for verb in rule["verbs"] for resource in rule["resources"]}
    return pairs


def used(fake, user: str) -> set[tuple[str, str]]:
    return {(verb, plural) for verb, plural, _ in fake.calls(user)}


@pytest.fixture
def fake():
    cluster = FakeGke(rbac=manifests()).start()
    yield cluster
    cluster.stop()


def test_the_backend_in_the_pod_needs_exactly_its_clusterrole(fake, tmp_path):
    kind = next(d for d in yaml.safe_load_all((DEPLOY / "workspacekind.yaml").read_text())
                if d["kind"] == "WorkspaceKind")
    assert kind["spec"]["podTemplate"]["serviceAccount"]["clusterRoles"] == [{"name": "jupyter-gkews"}]
    b = backend(fake, tmp_path, keep_snapshots=0)  # snapshot_mode auto, as the Pod's service account ws-gpu-notebook

    async def a_pause_then_cleanup():
        snapshot = await b.snapshot([])
        assert snapshot["status"] == "ready", snapshot
        assert await b.restored() is None  # the same Pod: not restored
        await b.release([])
        removed = await b.cleanup()
        for _ in range(200):  # GKE finalizes the deleted snapshot; the next cleanup retires the policy
            if not fake.all(SNAPSHOTS):
                break
            await asyncio.sleep(0.05)
        return removed + await b.cleanup()
    removed = asyncio.run(a_pause_then_cleanup())
    assert [item["kind"] for item in removed] == ["PodSnapshot", "PodSnapshotManualTrigger", "PodSnapshotPolicy"]
    role = granted("jupyter-gkews")
    assert used(fake, fake.pod_user) == role, "the ClusterRole and the calls differ"
    assert not any(plural == "workspacekinds" for _, plural, _ in fake.calls())  # nothing cluster-scoped


def test_a_service_account_without_the_kinds_clusterrole_is_refused_by_name(tmp_path):
    """The model bites: a Pod whose WorkspaceKind does not list the ClusterRole gets the API server's 403."""
    fake = FakeGke(rbac=manifests()).start()
    try:
        fake.call(lambda: fake.emu.objects[__import__("gke_controller").KINDS, None, fake.kind].patch(
            {"spec": {"podTemplate": {"serviceAccount": {"clusterRoles": []}}}}))
        with pytest.raises(Exception, match=f'forbidden: the service account may not get pods .*User "{fake.pod_user}" '
                                            "cannot get resource"):
            asyncio.run(backend(fake, tmp_path).connect())
    finally:
        fake.stop()


def test_the_cli_outside_the_pod_needs_exactly_its_clusterrole(fake, tmp_path):
    """Its calls on a plain Workspace, and on one whose add-on snapshot failed (status reads the add-on's trigger
    to say so)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    addon = FakeGke(rbac=manifests(), addon=True).start()
    addon.outcome = "trigger-failed"
    try:
        for cluster, steps in ((fake, (["status"], ["pause", "--discard-kernel-state"], ["status"], ["resume"],
                                       ["status"])),
                               (addon, (["pause"], ["status"]))):
            kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig", user=CLI_USER)
            for args in steps:
                p = subprocess.run([COMMAND, *args, "--workspace", "gpu-notebook", "--kubeconfig", kubeconfig],
                                   capture_output=True, text=True, env=env, timeout=120)
                assert p.returncode == 0, (args, p.stdout, p.stderr)
        assert used(fake, CLI_USER) | used(addon, CLI_USER) == granted("jupyter-gkews-cli"), \
            "the CLI's ClusterRole and its calls differ"
    finally:
        addon.stop()
