"""A real ipykernel, started with jupyter_client, driven the way a notebook drives it."""
from __future__ import annotations

import ast
import json
import os
import queue

from jupyter_client.manager import KernelManager


#: a notebook class whose instance's restore (its unpickling) waits until the file <gate> exists, and leaves
#: <gate>.reached once it waits there (a restore run in a kernel's start hold: Jupyter does not see it busy)
SLOW_RESTORE = '''
def _wait_for_gate(path):
    import os, time
    open(path + ".reached", "w").close()
    while not os.path.exists(path):
        time.sleep(0.05)
    return 0
class SlowRestore:
    def __reduce__(self):
        return (_wait_for_gate, ({gate!r},))
'''


class KernelError(AssertionError):
    pass


class Kernel:
    def __init__(self, root: str, notebook: str = "work/experiment.ipynb", extra_env: dict | None = None,
                 kernel_name: str = "python3", cwd: str | None = None):
        env = dict(os.environ, GKEWS_CHECKPOINT_ROOT=str(root), JPY_SESSION_NAME=notebook)
        env.update(extra_env or {})
        self.km = KernelManager(kernel_name=kernel_name)
        self.km.start_kernel(env=env, **({"cwd": str(cwd)} if cwd else {}))
        self.client = self.km.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 120, allow_error: bool = False, stdout_only: bool = False) -> str:
        """Execute a cell; return what it printed (stdout, stderr and displayed text)."""
        msg_id = self.client.execute(code)
        out, error = [], None
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=timeout)
            except queue.Empty:
                raise KernelError(f"no answer from the kernel within {timeout}s for:\n{code}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout" or not stdout_only:
                    out.append(content["text"])
            elif kind in ("execute_result", "display_data", "update_display_data"):
                out.append(content["data"].get("text/plain", "") + "\n")
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
                out.append(error + "\n")
            elif kind == "status" and content["execution_state"] == "idle":
                break
        reply = self.client.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.client.get_shell_msg(timeout=timeout)
        for payload in reply["content"].get("payload", []):
            if payload.get("source") == "page":  # help (%magic?) arrives as a pager payload
                out.append(payload["data"].get("text/plain", ""))
        text = "".join(out)
        if error and not allow_error:
            raise KernelError(f"cell failed: {error}\n--- cell ---\n{code}\n--- output ---\n{text}")
        return text

    def value(self, expr: str):
        """Evaluate an expression in the kernel and bring back its JSON value."""
        text = self.run(f"print(__import__('json').dumps({expr}))", stdout_only=True)  # binds no name
        return json.loads(text.strip().splitlines()[-1])

    def quietly(self, expr: str):
        """An expression's value (a Python literal), evaluated without a cell of its own: silent, so no
        execution count and no pre/post_run_cell hook (no automatic checkpoint)."""
        msg_id = self.client.execute("", silent=True, user_expressions={"r": expr})
        reply = self.client.get_shell_msg(timeout=120)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.client.get_shell_msg(timeout=120)
        data = reply["content"]["user_expressions"]["r"]
        assert data["status"] == "ok", data
        return ast.literal_eval(data["data"]["text/plain"])

    def call(self, request: dict) -> dict:
        """The JSON call the server makes: kernel_state.api through user_expressions, silently."""
        return json.loads(self.quietly(f"__import__('kernel_state.api').api.call({json.dumps(json.dumps(request))})"))

    def close(self) -> None:
        self.client.stop_channels()
        self.km.shutdown_kernel(now=True)

    def __enter__(self) -> "Kernel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
