"""The release-checklist resume test: does a notebook really come back after a pause?

A scratch notebook's kernel holds a secret drawn in that process twice over: in a variable (a checkpoint
keeps it) and in the process environment only (nothing but the same process keeps it), beside a small
model (torch when the kernel has it, else numpy) and a small result file. After pause and resume, the
kernel answers with what it holds now:

- the environment secret, the PID and every value unchanged, verdict live-verified:
  "live restore: the secret value is in the same process";
- no environment secret (a new process) but the variable secret and the model's fingerprints back, verdict
  restored-from-checkpoint: "fresh process: restored from checkpoint";
- anything else, or a result file that is gone or changed: a failure, said in words.
"""
from __future__ import annotations

import json
import time
import urllib.parse

from .states import State, Verdict

LIVE_ENV = "GKEWS_RESUME_TEST_LIVE"
LIVE = "live restore: the secret value is in the same process"
FRESH = "fresh process: restored from checkpoint"

SETUP = r'''
import os
gkews_secret = os.urandom(16).hex()           # in the namespace: a checkpoint keeps it
os.environ["%(env)s"] = gkews_secret     # in this process only: no checkpoint keeps it
try:
    import torch
    torch.manual_seed(int(gkews_secret[:8], 16))
    gkews_model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    gkews_input = torch.linspace(-1, 1, 64).reshape(2, 32)
except ImportError:
    import numpy as np
    _rng = np.random.default_rng(int(gkews_secret[:8], 16))
    gkews_model = {"w": _rng.standard_normal((32, 4)), "b": _rng.standard_normal(4)}
    gkews_input = np.linspace(-1, 1, 64).reshape(2, 32)
''' % {"env": LIVE_ENV}

OBSERVE = r'''
import hashlib as _h, json as _j, os as _o
def _gkews_observe():
    m, secret = globals().get("gkews_model"), globals().get("gkews_secret")
    seen = {"pid": _o.getpid(), "live_secret": _o.environ.get("%(env)s"), "secret": secret, "model": None,
            "weights": None, "output": None}
    if m is None:  # not restored: the comparison will say so
        return seen
    if hasattr(m, "parameters"):
        import torch
        with torch.no_grad():
            blobs = [p.detach().cpu().numpy().tobytes() for p in m.parameters()]
            out, kind = m(gkews_input).cpu().numpy(), "torch"
    else:
        blobs, out, kind = [m["w"].tobytes(), m["b"].tobytes()], gkews_input @ m["w"] + m["b"], "numpy"
    seen.update(model=kind, weights=_h.sha256(b"".join(blobs)).hexdigest(), output=_h.sha256(out.tobytes()).hexdigest())
    return seen
_gkews_seen = _gkews_observe()
%(write)s
print(_j.dumps(_gkews_seen))
'''
WRITE_RESULT = r'''
with open(%r, "w") as _f:
    _j.dump({"weights": _gkews_seen["weights"], "output": _gkews_seen["output"],
             "secret_sha256": _h.sha256(_gkews_seen["secret"].encode()).hexdigest()}, _f)
'''


def observe_code(result_file: str | None = None) -> str:
    return OBSERVE % {"env": LIVE_ENV, "write": WRITE_RESULT % result_file if result_file else ""}


def judge(before: dict, after: dict, verdict: str | None, result_before: str | None,
          result_after: str | None) -> tuple[bool, str, list[str]]:
    """(passed, the conclusion, what is wrong). before/after: what the kernel said it holds."""
    problems = []
    if result_after is None:
        problems.append("the result file written before the pause is gone")
    elif result_after != result_before:
        problems.append("the result file changed between pause and resume")
    differ = [k for k in ("secret", "weights", "output") if after.get(k) is None or after.get(k) != before.get(k)]
    if differ:
        problems.append(f"not the same values after the resume: {', '.join(differ)} differ")
    live = after.get("live_secret") is not None and after.get("live_secret") == before.get("live_secret")
    if live and after.get("pid") != before.get("pid"):
        problems.append("the process-only secret came back in a different process")
    if after.get("live_secret") is not None and not live:
        problems.append("the process holds a different process-only secret")
    if live and verdict != Verdict.LIVE_VERIFIED:
        problems.append(f"the same process, but the server's verdict is {verdict!r}, not 'live-verified'")
    if not live and verdict != Verdict.RESTORED_FROM_CHECKPOINT:
        problems.append(f"a new process, but the server's verdict is {verdict!r}, not 'restored-from-checkpoint'")
    if problems:
        return False, "neither a live restore nor a restore from the checkpoint", problems
    return True, (LIVE if live else FRESH), []


