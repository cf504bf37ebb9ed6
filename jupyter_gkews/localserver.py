"""A real `python -m jupyter_server` with the extension, in its own process group, on throw-away Jupyter,
state and checkpoint directories under one base directory.

`jupyter gkews resume-test` starts one when it is given no server; tests/serverproc.py builds on it.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .serverclient import UNREACHABLE, ServerClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer(ServerClient):
    """request_timeout: seconds for one HTTP request; extra_args: more command-line settings."""

    def __init__(self, base: Path, request_timeout: float = 60, extra_args: list[str] = ()):
        self.base = Path(base)
        self.root = self.base / "root"
        self.runtime = self.base / "runtime"
        self.checkpoint_root = self.base / "ckpt"
        self.state_dir = self.base / "state"
        for d in (self.root, self.base / "config", self.base / "data", self.runtime, self.base / "ipython"):
            d.mkdir(parents=True, exist_ok=True)
        super().__init__("http://127.0.0.1:0/", uuid.uuid4().hex, request_timeout)
        self.extra_args = list(extra_args)
        self.data_dir = self.base / "data"
        self.own_dirs = True  # False: the extension's default state and store, in data_dir (a test of them)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 90) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(self.base / "config"),
                   JUPYTER_DATA_DIR=str(self.data_dir), JUPYTER_RUNTIME_DIR=str(self.runtime),
                   IPYTHONDIR=str(self.base / "ipython"), PYTHONUNBUFFERED="1")
        env.pop("GKEWS_CHECKPOINT_ROOT", None)  # the server's setting must reach the kernels
        self.starts += 1
        self.log_path = self.base / f"server-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server", f"--ServerApp.port={self.port}",
                 "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={self.token}",
                 "--ServerApp.allow_root=True", f"--ServerApp.root_dir={self.root}",
                 "--ServerApp.open_browser=False", *self._dir_args(), *self.extra_args],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.get("gkews/status")
                return
            except UNREACHABLE:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the server did not answer within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def _dir_args(self) -> list[str]:
        if not self.own_dirs:
            return []
        return [f"--GkewsApp.checkpoint_root={self.checkpoint_root}", f"--GkewsApp.state_dir={self.state_dir}"]

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
