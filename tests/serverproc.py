"""A real `python -m jupyter_server` process with the extension, driven over plain HTTP.

Shared by tests/test_lifecycle_restart.py and benchmarks/bench_lifecycle.py: the server runs in its own
process group on throw-away Jupyter, state and checkpoint directories under one base directory.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import nbformat
from jupyter_client import BlockingKernelClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m jupyter_server` in its own process group, on tmp Jupyter dirs, driven over plain HTTP.

    request_timeout: seconds for one HTTP request; cell_timeout: default seconds for run_cell.
    """

    def __init__(self, base: Path, request_timeout: float = 60, cell_timeout: float = 180):
        self.base = base
        self.root = base / "root"
        self.runtime = base / "runtime"
        self.checkpoint_root = base / "ckpt"
        self.state_dir = base / "state"
        for d in (self.root, base / "config", base / "data", self.runtime, base / "ipython"):
            d.mkdir(parents=True, exist_ok=True)
        self.token = uuid.uuid4().hex
        self.request_timeout = request_timeout
        self.cell_timeout = cell_timeout
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    # -- process ---------------------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(self.base / "config"),
                   JUPYTER_DATA_DIR=str(self.base / "data"), JUPYTER_RUNTIME_DIR=str(self.runtime),
                   IPYTHONDIR=str(self.base / "ipython"), PYTHONUNBUFFERED="1")
        env.pop("GKEWS_CHECKPOINT_ROOT", None)  # the server's setting must reach the kernels
        self.starts += 1
        self.log_path = self.base / f"server-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server", f"--ServerApp.port={self.port}",
                 "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={self.token}",
                 "--ServerApp.allow_root=True", f"--ServerApp.root_dir={self.root}",
                 "--ServerApp.open_browser=False", f"--GkewsApp.checkpoint_root={self.checkpoint_root}",
                 f"--GkewsApp.state_dir={self.state_dir}"],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.get("gkews/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the server did not answer within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def signal(self, sig: int, timeout: float = 60) -> int:
        """Send sig to the server's process group (kernels live in their own sessions) and wait for it."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout=30)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM (a clean stop), SIGKILL if it has not exited within 30 s."""
        if self.running():
            self.signal(signal.SIGTERM, timeout=30)

    def kill(self) -> None:
        """SIGKILL the process group if the server is still running."""
        if self.running():
            self.signal(signal.SIGKILL)

    # -- HTTP ------------------------------------------------------------------------------------------

    def request(self, method: str, path: str, body=None, timeout: float | None = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout if timeout is None else timeout) as r:
                code, raw = r.status, r.read()
        except urllib.error.HTTPError as exc:
            code, raw = exc.code, exc.read()
        return code, (json.loads(raw) if raw.strip() else None)

    def get(self, path: str):
        """GET path; the body, asserting a 200."""
        code, payload = self.request("GET", path)
        if code != 200:
            raise AssertionError((path, code, payload))
        return payload

    def post(self, path: str, body=None) -> tuple[int, object]:
        """POST path (body {} by default); (code, body) whatever the code."""
        return self.request("POST", path, body if body is not None else {})

    def post_ok(self, path: str, body=None):
        """POST path; the body, raising RuntimeError on a code outside 2xx."""
        code, payload = self.post(path, body)
        if not 200 <= code < 300:
            raise RuntimeError(f"POST {path}: {code} {payload}")
        return payload

    def delete(self, path: str) -> tuple[int, object]:
        return self.request("DELETE", path)

    def status(self) -> dict:
        return self.get("gkews/status")

    def wait_for(self, states: tuple[str, ...], timeout: float = 300, interval: float = 0.1) -> dict:
        """Poll the status until its state is one of states; the status."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.status()
            if s["state"] in states:
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"still {s['state']}/{s['phase']} after {timeout}s: {s['message']}")
            time.sleep(interval)

    def open_notebook(self, path: str) -> dict:
        """What JupyterLab does when a user opens a notebook: a file, then a session with a kernel."""
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(), str(target))
        code, session = self.post("api/sessions", {"path": path, "name": target.name, "type": "notebook",
                                                   "kernel": {"name": "python3"}})
        assert code == 201, (code, session)
        return session

    # -- kernels ---------------------------------------------------------------------------------------

    def run_cell(self, kernel_id: str, code: str, timeout: float | None = None) -> str:
        """Run code in a kernel through its connection file, as a second client would; return its stdout."""
        client = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kernel_id}.json"))
        client.load_connection_file()
        # The client judges a kernel dead when one heartbeat takes over time_to_dead (1 s by default): on a
        # loaded machine a kernel still starting up misses that and "dies before replying to kernel_info".
        client.hb_channel.time_to_dead = 10.0
        client.start_channels()
        out: list[str] = []
        try:
            client.wait_for_ready(timeout=60)

            def hook(msg):
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    out.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
            reply = client.execute_interactive(code, output_hook=hook,
                                               timeout=self.cell_timeout if timeout is None else timeout)
        finally:
            client.stop_channels()
        assert reply["content"]["status"] == "ok", f"cell failed: {''.join(out)}"
        return "".join(out)

    def pid_of(self, kernel_id: str) -> int:
        return int(self.run_cell(kernel_id, "import os; print(os.getpid())").strip())
