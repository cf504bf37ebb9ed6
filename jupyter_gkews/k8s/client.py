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


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def make_api_client(kubeconfig: str = "", context: str = "", in_cluster_first: bool = True):
    """An ApiClient from the service account (in a Pod, no kubeconfig given) or from a kubeconfig.

    in_cluster_first=False (the `jupyter gkews` commands) is kubectl's order: a kubeconfig file ($KUBECONFIG or
    ~/.kube/config) where there is one, the Pod's service account only where there is none: in a terminal of the
    Pod itself a user's own kubeconfig is theirs to use."""
    from kubernetes import client, config

    configuration = client.Configuration()
    path = _kubeconfig_path(kubeconfig, in_cluster_first)
    try:
        if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            _check_context(path, context)
            config.load_kube_config(config_file=path or None, context=context or None,
                                    client_configuration=configuration)
    except KubeError:
        raise
    except Exception as exc:  # a ConfigException, a YAML error, a file that is YAML but no kubeconfig
        if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise KubeError(f"no Kubernetes credentials: in a Pod whose service account could not be used ({exc}), "
                            "and no kubeconfig; pass --kubeconfig or set KUBECONFIG") from None
        where = path or "~/.kube/config"
        raise KubeError(f"the kubeconfig {where} could not be loaded ({type(exc).__name__}: {exc}"[:400]
                        + "); pass --kubeconfig with a kubeconfig file (`kubectl config view` shows yours), "
                        "or set KUBECONFIG to one") from None
    configuration.retries = 1  # an unreachable API server is reported quickly, not after minutes
    return client.ApiClient(configuration)


def _kubeconfig_path(kubeconfig: str, in_cluster_first: bool) -> str:
    """The kubeconfig file(s) to load ("" for the service account, or the client's default), checked to exist."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    if not path and not in_cluster_first and os.path.isfile(os.path.expanduser("~/.kube/config")):
        path = os.path.expanduser("~/.kube/config")
    named = [os.path.expanduser(p) for p in path.split(os.pathsep) if p]  # KUBECONFIG may list several files
    if named and not any(os.path.isfile(p) for p in named):
        what = "is a directory" if any(os.path.isdir(p) for p in named) else "does not exist"
        # the client says "Invalid kube-config file. No configuration found." for a file that is not there
        raise KubeError(f"the kubeconfig {path} {what}; pass --kubeconfig with the path of an existing kubeconfig "
                        "file, or set KUBECONFIG to one")
    return path


def _contexts(path: str) -> tuple[list[dict], dict | None]:
    from kubernetes import config
    return config.list_kube_config_contexts(config_file=path or None)


def _check_context(path: str, context: str) -> None:
    """A --context the kubeconfig does not have is named with the ones it has (the client's message, "Expected
    object with name nope in ... contexts list", was taken for a kubeconfig that could not be loaded)."""
    if not context:
        return
    contexts, _ = _contexts(path)
    names = [c.get("name") for c in contexts or []]
    if context not in names:
        raise KubeError(f"the kubeconfig {path or '~/.kube/config'} has no context {context!r} (it has: "
                        f"{', '.join(map(str, names)) or 'none'}); pass --context with one of them "
                        "(`kubectl config get-contexts` lists them)")


def default_namespace(kubeconfig: str = "", context: str = "", in_cluster_first: bool = True) -> str:
    """The namespace kubectl would use: the named (else current) context's, or the Pod's own in a Pod without a
    kubeconfig; "default" otherwise."""
    path = _kubeconfig_path(kubeconfig, in_cluster_first)
    if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            with open(SERVICE_ACCOUNT_NAMESPACE) as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"
    try:
        contexts, active = _contexts(path)
    except Exception:  # make_api_client has said what is wrong with the file
        return "default"
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace") or "default"


#: who makes the calls, and how a refused verb is granted: the server's service account, or a person's kubeconfig
SERVICE_ACCOUNT = ("the service account",
                   "add the verb \"{verb}\" on \"{resource}\" to its Role (see deploy/rbac.yaml)")
KUBECONFIG_USER = ("your kubeconfig's user", "ask the cluster's admins to bind the ClusterRole jupyter-gkews-cli to "
                   "you in this namespace (deploy/rbac.yaml; deploy/examples/cli-rolebinding.yaml is the binding)")


def explain(exc: Exception, verb: str, resource: str, namespace: str, name: str = "", host: str = "",
            caller: tuple[str, str] = SERVICE_ACCOUNT) -> KubeError:
    """Turn an exception of the kubernetes client into a KubeError that names the problem and the fix."""
    from kubernetes.client.exceptions import ApiException

    target = f"{resource}/{name}" if name else resource
    if isinstance(exc, ApiException):
        detail = _message(exc)
        if exc.status == 403:
            group = _group_of(resource)
            who, fix = caller
            return KubeError(
                f"forbidden: {who} may not {verb} {resource} (apiGroup \"{group}\") in namespace {namespace}: "
                f"{fix.format(verb=verb, resource=resource)}. API server said: {detail}", 403)
        if exc.status == 401:
            return KubeError(f"unauthorized: the API server rejected our credentials when trying to {verb} {target} "
                             f"({detail}); refresh the kubeconfig or the service account token", 401)
        if exc.status == 404:
            return KubeError(f"not found: {target} in namespace {namespace} ({detail})", 404)
        return KubeError(f"{verb} {target} in namespace {namespace} failed: HTTP {exc.status} {exc.reason}: {detail}",
                         exc.status)
    if not _network_error(exc):  # an answer the client could not take (a field its model refuses, say)
        return KubeError(f"{verb} {target} in namespace {namespace}: the kubernetes client could not read the API "
                         f"server's answer ({type(exc).__name__}: {exc}"[:400] + "); `kubectl get` shows what the "
                         "API server holds, and a newer kubernetes client may read it", None)
    cause = getattr(exc, "reason", None) or exc  # urllib3's MaxRetryError wraps the socket error
    detail = "connection refused" if "Connection refused" in str(cause) else f"{type(cause).__name__}: {cause}"[:200]
    return KubeError(f"the Kubernetes API server {host or ''} is unreachable ({detail}) while trying "
                     f"to {verb} {target} in namespace {namespace}; check the network and the API address", None)


def _network_error(exc: Exception) -> bool:
    """No answer: a connection refused or reset, a name not resolved, a timeout (urllib3 wraps them all)."""
    from urllib3.exceptions import HTTPError
    return isinstance(exc, (HTTPError, OSError))


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
