"""`jupyter gkews report`: GPU hours released and what resuming cost, from the event log."""
from __future__ import annotations

import json
import math
import os
import stat
import sys

from kernel_state.errors import CheckpointError
from kernel_state.sizes import human_bytes
from kernel_state.store import Store
from kernel_state.timestamps import utc_epoch
from jupyter_core.application import base_aliases, base_flags
from traitlets import Bool, Unicode

from ..report import build_report, text
from ..report_html import page
from ..state import StateStore, damaged_events_note
from .serverconfig import ROOT_FIX, ServerConfigApp


LAST_DAY_END = 253402300800.0  # 10000-01-01 UTC: time.gmtime and strftime take nothing later


def parse_until(value: str) -> float:
    """Seconds since the epoch, or a UTC date YYYY-MM-DD (its end) or YYYY-MM-DDTHH:MM."""
    forms = "give YYYY-MM-DD, YYYY-MM-DDTHH:MM (UTC) or epoch seconds"
    for parse in (float, lambda v: utc_epoch(v, "%Y-%m-%dT%H:%M"), lambda v: utc_epoch(v, "%Y-%m-%d") + 86400):
        try:
            until = parse(value)
        except ValueError:
            continue
        # -5 was a week of 1969, reported as empty; 1e17 overflowed the calendar (a traceback)
        if not (math.isfinite(until) and 0 < until <= LAST_DAY_END):
            raise ValueError(f"--until={value!r} is not a time between 1970-01-01 and 9999-12-31: {forms}")
        return min(until, LAST_DAY_END - 1)  # the end of 9999-12-31 (its last second: the calendar's last)
    raise ValueError(f"--until={value!r} is not a date: {forms}")


def disk_usage(root: str) -> int:
    """Bytes the checkpoint store holds now (blobs, manifests, leftovers): each file once, however many
    checkpoints share it or names it has; links are not followed."""
    seen: dict[tuple[int, int], int] = {}
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


class ReportApp(ServerConfigApp):
    name = "jupyter-gkews-report"
    description = ("Per pause cycle and in total: idle time before the pause, GPU hours released, checkpoint "
                   "and snapshot bytes written and what the checkpoint store holds now, resume verdicts and "
                   "success rate, time to a usable kernel (p50/p95), fallbacks and their causes; and a week of "
                   "hours allocated vs released.")
    as_json = Bool(False, config=True, help="Print the report as JSON.")
    html = Unicode(None, allow_none=True, config=True,
                   help="Also write the report as a self-contained HTML page to this file.")
    until = Unicode("", config=True, help="End of the report (UTC date YYYY-MM-DD, YYYY-MM-DDTHH:MM, or epoch "
                                          "seconds); default now. The week chart ends here.")
    aliases = {**base_aliases, "state-dir": "GkewsApp.state_dir", "checkpoint-root": "GkewsApp.checkpoint_root",
               "html": "ReportApp.html", "until": "ReportApp.until"}
    flags = {**base_flags, "json": ({"ReportApp": {"as_json": True}}, "Print the report as JSON.")}

    def start(self) -> None:
        settings = self.server_settings()
        store = StateStore(settings.state_dir)
        if os.path.exists(store.directory) and not os.path.isdir(store.directory):  # it read "no event log at"
            print(f"the state directory {store.directory} is a file, not a directory: point --state-dir=DIR at "
                  f"the server's state directory (c.GkewsApp.state_dir)", file=sys.stderr)
            self.exit(2)
        if os.path.lexists(store.events_path) and not os.path.isfile(store.events_path):
            print(f"the event log {store.events_path} is not a file (a folder, or a link to nothing): point "
                  f"--state-dir=DIR at the server's state directory, or put its events.jsonl back", file=sys.stderr)
            self.exit(2)
        if self.html is not None and not self.html.strip():
            print("jupyter gkews report: --html needs a file name (--html=week.html)", file=sys.stderr)
            self.exit(2)
        if not os.path.isfile(store.events_path):
            print(f"no event log at {store.events_path}: no server has run with this state directory (by default "
                  f"each project folder has its own; this is {settings.contents_root()}'s). Run this command in the "
                  f"folder the server serves, or give its state directory with --state-dir=DIR "
                  f"(c.GkewsApp.state_dir).", file=sys.stderr)
            self.exit(2)
        try:
            until = parse_until(self.until) if self.until else None
        except ValueError as exc:
            print(exc, file=sys.stderr)
            self.exit(2)
        try:
            events, damaged = store.read_events(limit=10**9)
        except OSError as exc:
            print(f"the event log {store.events_path} cannot be read ({exc.strerror or exc}): run this as the user "
                  f"the server runs as, or make the file readable", file=sys.stderr)
            self.exit(2)
        if damaged:
            print(damaged_events_note(store.events_path, damaged), file=sys.stderr)
        report = build_report(events, until)
        report["state_dir"] = store.directory
        totals, root = report["totals"], self.checkpoint_root(settings)
        if os.path.isdir(root):
            try:
                Store(root).check()  # a folder that is no store would be counted whole as "kept"
            except CheckpointError as exc:
                print(exc, file=sys.stderr)
                self.exit(2)
            totals["checkpoint_bytes_on_disk"] = disk_usage(root)
        elif totals["checkpoint_bytes"]:  # the pauses wrote checkpoints, but not here: the wrong root
            print(f"no checkpoint store at {root}, yet the event log says the pauses wrote "
                  f"{human_bytes(totals['checkpoint_bytes'])} of checkpoints; {ROOT_FIX}", file=sys.stderr)
            self.exit(2)
        if self.html:
            try:
                with open(self.html, "w") as f:
                    f.write(page(report))
            except OSError as exc:
                print(f"jupyter gkews report: cannot write the HTML report {self.html}: {exc.strerror}; give "
                      f"--html a path in an existing, writable folder", file=sys.stderr)
                self.exit(2)
        try:
            if self.as_json:
                print(json.dumps(report, indent=1))
            else:
                print(text(report))
                if self.html:
                    print(f"HTML report: {os.path.abspath(self.html)}")
            sys.stdout.flush()
        except BrokenPipeError:  # `report | head`: the reader has all it wanted; no traceback at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


main = ReportApp.launch_instance
