"""`jupyter gkews resume-test`: the release-checklist check that a notebook really resumes."""
from __future__ import annotations

import errno
import json
import math
import os
import shutil
import sys
import tempfile
import time
import urllib.parse

from jupyter_core.application import base_aliases, base_flags
from traitlets import Bool, Enum, Float, Unicode

from ..resumetest import ResumeTest
from ..states import State
from ..serverclient import UNREACHABLE, ServerClient
from .strict import StrictApp


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class ResumeTestApp(StrictApp):
    name = "jupyter-gkews-resume-test"
    description = ("Start a test kernel holding a secret that exists only in that process, a small model and a "
                   "result file; pause; resume; report 'live restore: the secret value is in the same process' "
                   "or 'fresh process: restored from checkpoint'; exit 1 when neither holds. Without --url it "
                   "starts its own jupyter server with the extension (local backend) in a temporary directory.")
    url = Unicode("", config=True, help="A running server to test (e.g. http://127.0.0.1:8888/); default: start one.")
    token = Unicode("", config=True, help="That server's token; default: $JUPYTER_TOKEN.")
    step = Enum(["all", "prepare", "check"], "all", config=True,
                help="all; or prepare (pause, write --record) before a platform upgrade and check (resume, "
                     "compare) after it. prepare and check need --url.")
    record = Unicode("gkews-resume-test.json", config=True, help="Where prepare writes, and check reads, what "
                                                                 "the kernel held before the pause.")
    timeout = Float(600.0, config=True, help="Seconds each step (a cell, the pause, the resume) may take.")
    keep = Bool(False, config=True, help="Keep the scratch notebook, its result file and checkpoints (and the "
                                         "started server's directory).")
    aliases = {**base_aliases, "url": "ResumeTestApp.url", "token": "ResumeTestApp.token", "step": "ResumeTestApp.step",
               "record": "ResumeTestApp.record", "timeout": "ResumeTestApp.timeout"}
    flags = {**base_flags, "keep": ({"ResumeTestApp": {"keep": True}}, "Keep what the test created.")}

    _started = False

    def exit(self, exit_status=0):
        # traitlets ends a wrong option ("Bad config") with 1, which here means "the resume failed": a
        # command that never started could not run (2)
        super().exit(2 if exit_status == 1 and not self._started else exit_status)

    def start(self) -> None:
        self._started = True
        if not (math.isfinite(self.timeout) and self.timeout > 0):  # 0 failed every request: "cannot reach"
            self._usage(f"--timeout must be a finite number of seconds more than 0 (each step's limit), "
                        f"not {self.timeout:g}")
        if self.step != "all" and not self.url:
            self._usage(f"--step={self.step} needs --url: the server must outlive this command between the steps")
        server = None
        base = None
        if self.url:
            try:
                parts = urllib.parse.urlsplit(self.url)
                parts.port  # noqa: B018  (a port that is not a number raises only when read)
            except ValueError:  # http://[::1 (an unclosed IPv6 bracket), http://host:port
                parts = None
            if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
                self._usage(f"--url={self.url!r} is not a server's address: give its base URL with the scheme, "
                            f"e.g. --url=http://127.0.0.1:8888/ (or .../user/NAME/ behind JupyterHub)")
            # one request waits no longer than a step may (an https:// URL of a plain HTTP server never answers
            # the TLS handshake)
            client = ServerClient(self.url, self.token or os.environ.get("JUPYTER_TOKEN", ""),
                                  request_timeout=min(60.0, self.timeout))
        else:
            from ..localserver import LocalServer
            base = tempfile.mkdtemp(prefix="gkews-resume-test-")
            server = client = LocalServer(base)
            say(f"starting a jupyter server with the extension in {base}")
            server.start()
        self._test = None
        try:
            code = self._run(client)
        except UNREACHABLE as exc:
            test = self._test
            if test is None or not test.created:
                print(f"cannot reach the server at {client.url}: {exc}. Check --url and that it runs.",
                      file=sys.stderr)
            else:  # it answered before: this is a step that took too long, or a server that went away since
                print(f"resume test stopped: the server at {client.url} did not answer while {test.step} ({exc}; "
                      f"each request may take up to --timeout={self.timeout:g} s, at most 60)", file=sys.stderr)
            code = 2
        except (RuntimeError, AssertionError) as exc:
            print(f"resume test stopped: {exc}", file=sys.stderr)
            code = 2
        finally:
            if server is not None:
                server.stop()
                if not self.keep:
                    shutil.rmtree(base, ignore_errors=True)
        left = self._test.left_behind() if code == 2 and server is None and self._test is not None else ""
        if left:  # a server of its own is gone with all it held; another one keeps what the test made
            print(left, file=sys.stderr)
        self.exit(code)

    def _check_record_writable(self) -> None:
        """--record must be a file prepare can write: found out after the pause, it left the server paused."""
        path = os.path.abspath(self.record)
        folder = os.path.dirname(path)
        if os.path.isdir(path):
            self._usage(f"--record={self.record} is a folder: give the file prepare writes the record to")
        if not os.path.isdir(folder):
            self._usage(f"--record={self.record}: the folder {folder} does not exist; make it, or give a record "
                        f"file in a folder that does")
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".gkews-record-"):
                pass
            if os.path.exists(path) and not os.access(path, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        except OSError as exc:
            self._usage(f"--record={self.record} cannot be written ({exc.strerror or exc}): give a record file "
                        f"this user can write; nothing was made on the server")

    def _usage(self, message: str) -> None:
        print(message, file=sys.stderr)
        self.exit(2)

    def _run(self, client) -> int:
        code, body = client.request("GET", "gkews/status")
        if code in (401, 403) and not client.token:
            self._usage(f"the server at {client.url} asks for a token and none was given: give it with "
                        f"--token=TOKEN or in $JUPYTER_TOKEN")
        if code in (401, 403):
            self._usage(f"the server at {client.url} refused the token: give the right one with --token")
        if code == 404:
            jupyter, _ = client.request("GET", "api/status")
            if jupyter == 200:
                self._usage(f"the server at {client.url} has no jupyter_gkews extension: install and enable it")
            self._usage(f"no Jupyter server answers at {client.url} (GET api/status: {jupyter}): check the base "
                        f"URL (behind JupyterHub it ends in /user/NAME/)")
        if code != 200:
            message = body.get("message") if isinstance(body, dict) else body
            self._usage(f"the server at {client.url} cannot run the test: GET gkews/status answered {code}: {message}")
        if self.step != "check" and body["state"] != State.ACTIVE:
            self._usage(f"the server at {client.url} is {body['state']} ({body['message']}): the test pauses and "
                        f"resumes a notebook of its own, and would change what its user paused or resumes. Run it "
                        f"when the state is active, or without --url (it starts a server of its own)")
        test = self._test = ResumeTest(client, say, self.timeout)
        if self.step == "check":
            try:
                with open(self.record) as f:
                    record = json.load(f)
            except (OSError, ValueError) as exc:
                self._usage(f"cannot read the record {self.record} ({exc}); run --step=prepare first")
            if not is_record(record):
                self._usage(f"{self.record} is not a record that --step=prepare wrote (it holds "
                            f"{type(record).__name__} {str(record)[:80]}); give the file prepare wrote, or run "
                            f"--step=prepare first")
            if client.request("GET", f"api/contents/{urllib.parse.quote(record['notebook'])}?content=0")[0] == 404:
                self._usage(f"the notebook of this record, {record['notebook']}, is not on the server at {client.url}"
                            f": it was checked already (a check that passes removes it), or the record is from "
                            f"another server. Run --step=prepare again for a new test")
        else:
            if self.step == "prepare":
                self._check_record_writable()  # before anything is made on the server
            record = test.prepare()
            if self.step == "prepare":
                try:
                    with open(self.record, "w") as f:
                        json.dump(record, f)
                except OSError as exc:  # checked before; the volume filled or changed since
                    print(f"could not write the record {self.record} ({exc}); it is, for --step=check:\n"
                          f"{json.dumps(record)}", file=sys.stderr)
                    test.pause_posted = False  # paused, as prepare means to be: the record is what is missing
                    return 2
                say(f"prepared and paused; after the upgrade run --step=check --record={self.record}")
                return 0
        passed, conclusion, problems = test.check(record)
        print(conclusion)
        for problem in problems:
            print(f"  - {problem}")
        if passed and not self.keep:
            test.remove(record)
        elif not passed:
            print(f"kept for inspection: {record['notebook']} and {record['result_file']}")
        return 0 if passed else 1


def is_record(record) -> bool:
    """What ResumeTest.prepare returns, in the shape check reads."""
    return (isinstance(record, dict) and all(isinstance(record.get(k), str) and record[k]
                                             for k in ("notebook", "result_file", "session", "kernel_id"))
            and isinstance(record.get("before"), dict) and "pid" in record["before"])


main = ResumeTestApp.launch_instance
