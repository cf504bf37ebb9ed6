"""A notebook's checkpoints follow it through a rename of the notebook, or of a folder holding it.

The contents service's rename event (app.py) comes here, running or not, paused or not:

- the store moves each renamed notebook's checkpoints to its new path's key (kernel_state.store's
  move_notebook: one step, under the store's exclusive lock, never over another notebook's history),
  off the event loop and one rename after the other;
- every session in the renamed file or folder moves to its new path (SessionManager.update_session), as
  JupyterLab's own session PATCH would: a rename through the contents API alone (a closed tab whose kernel
  runs on, any REST client) left the session at the old path, so that the pause recorded a notebook whose
  file was gone and the resume lost it. update_session also gives the kernel's next start its new
  GKEWS_NOTEBOOK (app.py): a restart saves under the new name. A notebook's session name (its file's name)
  follows the file; a console's ("Console 1") stays. A session already at the new path (its client moved it
  first), or moved there meanwhile, is left as it is: the two ways agree, in either order;
- every running kernel whose session is at the old path (or already at the new one: a client may move the
  session first) is told (kernel_state.api "rename"), so that its magic, kernel undo and saves without a
  name go to the new path from then on. The call is queued behind a cell that runs (bridge.send) and
  answered from a pause's hold; what the kernel saved under the old name meanwhile joins the rest.

A paused notebook also keeps the name its checkpoint was taken under (`saved_as`, lifecycle): the store
still finds that checkpoint's id by that name after the move.
"""
from __future__ import annotations

import asyncio
import posixpath
import time

from kernel_state.store import Store

from .bridge import hold_file
from .errors import KernelCallError, KernelStateMissing
from .lifecycle.paths import moved_path, one_line, session_path, under


def move_checkpoints(root: str, old: str, new: str, timeout: float, log=None) -> dict[str, list[str]]:
    """Move the checkpoints of old (a notebook, or every notebook inside the folder old) to their new paths;
    {new path: checkpoint ids moved}. Blocking: run it in a thread."""
    done = {}
    for target, result in Store(root).move_folder(old, new, timeout=timeout).items():
        if result.get("error"):
            if log:
                log.warning("gkews: %s", one_line(f"the checkpoints of {result['from']} did not follow its rename "
                                                  f"to {target}: {result['error']}"))
        elif result["moved"]:
            done[target] = result["moved"]
    return done


