"""`jupyter gkews status|pause|resume --workspace NAME [--namespace NS]`: a GKE Workspace seen and driven
from outside its Pod (a laptop with a kubeconfig), for the platform team and the user.

status says whether the Workspace is paused, pausing (with "snapshot in progress" while the GKE Workspaces
snapshot add-on holds the pause), waiting for capacity (its Pod Pending and Unschedulable, with the
scheduler's message), starting, restoring or ready, and its last Pod snapshot with its age. pause and resume
set spec.paused; both are idempotent, pause refuses while the add-on is still snapshotting an earlier pause,
and resume refuses to start a second restore while one is pending. pause also refuses a running Workspace
whose Pod the add-on does not snapshot (nothing would save its kernels' memory) unless --discard-kernel-state.
"""
from __future__ import annotations

import json
import sys

from jupyter_core.application import base_aliases, base_flags
from traitlets import Bool, Unicode

from .. import __version__
from ..k8s import ADDON_ENABLED_ANNOTATION
from ..k8s.client import KubeError
from .strict import StrictApp

EXIT_ERROR, EXIT_REFUSED, EXIT_INTERRUPTED = 1, 3, 130

aliases = {**base_aliases, "workspace": "WorkspaceCommand.workspace", "namespace": "WorkspaceCommand.namespace",
           "kubeconfig": "WorkspaceCommand.kubeconfig", "context": "WorkspaceCommand.context"}
flags = {**base_flags, "json": ({"WorkspaceCommand": {"json": True}}, "Print the result as JSON.")}


class WorkspaceCommand(StrictApp):
    version = __version__
    aliases = aliases
    flags = flags

    workspace = Unicode("", config=True, help="The Workspace's name (required).")
    namespace = Unicode("", config=True, help="Its namespace (default: the kubeconfig context's, else 'default').")
    kubeconfig = Unicode("", config=True, help="The kubeconfig (default: $KUBECONFIG or ~/.kube/config).")
    context = Unicode("", config=True, help="The kubeconfig context (default: the current one).")
    json = Bool(False, config=True, help="Print JSON instead of text.")

    def kube(self):
        from ..k8s.api import Kube
        from ..k8s.client import KUBECONFIG_USER, default_namespace, make_api_client

        if not self.workspace:
            self.fail("say which Workspace: --workspace NAME [--namespace NS]", 2)
        api_client = make_api_client(self.kubeconfig, self.context, in_cluster_first=False)
        namespace = self.namespace or default_namespace(self.kubeconfig, self.context, in_cluster_first=False)
        return Kube(namespace, api_client=api_client, caller=KUBECONFIG_USER)

    def fail(self, message: str, code: int = EXIT_ERROR, payload: dict | None = None) -> None:
        """The message on stderr, and with --json the payload with `reason` (and `refused` for exit code 3) on
        stdout, so that a script reading stdout has its answer whatever happened."""
        if self.json:
            print(json.dumps({"workspace": self.workspace, **(payload or {}), "reason": message,
                              "refused": code == EXIT_REFUSED}, indent=2))
        print(f"jupyter gkews {self.name.split('-')[-1]}: {message}", file=sys.stderr)
        self.exit(code)

    def show(self, payload: dict, text: str) -> None:
        print(json.dumps(payload, indent=2) if self.json else text)

    def start(self) -> None:
        try:
            self.run()
        except KubeError as exc:
            self.fail(str(exc) + (self._where() if exc.status == 404 and "workspaces/" in str(exc) else ""))
        except KeyboardInterrupt:
            self.fail("interrupted; a change asked for may or may not have reached the API server: `jupyter gkews "
                      "status` says where the Workspace stands", EXIT_INTERRUPTED)

    def _where(self) -> str:
        """Where the namespace of a Workspace not found came from, and how to name another."""
        origin = ("--namespace" if self.namespace else f"the kubeconfig context {self.context!r}" if self.context
                  else "the kubeconfig's current context (or is 'default', where it names none)")
        return (f"; that namespace came from {origin}: pass --namespace with the one the Workspace is in (`kubectl "
                "get workspaces -A` lists them)")

    def run(self) -> None:
        raise NotImplementedError


def describe_text(d: dict) -> str:
    state = d["state"] + (" (snapshot in progress)" if d.get("snapshot_in_progress") else
                          " (snapshot failed)" if d.get("snapshot_failed") else "")
    lines = [f"Workspace {d['namespace']}/{d['workspace']}: {state}", f"  {d['message']}"]
    if d.get("pod"):
        lines.append(f"  Pod: {d['pod']}")
    snap = d.get("last_snapshot")
    lines.append(f"  last snapshot: {snap['name']} ({'Ready' if snap['ready'] else 'not Ready'}, {snap['age']})"
                 if snap else f"  last snapshot: unknown ({d['snapshots_unreadable']})" if d.get("snapshots_unreadable")
                 else "  last snapshot: none")
    return "\n".join(lines)


class StatusCommand(WorkspaceCommand):
    name = "jupyter-gkews-status"
    description = "Is the Workspace paused, waiting for capacity, restoring or ready? And its last snapshot."

    def run(self) -> None:
        from ..k8s.workspace import describe
        d = describe(self.kube(), self.workspace)
        self.show(d, describe_text(d))


