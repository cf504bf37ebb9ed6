"""`jupyter gkews <command>`: the tools that run outside the notebook page.

Each command is its own small Application in a module of this package, registered in
``GkewsCommand.subcommands`` by import string so that `jupyter gkews --help` stays fast and a
command's dependencies (the kubernetes client, for one) load only when it runs.
"""
from __future__ import annotations

import sys

from .._version import __version__
from .strict import StrictApp


class GkewsCommand(StrictApp):
    name = "jupyter-gkews"
    version = __version__
    description = "Pause and resume GPU notebook sessions, and report what it saved."
    takes_arguments = True  # an unknown command is named by start()
    subcommands: dict = {
        # "name": ("jupyter_gkews.cli.<module>.<App>", "one line of help"),
        "status": ("jupyter_gkews.cli.workspace.StatusCommand",
                   "a GKE Workspace from outside its Pod: paused, waiting for capacity, restoring or ready"),
        "pause": ("jupyter_gkews.cli.workspace.PauseCommand",
                  "pause a GKE Workspace (spec.paused: true); refused when no snapshot would keep its kernels"),
        "resume": ("jupyter_gkews.cli.workspace.ResumeCommand",
                   "resume a GKE Workspace; refused while a resume is pending"),
        "report": ("jupyter_gkews.cli.report.ReportApp",
                   "GPU hours released and what resuming cost, from the event log."),
        "cleanup": ("jupyter_gkews.cli.cleanup.CleanupApp",
                    "Remove expired checkpoints, orphan blobs and old snapshots."),
        "resume-test": ("jupyter_gkews.cli.resume_test.ResumeTestApp",
                        "Prove that a notebook really resumes (release checklist)."),
    }

    def start(self) -> None:
        if self.subapp is not None:
            return self.subapp.start()
        names = ", ".join(sorted(self.subcommands)) or "(none)"
        unknown = f"unknown command {self.extra_args[0]!r}. " if self.extra_args else ""
        print(f"{unknown}Say which command to run: jupyter gkews <command> [options]. Commands: {names}. "
              "`jupyter gkews <command> --help` shows a command's options.", file=sys.stderr)
        self.exit(2)


main = GkewsCommand.launch_instance
