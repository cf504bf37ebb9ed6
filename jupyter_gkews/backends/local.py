"""The embedded default: no cluster, no Pod snapshot.

Release shuts the checkpointed kernels down, which frees their GPU memory and RAM while the server
stays up; resume starts a kernel for the same notebook (same session id and kernel id, so the session
table and reconnecting clients find it again) and the lifecycle restores it from its checkpoint.
"""
from __future__ import annotations

import asyncio

from .base import Backend


class LocalBackend(Backend):
    name = "local"

    async def release(self, notebooks: list[dict]) -> None:
        km = self.serverapp.kernel_manager
        # all at once: each shutdown waits for its process to exit
        await asyncio.gather(*(km.shutdown_kernel(nb["kernel_id"]) for nb in notebooks if nb["kernel_id"] in km))

    async def start_kernel(self, notebook: dict) -> str:
        km = self.serverapp.kernel_manager
        sm = self.serverapp.session_manager
        reopened = await self._open_session(notebook["path"])
        if reopened is not None:  # its user opened it again while paused: restore into that kernel
            notebook.update(session_id=reopened["id"], reopened=reopened["kernel"]["id"] != notebook["kernel_id"])
            return reopened["kernel"]["id"]
        kernel_id = notebook["kernel_id"]
        started = kernel_id not in km
        if started:
            kernel_id = await sm.start_kernel_for_session(
                notebook["session_id"], notebook["path"], notebook["name"], notebook["type"],
                notebook["kernel_name"], kernel_id=kernel_id)
        try:
            if await sm.session_exists(notebook["path"]):
                await sm.update_session(notebook["session_id"], kernel_id=kernel_id)
            else:  # the session table dropped it when its kernel stopped: put it back under its old id
                await sm.save_session(notebook["session_id"], path=notebook["path"], name=notebook["name"],
                                      type=notebook["type"], kernel_id=kernel_id)
        except BaseException:
            if started:  # never leave a kernel running that no session shows
                await km.shutdown_kernel(kernel_id)
            raise
        return kernel_id

    async def _open_session(self, path: str) -> dict | None:
        """The session with a running kernel that the notebook at path has now, if any."""
        km = self.serverapp.kernel_manager
        for session in await self.serverapp.session_manager.list_sessions():
            kernel = session.get("kernel") or {}
            if session["path"] == path and kernel.get("id") in km:
                return session
        return None

    async def recover_paused(self, lifecycle) -> None:
        lifecycle.note("paused; the kernels are stopped: resume to restore them from their checkpoints")
