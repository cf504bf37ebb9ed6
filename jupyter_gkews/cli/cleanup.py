"""`jupyter gkews cleanup [--dry-run]`: retention of checkpoints, orphan blobs, the backend's snapshots."""
from __future__ import annotations

import asyncio
import json
import os
import re
import sys

from jupyter_core.application import base_aliases, base_flags
from traitlets import Bool

from kernel_state.errors import CheckpointError

from ..cleanup import describe, run_cleanup
from .serverconfig import ROOT_FIX, ServerConfigApp


class CleanupApp(ServerConfigApp):
    name = "jupyter-gkews-cleanup"
    description = ("Remove expired checkpoints (c.GkewsApp.keep_last, max_bytes, max_age_days) and blobs no "
                   "checkpoint uses, and ask the backend to remove what it no longer needs (GKE: this "
                   "Workspace's old PodSnapshots). The newest complete checkpoint of a notebook is never removed.")
    dry_run = Bool(False, config=True, help="Say what would be removed and the bytes it would free; remove nothing.")
    as_json = Bool(False, config=True, help="Print the result as JSON.")
    aliases = {**base_aliases, "checkpoint-root": "GkewsApp.checkpoint_root", "keep-last": "GkewsApp.keep_last",
               "max-bytes": "GkewsApp.max_bytes", "max-age-days": "GkewsApp.max_age_days"}
    flags = {**base_flags, "dry-run": ({"CleanupApp": {"dry_run": True}}, "Remove nothing; say what would go."),
             "json": ({"CleanupApp": {"as_json": True}}, "Print the result as JSON.")}

    def start(self) -> None:
        settings = self.server_settings()
        root = self.checkpoint_root(settings)
        if not os.path.isdir(root):
            what = "is a file, not a directory" if os.path.exists(root) else "that directory does not exist"
            print(f"no checkpoint store at {root}: {what}; {ROOT_FIX}", file=sys.stderr)
            self.exit(2)
        backend = self.backend(settings)
        try:
            report = asyncio.run(run_cleanup(root, backend, keep_last=settings.keep_last,
                                             max_bytes=settings.max_bytes, max_age_days=settings.max_age_days,
                                             dry_run=self.dry_run))
        except ValueError as exc:  # a retention setting out of range
            print(f"{exc}; fix it in jupyter_server_config.py or on the command line", file=sys.stderr)
            self.exit(2)
        except CheckpointError as exc:  # not a store, or a link inside it: the message says what to do
            print(for_this_command(str(exc)), file=sys.stderr)
            self.exit(2)
        print(json.dumps(report, indent=1) if self.as_json else describe(report))
        if report.get("blobs_kept"):  # a damaged manifest kept every unused blob: a cron job must notice
            self.exit(1)


_SETTING = r"GKEWS_CHECKPOINT_ROOT(?: \(c\.GkewsApp\.checkpoint_root\))?"
# the store's fixes name the server's setting; a cleanup is pointed with --checkpoint-root, and pointing it at
# another folder would clean another store: its own words
_FIXES = [(re.compile(rf"[Pp]oint {_SETTING} at an empty or new directory"),
           "give this command the server's checkpoint store with --checkpoint-root=DIR"),
          (re.compile(rf"Point {_SETTING} at a writable directory \(this volume is mounted read-only\)"),
           "Run it where that volume can be written (it is mounted read-only here)"),
          (re.compile(rf", or point {_SETTING} at a writable directory"), " (the server's user)")]


def for_this_command(message: str) -> str:
    for pattern, words in _FIXES:  # in the case of what it replaces ("Point" begins a sentence)
        message = pattern.sub(lambda m, w=words: w[0].upper() + w[1:] if m[0][0].isupper() else w, message)
    return message


main = CleanupApp.launch_instance
