"""A real `python -m jupyter_server` process with the extension, driven over plain HTTP.

Shared by tests/test_lifecycle_restart.py and benchmarks/bench_lifecycle.py: the server process and its
HTTP client are jupyter_gkews.localserver.LocalServer (which `jupyter gkews resume-test` uses too); this
adds what only a test on the same machine can do: write notebooks and run cells through connection files.
"""
from __future__ import annotations

import urllib.request
from pathlib import Path

import nbformat
from jupyter_client import BlockingKernelClient
from prometheus_client.parser import text_string_to_metric_families

from jupyter_gkews.localserver import LocalServer


class Server(LocalServer):
    """`python -m jupyter_server` in its own process group, on tmp Jupyter dirs, driven over plain HTTP.

    request_timeout: seconds for one HTTP request; cell_timeout: default seconds for run_cell.
    """

    def __init__(self, base: Path, request_timeout: float = 60, cell_timeout: float = 180):
        super().__init__(base, request_timeout)
        self.cell_timeout = cell_timeout

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
        # A kernel still starting, or a busy machine, misses the 1 s heartbeat and wait_for_ready would call
        # it dead ("Kernel died before replying to kernel_info"); a process that really died stays dead.
        client.hb_channel.time_to_dead = 30.0
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

    def metrics(self) -> dict:
        """{(sample name, sorted labels): value} of the gkews metrics on /metrics, as Prometheus reads them."""
        req = urllib.request.Request(self.url + "metrics", headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=self.request_timeout) as r:
            body = r.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(body) for s in family.samples
                if s.name.startswith("gkews_")}

    def pid_of(self, kernel_id: str) -> int:
        return int(self.run_cell(kernel_id, "print(__import__('os').getpid())").strip())  # binds no name
