"""One authenticated client for the API server, and failures turned into sentences.

In a Pod the service account is used (in-cluster config); outside, or when a kubeconfig is named, the
kubeconfig. Every failure becomes a KubeError that says what was attempted, on which resource, and what
to do: a 403 names the verb and resource the Role lacks; an unreachable API server names its address.
"""
from __future__ import annotations

import os

from . import SNAPSHOT_GROUP, WORKSPACE_GROUP


class KubeError(Exception):
    """A Kubernetes call failed; str() says which call, why, and the fix."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def transient(self) -> bool:
        """Worth asking again: no answer (a timeout, a reset connection: a Pod just unfrozen after its
        snapshot upload holds dead pooled connections), too many requests, or a server-side error."""
        return self.status is None or self.status == 429 or self.status >= 500


def make_api_client(kubeconfig: str = "", context: str = ""):
    """An ApiClient from the service account (in a Pod, no kubeconfig given) or from a kubeconfig."""
    from kubernetes import client, config

    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    named = [p for p in path.split(os.pathsep) if p]  # KUBECONFIG may list several files
    if named and not any(os.path.isfile(os.path.expanduser(p)) for p in named):
        # the client says "Invalid kube-config file. No configuration found." for a file that is not there
        raise KubeError(f"the kubeconfig {path} does not exist; pass --kubeconfig with the path of an existing "
                        f"kubeconfig file, or set KUBECONFIG to one")
    try:
        if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=path or None, context=context or None,
                                    client_configuration=configuration)
    except (config.ConfigException, OSError, TypeError) as exc:
        where = path or "~/.kube/config"
        raise KubeError(f"no Kubernetes credentials: not in a Pod with a service account, and the kubeconfig "
                        f"{where} could not be loaded ({exc}); pass --kubeconfig or set KUBECONFIG") from None
    configuration.retries = 1  # an unreachable API server is reported quickly, not after minutes
    return client.ApiClient(configuration)


def explain(exc: Exception, verb: str, resource: str, namespace: str, name: str = "", host: str = "") -> KubeError:
    """Turn an exception of the kubernetes client into a KubeError that names the problem and the fix."""
    from kubernetes.client.exceptions import ApiException

    target = f"{resource}/{name}" if name else resource
    if isinstance(exc, ApiException):
        detail = _message(exc)
        if exc.status == 403:
            group = _group_of(resource)
            return KubeError(
                f"forbidden: the service account may not {verb} {resource} (apiGroup \"{group}\") in namespace "
                f"{namespace}: add the verb \"{verb}\" on \"{resource}\" to its Role (see deploy/rbac.yaml). "
                f"API server said: {detail}", 403)
        if exc.status == 401:
            return KubeError(f"unauthorized: the API server rejected our credentials when trying to {verb} {target} "
                             f"({detail}); refresh the kubeconfig or the service account token", 401)
        if exc.status == 404:
            return KubeError(f"not found: {target} in namespace {namespace} ({detail})", 404)
        return KubeError(f"{verb} {target} in namespace {namespace} failed: HTTP {exc.status} {exc.reason}: {detail}",
                         exc.status)
    cause = getattr(exc, "reason", None) or exc  # urllib3's MaxRetryError wraps the socket error
    detail = "connection refused" if "Connection refused" in str(cause) else f"{type(cause).__name__}: {cause}"[:200]
    return KubeError(f"the Kubernetes API server {host or ''} is unreachable ({detail}) while trying "
                     f"to {verb} {target} in namespace {namespace}; check the network and the API address", None)


def _group_of(resource: str) -> str:
    if resource.startswith("podsnapshot"):
        return SNAPSHOT_GROUP
    if resource.startswith("workspace"):
        return WORKSPACE_GROUP
    return ""


def _message(exc) -> str:
    import json
    try:
        return json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)
