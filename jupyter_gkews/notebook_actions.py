"""What the UI does to one notebook's running kernel outside a pause: checkpoint it now, or restore one
of its checkpoints into it. Both go through the kernel bridge, so the kernel does the (un)pickling."""
from __future__ import annotations

import asyncio
import urllib.parse

from .bridge import kernel_leaving
from .checkpoints import CheckpointCatalog
from .errors import Conflict, KernelCallError, NotFound, from_kernel
from .lifecycle import clean_notebook_paths
from .lifecycle.paths import session_path
from .states import NotebookStatus, State, awaiting_resume

#: seconds a kernel seen running a cell may take to be seen idle before a call into it is refused
BUSY_GRACE = 2.0


#: what a call into the kernel was doing, for a message
OPERATIONS = {"save": "took a checkpoint", "restore": "restored a checkpoint", "auto": "read or switched automatic "
              "checkpoints", "rewind": "rewound", "verify": "verified a checkpoint"}


class NotebookActions:
    def __init__(self, lifecycle):
        self.lifecycle = lifecycle

    def _notebook(self, body: dict) -> str:
        """The body's notebook (its shape checked by schema.REQUESTS), normalised inside the root."""
        return clean_notebook_paths([body["notebook"]])[0]

    async def _kernel_of(self, notebook: str) -> str:
        state = self.lifecycle.state["state"]
        if state in (State.PAUSING, State.RESUMING):
            raise Conflict(f"the session is {state}; wait for it to finish, then try again")
        # the kernel the pause released, or holds (GPU suspend: a call would wait in that hold as long as it
        # lasts); a notebook reopened since has a kernel of its own, which runs cells
        waiting = [nb for nb in self.lifecycle.state["notebooks"] if nb["path"] == notebook and awaiting_resume(nb)]
        paused = {nb["kernel_id"] for nb in waiting}
        kernels = [s["kernel"]["id"] for s in await self.lifecycle.serverapp.session_manager.list_sessions()
                   if session_path(s["path"]) == notebook and (s.get("kernel") or {}).get("id")]
        if paused and (not kernels or kernels[0] in paused):
            if all(nb["status"] == NotebookStatus.FAILED for nb in waiting):  # its kernel may well run cells
                raise Conflict(f"{notebook!r} is still to be resumed from its checkpoint: its last resume failed "
                               f"(its error says why). Resume it first (GPU session: Resume), or name it in a pause "
                               f"to checkpoint the kernel it runs now instead; nothing was changed")
            raise Conflict(f"{notebook!r} is paused: its kernel is not running cells until it is resumed. Resume it "
                           f"first (GPU session: Resume), then try again; nothing was changed")
        if not kernels:
            raise Conflict(f"{notebook!r} has no running kernel; open the notebook and start its kernel")
        await self._refuse_busy(kernels[0], notebook)
        return kernels[0]

    async def _refuse_busy(self, kernel_id: str, notebook: str) -> None:
        """A call into a kernel that runs a cell would wait behind it (a restore would then overwrite what
        the cell computed): refuse, with the way out. The server learns that a cell ended from the kernel's
        last IOPub message, which can arrive a little after the cell's reply: a kernel still "busy" is
        given BUSY_GRACE seconds to turn idle first, so a click right after a cell is not refused."""
        km = self.lifecycle.serverapp.kernel_manager
        deadline = asyncio.get_running_loop().time() + BUSY_GRACE
        while kernel_id in km and km.get_kernel(kernel_id).execution_state == "busy":
            if asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
                continue
            raise Conflict(f"the kernel of {notebook!r} is running a cell; wait for it to finish (or interrupt "
                           f"it), then try again; nothing was changed")

    async def _call(self, kernel_id: str, notebook: str, request: dict) -> dict:
        lc = self.lifecycle
        try:
            return await lc.bridge.call(kernel_id, {"notebook": notebook, "root": lc.checkpoint_root, **request},
                                        label=notebook)
        except KernelCallError as exc:  # the type kernel_state raised decides (CheckpointNotFound: 404)
            if kernel_leaving(lc.serverapp.kernel_manager, kernel_id):  # its KeyboardInterrupt is the shutdown's
                doing = OPERATIONS.get(request["op"], request["op"])
                why = "by a pause: resume it first" if lc.state["state"] in (State.PAUSING, State.PAUSED) else \
                    "(Shut Down Kernel, a restart): start it again"
                raise Conflict(f"the kernel of {notebook!r} was shut down while it {doing}, so that did not finish; "
                               f"it was shut down {why}, then try again") from None
            raise from_kernel(exc, "; the kernel and its variables are unchanged unless it says otherwise") from None

    async def checkpoint_now(self, body: dict) -> dict:
        notebook = self._notebook(body)
        kernel_id = await self._kernel_of(notebook)
        lc = self.lifecycle
        result = await self._call(kernel_id, notebook, {"op": "save", "keep_last": lc.keep_last,
                                                        "max_bytes": lc.max_bytes})
        return {"notebook": notebook, **result}

    async def restore(self, checkpoint_id: str, body: dict) -> dict:
        """checkpoint_id matched schema.CHECKPOINT_ID in the route."""
        notebook = self._notebook(body)
        kernel_id = await self._kernel_of(notebook)
        try:
            result = await self._call(kernel_id, notebook, {"op": "restore", "checkpoint": checkpoint_id})
        except NotFound:
            # the kernel's own message points to its magic; a client of this route lists over REST, and an id
            # of another notebook's is a mix-up worth naming
            owner = await asyncio.to_thread(CheckpointCatalog(self.lifecycle.checkpoint_root).owner, checkpoint_id)
            listing = f"GET gkews/checkpoints?notebook={urllib.parse.quote(notebook)} lists those of {notebook!r}"
            if owner is not None and owner != notebook:
                raise NotFound(f"checkpoint {checkpoint_id} is one of the checkpoints of {owner!r}, not of "
                               f"{notebook!r}: restore it into {owner!r}, or pick one of {notebook!r} ({listing}); "
                               f"nothing was changed") from None
            raise NotFound(f"no checkpoint {checkpoint_id} for notebook {notebook!r} ({listing}); nothing was "
                           f"changed") from None
        return {"notebook": notebook, "checkpoint": checkpoint_id, **result}

    async def auto(self, body: dict) -> dict:
        """Kernel undo, per notebook: turn automatic checkpoints on or off in its kernel, or read their state."""
        notebook = self._notebook(body)
        action = body.get("action", "status")  # the schema ("auto") allows only on, off and status
        kernel_id = await self._kernel_of(notebook)
        result = await self._call(kernel_id, notebook, {"op": "auto", "action": action})
        return {"notebook": notebook, **result}

    async def rewind(self, body: dict) -> dict:
        """Bring the notebook's kernel back to the end of cell [N] of this kernel, or to the automatic checkpoint
        named (labelled [N]; of an earlier kernel process too), its state before checkpointed first."""
        notebook = self._notebook(body)
        cell = body["cell"]  # the schema ("rewind") requires a whole number from 1
        kernel_id = await self._kernel_of(notebook)
        request = {"op": "rewind", "cell": cell}
        if body.get("checkpoint"):
            request["checkpoint"] = body["checkpoint"]
        result = await self._call(kernel_id, notebook, request)
        return {"notebook": notebook, **result}
