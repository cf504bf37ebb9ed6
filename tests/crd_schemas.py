"""The published CRD schemas (tests/crd_facts/*.json, each naming its source repository, path and commit),
applied the way the API server applies them to what a client sends:

1. defaults are filled in first (the CEL rules see them: `minProbeIntervalSeconds` is 300 when left out);
2. the structural schema is checked with `jsonschema`, unknown fields included (kubectl's default
   `--validate=strict` and the server's strict field validation reject them; without it they are pruned);
3. the CEL rules (`x-kubernetes-validations`) that a body can break run as small Python checks, one per
   rule, named after it. A rule met in a body with no check here is an error of this module, not a pass.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema

FACTS = Path(__file__).resolve().parent / "crd_facts"
CRDS = {  # plural -> the facts file (its CRD name)
    "workspaces": "workspaces.kubeflow.org", "workspacekinds": "workspacekinds.kubeflow.org",
    "podsnapshotpolicies": "podsnapshotpolicies.podsnapshot.gke.io",
    "podsnapshotmanualtriggers": "podsnapshotmanualtriggers.podsnapshot.gke.io",
    "podsnapshots": "podsnapshots.podsnapshot.gke.io",
    "podsnapshotstorageconfigs": "podsnapshotstorageconfigs.podsnapshot.gke.io",
}
KINDS = {"Workspace": "workspaces", "WorkspaceKind": "workspacekinds", "PodSnapshotPolicy": "podsnapshotpolicies",
         "PodSnapshotManualTrigger": "podsnapshotmanualtriggers", "PodSnapshot": "podsnapshots",
         "PodSnapshotStorageConfig": "podsnapshotstorageconfigs"}


def facts(plural: str) -> dict:
    return json.loads((FACTS / f"{CRDS[plural]}.json").read_text())


# -- the CEL rules, one check each (self: the value at the rule's node; old: its previous value or None) ----------
def _has(value: dict, key: str) -> bool:
    return isinstance(value, dict) and key in value


def exactly_one_of_pod_exec_or_jupyter(self, old) -> bool:
    return _has(self, "podExec") != _has(self, "jupyter")


def min_probe_interval_at_most_probe_interval(self, old) -> bool:
    return self["minProbeIntervalSeconds"] <= self["probeIntervalSeconds"]


def jupyter_last_activity_is_true(self, old) -> bool:
    return self.get("lastActivity") is True


def exactly_one_of_url_or_config_map(self, old) -> bool:
    return _has(self, "url") != _has(self, "configMap")


def effect_has_pause_workspace(self, old) -> bool:
    return _has(self, "pauseWorkspace")


def immutable(self, old) -> bool:  # a transition rule: checked on update only
    return old is None or self == old


CEL_CHECKS = {
    "!(has(self.podExec) && has(self.jupyter)) && (has(self.podExec) || has(self.jupyter))":
        exactly_one_of_pod_exec_or_jupyter,
    "self.minProbeIntervalSeconds <= self.probeIntervalSeconds": min_probe_interval_at_most_probe_interval,
    "has(self.lastActivity) && self.lastActivity": jupyter_last_activity_is_true,
    "!(has(self.url) && has(self.configMap)) && (has(self.url) || has(self.configMap))":
        exactly_one_of_url_or_config_map,
    "has(self.pauseWorkspace)": effect_has_pause_workspace,
    "self == oldSelf": immutable,
}


# -- structural schema -> JSON Schema ---------------------------------------------------------------------------
def _json_schema(node):
    if isinstance(node, list):
        return [_json_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False  # strict field validation: an unknown field is an error
    return out


def _defaulted(value, node):
    """The value with the schema's defaults filled in where its parent object exists, as the API server does."""
    if isinstance(value, dict) and node.get("type") == "object":
        out = dict(value)
        for key, sub in (node.get("properties") or {}).items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = _defaulted(out[key], sub)
        return out
    if isinstance(value, list) and node.get("items"):
        return [_defaulted(v, node["items"]) for v in value]
    return value


def _cel(value, old, node, path: str, errors: list[str]) -> None:
    for rule in node.get("x-kubernetes-validations") or []:
        check = CEL_CHECKS.get(rule["rule"])
        if check is None:
            errors.append(f"{path}: CEL rule {rule['rule']!r} has no check in tests/crd_schemas.py")
        elif not check(value, old):
            errors.append(f"{path}: {rule.get('message') or rule['rule']} (CEL rule {check.__name__})")
    if isinstance(value, dict) and node.get("type") == "object":
        for key, sub in (node.get("properties") or {}).items():
            if key in value:
                _cel(value[key], old.get(key) if isinstance(old, dict) else None, sub, f"{path}.{key}".lstrip("."),
                     errors)
    elif isinstance(value, list) and node.get("items"):
        for i, item in enumerate(value):
            _cel(item, None, node["items"], f"{path}[{i}]", errors)


def errors(obj: dict, old: dict | None = None, plural: str | None = None) -> list[str]:
    """Why the API server would reject this object (a create, or an update from `old`): [] when it accepts it.
    status is left out: it is a subresource, and writes to the main resource do not change it."""
    plural = plural or KINDS[obj.get("kind", "")]
    schema = facts(plural)["openAPIV3Schema"]
    obj = {k: v for k, v in obj.items() if k != "status"}
    old = None if old is None else {k: v for k, v in old.items() if k != "status"}
    obj, old = _defaulted(obj, schema), None if old is None else _defaulted(old, schema)
    found = [f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
             for e in jsonschema.Draft7Validator(_json_schema(schema)).iter_errors(obj)]
    _cel(obj, old, schema, "", found)
    return sorted(found)


def status_errors(obj: dict, plural: str) -> list[str]:
    """Why GKE's own status writes would be refused: the fixture's conditions must have the CRD's shape."""
    schema = facts(plural)["openAPIV3Schema"]["properties"]["status"]
    return sorted(f"status.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
                  for e in jsonschema.Draft7Validator(_json_schema(schema)).iter_errors(obj.get("status") or {}))
