"""deploy/*.yaml and every body the code sends, against the published CRD schemas and the CEL rules that bite.

The schemas are tests/crd_facts/*.json (Kubeflow Notebooks v2 for Workspace and WorkspaceKind, GKE's
podsnapshot.gke.io CRDs as copied in gke-labs/pod-migration; each file names its repository, path and commit).
tests/crd_schemas.py applies them as the API server does: defaults, strict unknown-field checks, CEL rules.
The emulated API server (tests/gke_controller.py) applies the same checks to every write the code makes in
every GKE test; here each is also checked directly, and each check is shown to bite.
"""
from __future__ import annotations

import copy

import crd_schemas
import pytest
import yaml
from gke_controller import DEPLOY, SNAPSHOTS, WORKSPACES, FakeGke
from kmock._internal.dicts import patch_dict
from test_gke_k8s import fire_trigger

from jupyter_gkews.k8s.api import Kube
from jupyter_gkews.k8s.client import KubeError
from jupyter_gkews.k8s.snapshots import policy_body, policy_name, trigger_body
from jupyter_gkews.k8s.workspace import set_paused

WS = "gpu-notebook"


def crd_docs() -> list[tuple[str, dict]]:
    return [(f"{path.name}#{i}", doc) for path in sorted(DEPLOY.rglob("*.yaml"))
            for i, doc in enumerate(yaml.safe_load_all(path.read_text())) if doc and doc["kind"] in crd_schemas.KINDS]


def the_kind() -> dict:
    return copy.deepcopy(next(d for _, d in crd_docs() if d["kind"] == "WorkspaceKind"))


@pytest.fixture
def fake():
    cluster = FakeGke().start()
    yield cluster
    cluster.stop()


def test_every_fact_names_its_source_and_every_cel_rule_in_it_has_a_check():
    for name in crd_schemas.CRDS:
        found = crd_schemas.facts(name)
        assert found["source"]["repository"].startswith("https://github.com/") and len(found["source"]["commit"]) == 40
        assert found["source"]["path"].endswith(".yaml")
        rules = set()

        def walk(node):
            if isinstance(node, dict):
                rules.update(r["rule"] for r in node.get("x-kubernetes-validations") or [])
                for value in node.values():
                    walk(value)
        walk(found["openAPIV3Schema"])
        assert rules <= set(crd_schemas.CEL_CHECKS), f"{name}: no check for {rules - set(crd_schemas.CEL_CHECKS)}"


@pytest.mark.parametrize("where,doc", crd_docs(), ids=[w for w, _ in crd_docs()])
def test_the_manifests_are_accepted(where, doc):
    assert crd_schemas.errors(doc) == []


def test_the_workspacekind_we_used_to_ship_is_refused_for_the_seven_reasons_of_issue_15():
    kind = the_kind()
    template = kind["spec"]["podTemplate"]
    for key in ("ports", "options"):
        del template[key]
    del kind["spec"]["spawner"]["icon"], kind["spec"]["spawner"]["logo"]
    template.update(runtimeClassName="gvisor", resources={"limits": {"nvidia.com/gpu": "1"}})
    template["activityProbe"] = {"jupyter": {"lastActivity": True}, "intervalSeconds": 60}
    assert crd_schemas.errors(kind) == [
        "spec.podTemplate.activityProbe.jupyter: 'portId' is a required property",
        "spec.podTemplate.activityProbe: Additional properties are not allowed ('intervalSeconds' was unexpected)",
        "spec.podTemplate: 'options' is a required property",
        "spec.podTemplate: 'ports' is a required property",
        "spec.podTemplate: Additional properties are not allowed ('resources', 'runtimeClassName' were unexpected)",
        "spec.spawner: 'icon' is a required property",
        "spec.spawner: 'logo' is a required property",
    ]


@pytest.mark.parametrize("change,error", [
    # the minimum defaults to 300
    ({"probeIntervalSeconds": 60}, ": minProbeIntervalSeconds must be less than or equal to probeIntervalSeconds "
                                   "(CEL rule min_probe_interval_at_most_probe_interval)"),
    ({"jupyter": None, "podExec": {"script": "true"}, "probeIntervalSeconds": 300}, None),
    ({"podExec": {"script": "true"}}, ": must specify exactly one of 'podExec' or 'jupyter' "
                                      "(CEL rule exactly_one_of_pod_exec_or_jupyter)"),
    ({"jupyter": {"lastActivity": False, "portId": "jupyterlab"}}, ".jupyter: 'lastActivity' must be true "
                                                                   "(CEL rule jupyter_last_activity_is_true)"),
])
def test_the_activity_probe_rules_bite(change, error):
    kind = the_kind()
    probe = kind["spec"]["podTemplate"]["activityProbe"]
    probe.pop("minProbeIntervalSeconds")
    probe.update({k: v for k, v in change.items() if v is not None})
    for k in [k for k, v in change.items() if v is None]:
        del probe[k]
    found = crd_schemas.errors(kind)
    assert found == ([] if error is None else [f"spec.podTemplate.activityProbe{error}"])