class PauseCommand(WorkspaceCommand):
    name = "jupyter-gkews-pause"
    description = ("Pause the Workspace (spec.paused: true): its Pod stops and the GPU node is released. Needs the "
                   "GKE Workspaces snapshot add-on, which snapshots the Pod first; without it the kernels' memory "
                   "would be lost, so it is refused unless --discard-kernel-state (inside the session, the Pause "
                   "button checkpoints them first). Refused while the add-on is still snapshotting an earlier pause.")
    flags = {**flags, "discard-kernel-state": (
        {"PauseCommand": {"discard_kernel_state": True}},
        "Pause even without the snapshot add-on, as Kubeflow's Stop does: what the kernels hold in memory is lost.")}

    discard_kernel_state = Bool(False, config=True, help="Pause without the snapshot add-on: the kernels' memory is "
                                "lost when the Pod stops.")

    def run(self) -> None:
        from ..k8s import WORKSPACE_LABEL
        from ..k8s.workspace import (PauseInProgress, addon_cannot_snapshot, addon_enabled, current_pod, describe,
                                     set_paused)
        kube = self.kube()
        ws = kube.workspace(self.workspace)
        pod = current_pod(ws, kube.list_pods(WORKSPACE_LABEL, self.workspace))
        running = pod is not None and (pod.get("status") or {}).get("phase") == "Running"
        snapshotted = running and addon_enabled(ws, pod)
        # as Kubeflow's Stop: the running Pod goes with its kernels, and nothing saved them
        loses = running and not snapshotted and not (ws.get("spec") or {}).get("paused")
        payload = {"workspace": self.workspace, "snapshot_on_pause": snapshotted, "warning": None}
        cannot = addon_cannot_snapshot(pod, pod["metadata"]["name"]) if snapshotted else None
        refused = {**payload, "paused": False, "changed": False}
        if cannot:  # --discard-kernel-state too: the add-on would take that pause and hold it
            self.fail(f"{cannot}. Nothing was changed", EXIT_REFUSED, refused)
        if loses and not self.discard_kernel_state:
            reason = (f"the GKE Workspaces snapshot add-on is not enabled for the Workspace {kube.namespace}/"
                      f"{self.workspace}, so a pause from here takes no Pod snapshot and no checkpoint: what its "
                      "kernels hold in memory (variables, models on the GPU) would be lost when the Pod stops. "
                      "Nothing was changed. Pause from inside the session instead (the Pause button, or POST "
                      "gkews/pause), which checkpoints every kernel first; or enable the add-on for this Workspace "
                      f'(annotation {ADDON_ENABLED_ANNOTATION}: "true") while it is paused: its next Pod runs in '
                      "gVisor, which the add-on's snapshots need; or, to stop it as Kubeflow's Stop does and lose "
                      "that memory, pass --discard-kernel-state")
            self.fail(reason, EXIT_REFUSED, refused)
        try:
            changed = set_paused(kube, self.workspace, True)
        except PauseInProgress as exc:
            d = describe(kube, self.workspace)
            self.fail(d["message"] if d["snapshot_failed"] else
                      f"{exc}; not asking again. Follow it with `jupyter gkews status`", EXIT_REFUSED, refused)
            return
        if changed and loses:
            payload["warning"] = ("paused without a Pod snapshot or checkpoint (--discard-kernel-state): what the "
                                  "kernels held in memory is lost when the Pod stops")
            print(f"jupyter gkews pause: warning: {payload['warning']}", file=sys.stderr)
        self.show({**payload, "paused": True, "changed": changed},
                  f"Workspace {kube.namespace}/{self.workspace}: "
                  + ("pause requested" if changed else "already paused; nothing to do"))


class ResumeCommand(WorkspaceCommand):
    name = "jupyter-gkews-resume"
    description = ("Resume the Workspace (spec.paused: false). Idempotent; refused while a resume is still "
                   "pending (waiting for capacity, starting or restoring).")

    def run(self) -> None:
        from ..k8s.workspace import describe, set_paused
        kube = self.kube()
        d = describe(kube, self.workspace)
        if d["state"] in ("waiting-for-capacity", "starting", "restoring"):
            self.fail(f"a resume of {self.workspace} is already pending ({d['state']}: {d['message']}); not starting "
                      "a second one. Wait for it, or `jupyter gkews status` to follow it", EXIT_REFUSED, d)
        if d["snapshot_in_progress"] or d["snapshot_failed"]:  # spec.paused is false already: nothing to set
            self.fail(f"{self.workspace} is pausing, not paused: {d['message']}"
                      + ("" if d["snapshot_failed"] else "; resume it once it is paused"), EXIT_REFUSED, d)
        if d["state"] == "error":
            self.fail(f"{self.workspace} is not paused, and in error: {d['message']}. A resume cannot mend that: "
                      "mend the cause, then `jupyter gkews status`", EXIT_ERROR, d)
        if d["state"] == "ready":
            self.show({**d, "changed": False}, describe_text(d) + "\n  already running; nothing to do")
            return
        changed = set_paused(kube, self.workspace, False)
        try:
            d = describe(kube, self.workspace)
        except KubeError as exc:  # the resume was asked for: its state is for `status` to tell later
            self.show({"workspace": self.workspace, "namespace": kube.namespace, "changed": changed},
                      f"Workspace {kube.namespace}/{self.workspace}: resume requested; its state could not be read "
                      f"just now ({exc}): follow it with `jupyter gkews status`")
            return
        self.show({**d, "changed": changed}, describe_text(d) + ("\n  resume requested" if changed else ""))
