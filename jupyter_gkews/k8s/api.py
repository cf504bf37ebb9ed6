"""A thin, blocking facade over the official client: the handful of calls the backend and the CLI make,
each one translated into a KubeError that names the verb and resource when it fails."""
from __future__ import annotations

import time

from . import SNAPSHOT_GROUP, SNAPSHOT_VERSION, WORKSPACE_GROUP, WORKSPACE_VERSION, WORKSPACES, labels
from .client import SERVICE_ACCOUNT, explain, make_api_client

_GROUPS = {"podsnapshot": (SNAPSHOT_GROUP, SNAPSHOT_VERSION), "workspace": (WORKSPACE_GROUP, WORKSPACE_VERSION)}
TIMEOUT = (5, 30)  # seconds to connect, to read: one slow call must not hang a pause
#: answers of an API server that is busy or restarting, worth a second try (not a timeout: that took 30 s already)
BUSY = (429, 500, 502, 503, 504)
READ_TRIES = 3


def _gv(plural: str) -> tuple[str, str]:
    for prefix, gv in _GROUPS.items():
        if plural.startswith(prefix):
            return gv
    raise ValueError(f"unknown resource {plural}")


class Kube:
    def __init__(self, namespace: str, kubeconfig: str = "", context: str = "", api_client=None,
                 caller: tuple[str, str] = SERVICE_ACCOUNT):
        from kubernetes import client

        self.namespace = namespace
        self.caller = caller
        self.api_client = api_client or make_api_client(kubeconfig, context)
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.host = self.api_client.configuration.host

    def _call(self, verb: str, resource: str, name: str, fn, *args, **kwargs):
        tries = READ_TRIES if verb in ("get", "list") else 1
        for attempt in range(tries):
            try:
                return fn(*args, _request_timeout=TIMEOUT, **kwargs)
            except Exception as exc:  # every failure is named: verb, resource, namespace
                error = explain(exc, verb, resource, self.namespace, name, self.host, self.caller)
                if error.status not in BUSY or attempt == tries - 1:
                    raise error from None
                time.sleep(0.5 * (attempt + 1))  # a read changes nothing: one 503 or 429 is asked again

    # -- pods ---------------------------------------------------------------------------------------
    def get_pod(self, name: str) -> dict:
        pod = self._call("get", "pods", name, self.core.read_namespaced_pod, name, self.namespace)
        return self.api_client.sanitize_for_serialization(pod)

    def list_pods(self, label: str, value: str) -> list[dict]:
        # kmock ignores label selectors; a real API server applies them. Filter here too, so both agree.
        pods = self._call("list", "pods", "", self.core.list_namespaced_pod, self.namespace,
                          label_selector=f"{label}={value}")
        items = self.api_client.sanitize_for_serialization(pods).get("items", [])
        return [p for p in items if labels(p).get(label) == value]

    # -- custom objects -------------------------------------------------------------------------------
    def get(self, plural: str, name: str, namespaced: bool = True) -> dict:
        group, version = _gv(plural)
        if not namespaced:
            return self._call("get", plural, name, self.custom.get_cluster_custom_object, group, version, plural, name)
        return self._call("get", plural, name, self.custom.get_namespaced_custom_object,
                          group, version, self.namespace, plural, name)

    def find(self, plural: str, name: str, namespaced: bool = True) -> dict | None:
        """get, but None when it does not exist."""
        from .client import KubeError
        try:
            return self.get(plural, name, namespaced)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, plural: str, label_selector: str = "") -> list[dict]:
        group, version = _gv(plural)
        found = self._call("list", plural, "", self.custom.list_namespaced_custom_object,
                           group, version, self.namespace, plural, label_selector=label_selector)
        return found.get("items", [])

    def create(self, plural: str, body: dict) -> dict:
        group, version = _gv(plural)
        return self._call("create", plural, body["metadata"]["name"], self.custom.create_namespaced_custom_object,
                          group, version, self.namespace, plural, body)

    def patch(self, plural: str, name: str, body) -> dict:
        """A list is sent as a JSON Patch, a dict as a merge patch (the client's default for custom objects:
        a list sent as that would be refused by the API server, which decodes by Content-Type)."""
        group, version = _gv(plural)
        kind = "application/json-patch+json" if isinstance(body, list) else "application/merge-patch+json"
        return self._call("patch", plural, name, self.custom.patch_namespaced_custom_object,
                          group, version, self.namespace, plural, name, body, _content_type=kind)

    def delete(self, plural: str, name: str) -> None:
        group, version = _gv(plural)
        self._call("delete", plural, name, self.custom.delete_namespaced_custom_object,
                   group, version, self.namespace, plural, name)

    def workspace(self, name: str) -> dict:
        return self.get(WORKSPACES, name)
