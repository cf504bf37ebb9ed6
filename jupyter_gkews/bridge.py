"""Calls into kernel_state inside a running kernel, silently, one JSON request per call.

The request travels as a user_expression of an empty, silent execute request, so nothing enters the
user's history or output. The server's activity tracker counts every IOPub message as activity, so the
kernel's and the server's last_activity are put back afterwards: our own calls never keep a session
looking busy, nor reset an idle timer.
"""
from __future__ import annotations

import asyncio
import json

from .errors import KernelCallError, KernelStateMissing

__all__ = ["KernelBridge", "KernelCallError", "KernelStateMissing"]


class KernelBridge:
    def __init__(self, kernel_manager, timeout: float = 1800.0, log=None):
        self.kernel_manager, self.timeout, self.log = kernel_manager, timeout, log

    async def call(self, kernel_id: str, request: dict, *, label: str = "", on_progress=None,
                   timeout: float | None = None) -> dict:
        """Run kernel_state.api.call(request) in the kernel; returns its result or raises KernelCallError."""
        km = self.kernel_manager
        if kernel_id not in km:
            raise KernelCallError(f"no running kernel {kernel_id} for {label or 'this notebook'}")
        kernel = km.get_kernel(kernel_id)
        before = (getattr(kernel, "last_activity", None), getattr(km, "last_kernel_activity", None))
        # the request as one JSON text in a Python string literal; the answer comes back as application/json
        expr = f"__import__('kernel_state.api').api.answer({json.dumps(request)!r})"
        client = kernel.client()
        client.start_channels()

        def hook(msg):
            if on_progress and msg["msg_type"] == "stream":
                for line in msg["content"]["text"].splitlines():
                    if line.startswith('{"gkews_progress"'):
                        on_progress(json.loads(line)["gkews_progress"])
        try:
            await client.wait_for_ready(timeout=60)
            reply = await client.execute_interactive(
                "", silent=True, store_history=False, user_expressions={"gkews": expr},
                timeout=timeout or self.timeout, output_hook=hook)
        except (TimeoutError, asyncio.TimeoutError):
            raise KernelCallError(f"the kernel of {label or kernel_id} did not answer within "
                                  f"{timeout or self.timeout:.0f} s") from None
        except RuntimeError as exc:  # wait_for_ready: the kernel died
            raise KernelCallError(f"the kernel of {label or kernel_id} is not responding: {exc}") from None
        finally:
            client.stop_channels()
            await self._restore_activity(kernel, before)
        answer = reply["content"].get("user_expressions", {}).get("gkews", {})
        if answer.get("status") != "ok":
            if answer.get("ename") in ("ModuleNotFoundError", "ImportError"):
                raise KernelStateMissing(
                    f"the kernel of {label or kernel_id} ({kernel.kernel_name}) cannot import kernel_state: "
                    f"install jupyter-gkews in that kernel's environment")
            raise KernelCallError(f"kernel_state failed in {label or kernel_id}: "
                                  f"{answer.get('ename')}: {answer.get('evalue')}", kind=answer.get("ename"))
        result = answer["data"].get("application/json")
        if result is None:  # a kernel_state older than this server: no answer(), or no JSON display
            raise KernelCallError(f"the kernel of {label or kernel_id} answered without JSON; "
                                  "install the same jupyter-gkews in that kernel's environment")
        if not result["ok"]:
            raise KernelCallError(result["error"], kind=result.get("type"))
        return result["result"]

    async def _restore_activity(self, kernel, before) -> None:
        last, server_last = before
        # The server's activity tracker reads IOPub on its own socket and may not have seen our call's
        # final "idle" yet; that late message would stamp the kernel active. Wait for it first.
        for _ in range(40):
            if getattr(kernel, "execution_state", "idle") != "busy":
                break
            await asyncio.sleep(0.05)
        if last is not None and getattr(kernel, "execution_state", "idle") != "busy":
            kernel.last_activity = last
        if server_last is not None:
            # what the users did meanwhile in other kernels still counts
            others = [getattr(self.kernel_manager.get_kernel(k), "last_activity", None)
                      for k in self.kernel_manager.list_kernel_ids()]
            self.kernel_manager.last_kernel_activity = max([server_last] + [t for t in others if t])