class Renames:
    """Follows the renames of one server (app.py calls renamed() for each, in the order they happen)."""

    def __init__(self, *, serverapp, bridge, checkpoint_root: str, timeout: float, log=None, notebooks=None):
        self.serverapp, self.bridge, self.checkpoint_root = serverapp, bridge, checkpoint_root
        self.timeout, self.log = timeout, log
        # the lifecycle's notebooks: a kernel its resume has started has no session yet (the resume makes it)
        self.notebooks = notebooks or (lambda: [])
        self._moves = asyncio.Lock()  # one store move at a time, in the order of the renames
        self._sessions = asyncio.Lock()  # the sessions follow one rename after the other, in order
        self._tasks: set[asyncio.Task] = set()
        self._moving: set[asyncio.Future] = set()  # the store moves not done yet

    def renamed(self, old: str, new: str) -> asyncio.Task:
        """Start following the rename of old to new; call it on the event loop as the event arrives."""
        order = time.time()  # the kernels apply renames in this order, whichever reaches them first
        move = asyncio.ensure_future(self._move(old, new))  # takes its place in the lock's queue now
        task = asyncio.ensure_future(self._follow(old, new, order, move))
        for t in (move, task):
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        self._moving.add(move)
        move.add_done_callback(self._moving.discard)
        return task

    async def moved(self, timeout: float) -> None:
        """Wait (at most timeout seconds) until the checkpoints of every rename so far are moved: a list read
        just after a rename (the page's sidebar reads it as the rename reaches it) shows them under the new
        name, not the old one. The kernels' part (_tell) may wait behind a running cell: not waited for."""
        if self._moving:
            await asyncio.wait(list(self._moving), timeout=timeout)

    async def _follow(self, old: str, new: str, order: float, move: asyncio.Future) -> None:
        async with self._sessions:  # taken at once by the first rename's task: the renames' order
            await self._move_sessions(old, new)
            kernels = await self._kernels(old, new)
        await asyncio.gather(move, *(self._tell(kid, path, old, new, order) for kid, path in kernels.items()),
                             return_exceptions=True)

    async def _move(self, old: str, new: str) -> None:
        async with self._moves:
            try:
                done = await asyncio.to_thread(move_checkpoints, self.checkpoint_root, old, new, self.timeout,
                                               self.log)
            except Exception as exc:  # the store unreadable: said, and the next rename tries again
                if self.log:
                    self.log.warning("gkews: %s", one_line(f"the checkpoints under {old} could not follow its "
                                                           f"rename to {new}: {exc}"))
                return
        if done and self.log:
            moved = "; ".join(f"{path} ({len(ids)})" for path, ids in done.items())
            self.log.info("gkews: %s", one_line(f"{old} renamed {new}: checkpoints moved: {moved}"))

    async def _move_sessions(self, old: str, new: str) -> None:
        """Every session in the renamed file or folder goes to its new path."""
        sm = self.serverapp.session_manager
        for s in await sm.list_sessions():
            path = session_path(s["path"])  # `/a.ipynb` is a.ipynb to the contents API
            if not under(path, old) or old == new:  # one moved by its client already is at new: not in old
                continue
            changes = {"path": moved_path(path, old, new)}
            if path == old and s.get("name") == posixpath.basename(old):  # a notebook's name: its file's
                changes["name"] = posixpath.basename(new)
            try:
                await sm.update_session(s["id"], **changes)
            except Exception as exc:  # the session ended meanwhile, or the database refused
                if self.log:
                    self.log.warning("gkews: %s", one_line(f"the session of {path} did not follow its rename to "
                                                           f"{changes['path']}: {exc}"))
                continue
            if self.log:
                self.log.info("gkews: %s", one_line(f"the session of {path} follows its rename to {changes['path']}"))

    async def _kernels(self, old: str, new: str) -> dict[str, str]:
        """kernel id -> session path of the running kernels of notebooks in the renamed file or folder."""
        km = self.serverapp.kernel_manager
        out = {}
        for s in await self.serverapp.session_manager.list_sessions():
            kid = (s.get("kernel") or {}).get("id")
            path = session_path(s["path"])
            if kid and kid in km and (under(path, old) or under(path, new)):
                out[kid] = path
        for nb in self.notebooks():  # one being restored: told too, or it saved under the old name afterwards
            kid, path = nb.get("kernel_id"), nb.get("path", "")
            if kid and kid in km and kid not in out and (under(path, old) or under(path, new)):
                out[kid] = path
        return out

    async def _tell(self, kernel_id: str, path: str, old: str, new: str, order: float) -> None:
        request = {"op": "rename", "old": old, "new": new, "order": order, "root": self.checkpoint_root,
                   "timeout": self.timeout}
        try:
            result = await self.bridge.send(kernel_id, request, label=path, timeout=self.timeout,
                                            hold_file=hold_file(self.serverapp.runtime_dir, kernel_id))
        except KernelStateMissing:
            return  # no kernel_state there: it saves no checkpoints under any name
        except KernelCallError as exc:
            if self.log:
                now = moved_path(path, old, new) if under(path, old) else path
                self.log.warning("gkews: %s", one_line(f"the kernel of {path} was not told of its rename to {now}: "
                                                       f"{exc}"))
            return
        if self.log:
            meanwhile = f" (and moved {len(result['moved'])} checkpoint(s) it saved meanwhile)" \
                if result["moved"] else ""
            self.log.info("gkews: %s", one_line(f"the kernel of {path} now saves as {result['notebook']}{meanwhile}"))
            if result.get("error"):
                self.log.warning("gkews: %s", one_line(result["error"]))

    def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def idle(self) -> None:
        """Wait until every rename so far is followed (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