class ResumeTest:
    """The steps, against a ServerClient; say(text) reports progress."""

    def __init__(self, client, say=print, timeout: float = 600, folder: str = "gkews-resume-test"):
        self.client, self.say, self.timeout = client, say, timeout
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        self.notebook = f"{folder}/resume-test-{stamp}.ipynb"
        self.result_file = f"{folder}/resume-test-{stamp}.result.json"
        self.step = "checking the server"  # what it was doing: said when it stops there
        self.created = False  # the scratch notebook exists on the server
        self.pause_posted = False  # the server was asked to pause it (and may be paused now)

    def left_behind(self) -> str:
        """What a test that stopped here left on the server, and how to get the server back: '' for nothing."""
        if not self.created:
            return ""
        said = f"left on the server: the scratch notebook {self.notebook} and its session"
        if self.pause_posted:
            said += (f"; the server was asked to pause it, so it may be pausing or paused: resume it (the Resume "
                     f"button, or POST gkews/resume {{\"notebooks\": [\"{self.notebook}\"]}}) before the next test, "
                     f"which runs only on an active server")
        return said

    def _read_file(self, path: str) -> str | None:
        code, body = self.client.request("GET", f"api/contents/{urllib.parse.quote(path)}?content=1&format=text")
        return body["content"] if code == 200 else None

    def prepare(self) -> dict:
        """Scratch notebook, secret, model, fingerprints, result file; then pause. Returns the record."""
        self.step = "creating the scratch notebook"
        self.created = True  # from here on, a stop leaves it (said by left_behind)
        self.client.create_notebook(self.notebook, [SETUP, observe_code()])
        self.step = "starting its kernel"
        session = self.client.start_session(self.notebook)
        kid = session["kernel"]["id"]
        self.say(f"started a kernel for {self.notebook}")
        self.step = "running its setup cell"
        self.client.execute(kid, SETUP, timeout=self.timeout)
        name = self.result_file.rsplit("/", 1)[-1]  # the kernel runs in the notebook's folder
        before = json.loads(self.client.execute(kid, observe_code(name), timeout=self.timeout).strip().splitlines()[-1])
        result = self._read_file(self.result_file)
        self.say(f"recorded a secret, a {before['model']} model (weights {before['weights'][:12]}) and "
                 f"{self.result_file} in process {before['pid']}")
        t0 = time.monotonic()
        self.step = "pausing"
        self.pause_posted = True
        self.client.post_ok("gkews/pause", {"notebooks": [self.notebook], "reason": "resume-test"})
        self.say("pausing ...")
        paused = self.client.wait_for((State.PAUSED, State.FAILED), timeout=self.timeout, tolerate_unreachable=True)
        if paused["state"] != State.PAUSED:
            raise RuntimeError(f"the pause failed: {paused['message']}")
        self.say(f"paused after {time.monotonic() - t0:.1f} s: {paused['message']}")
        return {"notebook": self.notebook, "result_file": self.result_file, "session": session["id"],
                "kernel_id": kid, "before": before, "result": result}

    def check(self, record: dict) -> tuple[bool, str, list[str]]:
        """Resume, then ask the kernel what it holds and compare with the record."""
        t0 = time.monotonic()
        self.notebook, self.result_file = record["notebook"], record["result_file"]
        self.step, self.created, self.pause_posted = "resuming", True, True
        state = self.client.wait_for((State.PAUSED, State.FAILED, State.RESUMING, State.ACTIVE), timeout=self.timeout,
                                     tolerate_unreachable=True)["state"]
        if state in (State.PAUSED, State.FAILED):
            self.client.post_ok("gkews/resume", {"notebooks": [self.notebook]})
        # else the platform brought the environment back and the server resumes by itself (a restored Pod)
        self.say("resuming ...")
        resumed = self.client.wait_for((State.ACTIVE, State.FAILED, State.PAUSED), timeout=self.timeout,
                                       tolerate_unreachable=True)
        nb = next((n for n in resumed["notebooks"] if n["path"] == self.notebook), {})
        verdict = nb.get("verdict")
        self.say(f"state {resumed['state']} after {time.monotonic() - t0:.1f} s; verdict {verdict}")
        if resumed["state"] != State.ACTIVE or verdict == Verdict.FAILED:
            return False, "the resume failed", [nb.get("error") or resumed["message"]]
        self.step, self.pause_posted = "asking the resumed kernel what it holds", False
        after = json.loads(self.client.execute(nb.get("kernel_id") or record["kernel_id"], observe_code(),
                                               timeout=self.timeout).strip().splitlines()[-1])
        self.say(f"the kernel answers from process {after['pid']} (before: {record['before']['pid']}); "
                 f"first cell ran {time.monotonic() - t0:.1f} s after the resume request")
        return judge(record["before"], after, verdict, record["result"], self._read_file(self.result_file))

    def remove(self, record: dict) -> None:
        """Leave nothing behind: the session, the files and the scratch notebook's checkpoints."""
        c = self.client
        c.delete(f"api/sessions/{record['session']}")
        for path in (record["result_file"], record["notebook"]):
            c.delete(f"api/contents/{urllib.parse.quote(path)}")
        folder = record["notebook"].rsplit("/", 1)[0]
        code, listing = c.request("GET", f"api/contents/{urllib.parse.quote(folder)}?content=1")
        if code == 200 and not listing.get("content"):  # the test's own folder, left empty: not the user's
            c.delete(f"api/contents/{urllib.parse.quote(folder)}")
        code, body = c.request("GET", f"gkews/checkpoints?notebook={urllib.parse.quote(record['notebook'])}")
        for ckpt in body.get("checkpoints", []) if code == 200 else []:
            c.delete(f"gkews/checkpoints/{ckpt['id']}")
