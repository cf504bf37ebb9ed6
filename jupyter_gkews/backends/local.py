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
        kernel_id = notebook["kernel_id"]
        if kernel_id not in km:
            kernel_id = await sm.start_kernel_for_session(
                notebook["session_id"], notebook["path"], notebook["name"], notebook["type"],
                notebook["kernel_name"], kernel_id=kernel_id)
        if await sm.session_exists(notebook["path"]):
            await sm.update_session(notebook["session_id"], kernel_id=kernel_id)
        else:  # the session table dropped it when its kernel stopped: put it back under its old id
            await sm.save_session(notebook["session_id"], path=notebook["path"], name=notebook["name"],
                                  type=notebook["type"], kernel_id=kernel_id)
        return kernel_id

    async def recover_paused(self, lifecycle) -> None:
        lifecycle.note("paused; the kernels are stopped: resume to restore them from their checkpoints")