def test_the_icon_rule_and_the_immutable_home_bite():
    kind = the_kind()
    kind["spec"]["spawner"]["icon"]["configMap"] = {"name": "icons", "namespace": "kubeflow", "key": "a.svg",
                                                    "mediaType": "image/svg+xml"}
    assert crd_schemas.errors(kind) == ["spec.spawner.icon: must specify exactly one of 'url' or 'configMap' "
                                        "(CEL rule exactly_one_of_url_or_config_map)"]
    old, new = the_kind(), the_kind()
    new["spec"]["podTemplate"]["volumeMounts"]["home"] = "/home/other"
    assert crd_schemas.errors(new, old) == ["spec.podTemplate.volumeMounts.home: mount path of 'home' is immutable "
                                            "(CEL rule immutable)"]


def test_the_policy_and_trigger_we_create_are_accepted():
    policy = policy_body(policy_name(WS), WS, "gkews-snapshots", "7d")
    assert crd_schemas.errors(policy) == []
    assert policy["spec"]["triggerConfig"] == {"type": "manual", "postCheckpoint": "resume"}
    assert crd_schemas.errors(policy_body(policy_name(WS), WS, "gkews-snapshots", "")) == []
    assert crd_schemas.errors(trigger_body(WS, f"ws-{WS}-x7k2p-0")) == []
    bad = policy_body(policy_name(WS), WS, "gkews-snapshots", "7 days")  # c.GkeBackend.retention in the wrong unit
    assert crd_schemas.errors(bad) == ["spec.retentionConfig.lastAccessTimeout: '7 days' does not match "
                                       "'^(\\\\d+)\\\\s*(y|mo|d|h|min)$'"]


def test_every_workspace_patch_we_send_is_accepted_and_kind_stays_immutable(fake, tmp_path):
    """set_paused's JSON Patches, sent to the emulated API server, which checks the result (422 otherwise)."""
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    before = fake.get(WORKSPACES, WS)
    assert set_paused(kube, WS, True) is True
    after = fake.get(WORKSPACES, WS)
    assert after["spec"]["paused"] is True and crd_schemas.errors(after, before) == []
    sent = [c for c in fake.calls() if c[:2] == ("patch", "workspaces")]
    assert len(sent) == 1
    # the first pause of a Workspace created without spec.paused: an `add` without `test`
    fresh = copy.deepcopy(before)
    del fresh["spec"]["paused"]
    patched = patch_dict(fresh, [{"op": "add", "path": "/spec/paused", "value": True}])
    assert crd_schemas.errors(patched, fresh) == []
    moved = patch_dict(before, [{"op": "replace", "path": "/spec/kind", "value": "other"}])
    assert crd_schemas.errors(moved, before) == ["spec.kind: Workspace 'kind' is immutable (CEL rule immutable)"]
    with pytest.raises(KubeError, match="Workspace 'kind' is immutable"):  # the emulated API server refuses it too
        kube.patch(WORKSPACES.plural, WS, [{"op": "replace", "path": "/spec/kind", "value": "other"}])


def test_the_emulated_api_server_refuses_what_the_schema_refuses(fake, tmp_path):
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    policy = policy_body(policy_name(WS), WS, "gkews-snapshots", "7d")
    del policy["spec"]["selector"]
    with pytest.raises(KubeError, match="HTTP 422 .*'selector' is a required property"):
        kube.create("podsnapshotpolicies", policy)
    trigger = trigger_body(WS, fake.pod)
    trigger["spec"]["pod"] = trigger["spec"].pop("targetPod")
    with pytest.raises(KubeError, match="HTTP 422 .*'targetPod' is a required property"):
        kube.create("podsnapshotmanualtriggers", trigger)


@pytest.mark.parametrize("outcome", ["ready", "trigger-failed", "checkpoint-failed", "storage-failed", "ready-failed"])
def test_the_status_gke_plays_has_the_crds_shape(fake, tmp_path, outcome):
    """The fixture's conditions (type, status, reason, message, lastTransitionTime) fit GKE's status schemas."""
    fake.outcome = outcome
    kube = Kube("team-a", fake.kubeconfig(tmp_path / "kc"))
    kube.create("podsnapshotpolicies", policy_body(policy_name(WS), WS, "gkews-snapshots", "7d"))
    assert crd_schemas.status_errors(fire_trigger(fake, kube), "podsnapshotmanualtriggers") == []
    for snap in fake.all(SNAPSHOTS):
        assert crd_schemas.status_errors(snap, "podsnapshots") == []
