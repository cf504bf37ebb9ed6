"""Holds on checkpointed kernels: between its checkpoint and its release no cell runs in a kernel, so that
nothing it computes is lost; a kernel that left its hold is checkpointed again (bridge.save_and_hold)."""
from __future__ import annotations

import contextlib
import os

from kernel_state.hold import ANSWER_SUFFIX, CALL_SUFFIX

from ..bridge import hold_file
from ..states import Event, NotebookStatus


RESTARTED_AFTER_CHECKPOINT = (
    "its kernel restarted after its checkpoint (restarted, or its process died and was brought back): cells "
    "run in the new process before the release were not saved; the resume brings back the checkpoint's state")


class Holds:
    """The holds of Lifecycle (a mixin: `self._holds` maps kernel id -> bridge.Hold)."""

    def _hold_file(self, kernel_id: str) -> str:
        return hold_file(self.serverapp.runtime_dir, kernel_id)

    async def _renew_broken_holds(self, notebooks: list[dict], interrupt: bool) -> None:
        """A checkpointed kernel that left its hold (its user interrupted it) may have run a cell since its
        checkpoint: take that checkpoint again, so that no cell's effect is lost."""
        for nb in notebooks:
            hold = self._holds.get(nb["kernel_id"])
            if nb["status"] == NotebookStatus.CHECKPOINTED and hold is not None and hold.restarted:
                # the process it checkpointed is gone: its checkpoint holds the user's state, which the resume
                # brings back; what ran in the new process since is not saved, and the notebook says so
                if RESTARTED_AFTER_CHECKPOINT not in nb.get("warnings", []):
                    nb["warnings"] = [*nb.get("warnings", []), RESTARTED_AFTER_CHECKPOINT]
                continue
            if nb["status"] != NotebookStatus.CHECKPOINTED or (hold is not None and not hold.ended):
                continue
            await self._release_hold(nb["kernel_id"])
            await self._checkpoint(nb, interrupt)
            await self._persist(Event.NOTEBOOK_CHECKPOINTED_AGAIN if nb["status"] == NotebookStatus.CHECKPOINTED
                                else Event.NOTEBOOK_NOT_CHECKPOINTED, path=nb["path"], error=nb.get("error"),
                                why="a cell ran after its checkpoint")

    async def _release_hold(self, kernel_id: str) -> None:
        hold = self._holds.pop(kernel_id, None)
        if hold is not None:
            await hold.release()

    async def _let_go(self, *kernel_ids: str) -> None:
        """After the resume verified (or restored) a kernel that lived on: end its hold, also one a previous
        server left behind (only its hold file is left then), so that the cells waiting in it run now."""
        for kernel_id in kernel_ids:
            await self._release_hold(kernel_id)
            path = self._hold_file(kernel_id)
            for leftover in (path, path + CALL_SUFFIX, path + ANSWER_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(leftover)

    async def _release_holds(self, *, only_stopped: bool = False) -> None:
        """Let held kernels run again (all, or only those already stopped: their clients are closed)."""
        km = self.serverapp.kernel_manager
        for kernel_id in list(self._holds):
            if not only_stopped or kernel_id not in km:
                await self._release_hold(kernel_id)
