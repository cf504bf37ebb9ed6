"""The pause/resume lifecycle of a Jupyter server's notebooks, independent of Tornado.

    active → pausing(checkpointing → snapshotting → releasing) → paused
           → resuming(waiting-for-capacity → restoring → verifying) → active (with verdicts)
    and failed(reason, next step) from any step.

One transition runs at a time: each takes the one Claim (claim.py) synchronously on the event loop before
the first await, so concurrent requests cannot both pass it. Every change of state is checked against the
transition table (states.py), persisted atomically and appended to the event log, off the event loop.

The parts, one job each: persistence.py (the write paths, the table check, the pins), pause.py, holds.py,
resume.py, recovery.py (a starting server), paths.py (the notebook paths a request names).
"""
from __future__ import annotations

import asyncio
import copy
import posixpath

from ..backends.base import LIVE_STATUSES
from ..claim import Claim
# LifecycleError and NotFound: re-exported for callers that still import them from here
from ..errors import Conflict, LifecycleError, NotFound  # noqa: F401
from ..state import StateStore, initial_state, now
from ..states import Event, NotebookStatus, Phase, State, awaiting_resume
from .holds import Holds
from .paths import clean_notebook_paths, moved_path, one_line, under  # noqa: F401  (notebook_actions, handlers)
from .paths import session_path
from .pause import Pause
from .persistence import Persistence, pinned_checkpoints  # noqa: F401  (handlers)
from .recovery import Recovery
from .resume import Resume, mark_lost


class Lifecycle(Pause, Holds, Resume, Recovery, Persistence):
    def __init__(self, *, serverapp, backend, bridge, store: StateStore, checkpoint_root: str,
                 busy_timeout: float = 60.0, keep_last: int = 5, max_bytes: int = 0, log=None, gpu_count: int = 0,
                 kernel_changes=None):
        self.serverapp, self.backend, self.bridge, self.store = serverapp, backend, bridge, store
        #: kernelchanges.KernelChanges of the server's kernel manager (None: nothing counts them)
        self.kernel_changes = kernel_changes
        self.gpu_count = gpu_count  # recorded with each pause: the report turns paused hours into GPU hours
        self.listeners: list = []  # called with (event record, state) after each write (metrics); any thread
        self._take_snapshot = True
        self._continued = None  # (cycle, timeline, paused_by) a pause from paused may go back to (pause.py)
        self.checkpoint_root, self.busy_timeout = checkpoint_root, busy_timeout
        self.keep_last, self.max_bytes, self.log = keep_last, max_bytes, log
        self.state = initial_state(backend.name)
        self._busy = False  # written only by a Claim (claim.py); read it as `busy`
        self._claim: Claim | None = None  # the claim of the transition running now, or of the last one
        self._tasks: set[asyncio.Task] = set()
        self._watch: asyncio.Task | None = None
        self._restore_watch: asyncio.Task | None = None  # a paused process that may wake in a restored Pod
        self._found: str | None = None  # the state a starting server found on disk
        self._write_lock = asyncio.Lock()  # state.json is replaced in the order the changes happened
        self._holds: dict[str, object] = {}  # kernel id -> bridge.Hold: checkpointed, no cell runs until released
        self._pins: dict | None = None  # the checkpoints last pinned in the store (kernel_state.pins)
        self._pins_failing: str | None = None  # why the pins last could not be written (logged once)
        self._in_resume: set[int] = set()  # id() of the notebook entries the running resume brings back
        # id() of the notebook entries deleted (contents API) while the running pause or resume worked on them:
        # that transition ends them as lost (Pause._lost_midway, Resume._deleted_during_resume)
        self._deleted_midway: set[int] = set()

    def status(self) -> dict:
        out = copy.deepcopy(self.state)
        out["busy_timeout"] = self.busy_timeout  # a setting, not state: the page's busy-cell dialog quotes it
        for nb in out["notebooks"]:  # as it is now: a kernel that lives on while paused may be gone since
            gone = gone_while_paused(nb)
            if gone:
                nb["message"] = gone
        return out

    async def shown(self, seconds: float = 5.0) -> dict:
        """The status once a transition that has just taken its claim shows its first state (written to disk
        first, then shown): a 409 for a click in that instant carried the state before, and a second tab's page
        said "Pause failed" where the pause was under way. Bounded: a slow disk answers with what is shown."""
        before, loop = (self.state["state"], self.state["phase"]), asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self._busy and (self.state["state"], self.state["phase"]) == before and loop.time() < deadline:
            await asyncio.sleep(0.02)
        return self.status()

    @property
    def busy(self) -> bool:
        """A transition is running: no other may start (the idle policy waits for it too)."""
        return self._busy

    def note(self, message: str) -> None:
        """Progress shown in status until the next change is written; one line, as every message."""
        self.state["message"] = one_line(message)

    # -- claims: one transition at a time (claim.py) --------------------------------------------------
    def _release_claim(self) -> None:
        """The running transition published its last state: free its claim (once; claim.py)."""
        if self._claim is not None:
            self._claim.release()

    def _spawn_claimed(self, claim: Claim, coro) -> None:
        """Continue a claimed transition in a background task, which owns the claim from now on: it is
        released when the transition publishes its last state, and in any case when the task ends."""
        claim.hand_over()
        self._claim = claim

        async def run():
            try:
                await coro
            finally:
                claim.release()
        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def notebook_renamed(self, old: str, new: str) -> None:
        """The contents service renamed a file or folder: a notebook of the session in it follows, in every
        state (paused, pausing, or still to resume after a resume): it resumes at its new path, from the
        checkpoint taken under its old name (`saved_as`)."""
        moved, lost = [], []
        for nb in self.state["notebooks"]:
            for companion in nb.get("companions", []):  # a second notebook on its kernel
                if under(companion["path"], old):
                    companion["path"] = moved_path(companion["path"], old, new)
                    companion["name"] = posixpath.basename(companion["path"])
                    moved.append(companion["path"])
            if not under(nb["path"], old):
                continue
            if nb.get("checkpoint"):
                nb.setdefault("saved_as", nb["path"])
            nb["path"] = moved_path(nb["path"], old, new)
            nb["name"] = posixpath.basename(nb["path"])
            moved.append(nb["path"])
            for other in self.state["notebooks"]:  # the rename went onto its path: its file was deleted
                if other is not nb and other["path"] == nb["path"] and awaiting_resume(other):
                    mark_lost(other, f"and {old} was renamed to its path since: no kernel will be started for it")
                    lost.append(other["path"])
        if moved:
            await self._persist(Event.NOTEBOOK_RENAMED, old=old, new=new, notebooks=moved)
        for path in lost:  # found deleted now: counted as every notebook deleted while paused (not a resume)
            await self._persist(Event.NOTEBOOK_DELETED, path=path, notebooks=[path], noticed="rename")

    async def notebook_deleted(self, path: str) -> None:
        """The contents service deleted a file or folder: a paused notebook in it whose kernel is gone is
        lost now. A notebook created at its path afterwards is another one: the resume must not restore
        the deleted one's variables into it (it checked only whether a file was there)."""
        lost = []
        for nb in self.state["notebooks"]:
            if not under(nb["path"], path) or nb.get("type") == "console":
                continue
            if id(nb) in self._in_resume or (self.state["state"] == State.PAUSING and not awaiting_resume(nb)):
                # the running pause or resume is at work on it: a pause went on to release it as paused, and a
                # later resume restored its variables into a notebook created at that path since
                self._deleted_midway.add(id(nb))
            elif awaiting_resume(nb) and nb.get("status") in (NotebookStatus.RELEASED, NotebookStatus.FAILED):
                mark_lost(nb, "so no kernel will be started for it, nor its state restored into a notebook "
                              "created at that path since")
                lost.append(nb["path"])
        if lost:
            await self._persist(Event.NOTEBOOK_DELETED, path=path, notebooks=lost)

    async def refuse_released_kernel(self, path, session_type, kernel_id) -> None:
        """A session asked for (POST api/sessions) on the kernel a pause released, by its id or as a console
        at its notebook's path (however written: `/a.ipynb` too): jupyter_server would start an empty kernel for
        it (under that very id), which the resume would then take for the notebook's. Conflict until the
        notebook is resumed; unless a session with a live kernel is at that path already (the notebook was
        reopened while paused): jupyter_server answers with it and starts nothing."""
        km = self.serverapp.kernel_manager
        wanted = session_path(path)
        for nb in self.state["notebooks"]:
            if not awaiting_resume(nb) or nb["kernel_id"] in km:
                continue  # not paused, or its kernel lives on (suspended): a session may join it
            paths = [nb["path"]] + [c["path"] for c in nb.get("companions", [])]
            if kernel_id != nb["kernel_id"] and (session_type == "notebook" or wanted not in paths):
                continue
            if isinstance(path, str) and await self._live_session(path):
                return  # jupyter_server gives that session as it is: no kernel is started
            checkpoint = f"its variables are in checkpoint {nb['checkpoint']}"
            if id(nb) in self._in_resume:
                raise Conflict(f"{nb['path']!r} is being resumed: wait until the session is ready, then open it "
                               f"again (a console or session opened on it now would get a new, empty kernel; "
                               f"{checkpoint}).")
            if isinstance(path, str) and path != nb["path"] and await self._live_session(nb["path"]):
                raise Conflict(f"{nb['path']!r} is paused, and was reopened since: a console or session at "
                               f"{path!r} would get a new, empty kernel; open it at {nb['path']!r} to join the "
                               f"reopened notebook's kernel ({checkpoint}; the resume restores them into it).")
            raise Conflict(f"{nb['path']!r} is paused: the pause released its kernel ({checkpoint}), and a "
                           f"console or session opened on it now would get a new, empty kernel. Resume it first "
                           f"(GPU session: Resume), then open it again.")

    def refuse_kernel_change(self, session_id) -> None:
        """PATCH api/sessions/<id> giving a session another kernel (JupyterLab's "Change Kernel") while the
        pause or the resume works on that session's notebook, or while it is paused: jupyter_server would shut
        down the kernel a pause checkpoints (or holds) and run a new, empty one through the pause, on the GPU
        the status says is released. Conflict until the session is active again."""
        for nb in self.state["notebooks"]:
            sessions = [nb.get("session_id")] + [c.get("session_id") for c in nb.get("companions", [])]
            pausing, resuming = self.state["state"] == State.PAUSING, id(nb) in self._in_resume
            if session_id not in sessions or not (pausing or resuming or awaiting_resume(nb)):
                continue
            keeps = f" (its variables are in checkpoint {nb['checkpoint']})" if nb.get("checkpoint") else ""
            if pausing:
                doing = "is being paused: its kernel is the one the pause checkpoints and releases"
            elif resuming:
                doing = "is being resumed: its kernel is the one the resume brings back"
            else:
                doing = "is paused: resume it first (GPU session: Resume)"
            raise Conflict(f"{nb['path']!r} {doing}{keeps}; change its kernel once the session is active again.")

    def refuse_path_change(self, session_id, path) -> None:
        """PATCH api/sessions/<id> moving another session onto a paused notebook's path (that notebook saved
        over with Save As): the resume restores the path's checkpoint into the kernel a session there has, so
        the moved session's kernel would lose what it holds to the paused one's variables."""
        wanted = session_path(path) if isinstance(path, str) else None
        for nb in self.state["notebooks"]:
            if not awaiting_resume(nb) or nb["path"] != wanted:
                continue
            if session_id in [nb.get("session_id")] + [c.get("session_id") for c in nb.get("companions", [])]:
                return  # the paused notebook's own session (its rename is followed)
            raise Conflict(f"{wanted!r} is paused (its variables are in checkpoint {nb['checkpoint']}), and the "
                           f"resume restores them into the kernel of the session at that path: this session's "
                           f"kernel would lose what it holds. Resume {wanted!r} first, or give this one another "
                           f"name.")

    def refuse_kernel_action(self, kernel_id: str, action: str) -> None:
        """POST api/kernels/<id>/restart or interrupt on a kernel a pause released: jupyter_server answered 500
        ("Exception restarting kernel") or 404. Conflict, saying that the notebook is paused and what to do."""
        if self.state["state"] == State.PAUSING and self.state.get("phase") == Phase.RELEASING:
            for nb in self.state["notebooks"]:
                if nb["kernel_id"] == kernel_id and nb.get("status") == NotebookStatus.CHECKPOINTED:
                    # the release shuts it down (or suspends it) now: a restart raced with that, and left a
                    # new process running cells under "paused", or failed the pause
                    raise Conflict(f"{nb['path']!r} is being paused: its checkpoint is written and its kernel is "
                                   f"being released; wait for the pause to finish, then resume it (GPU session: "
                                   f"Resume) to {action} it")
        resuming = [nb for nb in self.state["notebooks"] if nb["kernel_id"] == kernel_id and id(nb) in self._in_resume]
        if kernel_id in self.serverapp.kernel_manager and not resuming:
            held = [nb for nb in self.state["notebooks"] if nb["kernel_id"] == kernel_id and
                    nb.get("status") in LIVE_STATUSES and not gone_while_paused(nb)]
            if held and action == "interrupt":  # the hold does not take it: the cell ran in full after Resume
                raise Conflict(f"{held[0]['path']!r} is paused: its kernel lives on, held with the cells sent to "
                               f"it, which run after Resume; an interrupt now reaches none of them: interrupt "
                               f"after Resume (GPU session: Resume)")
            return  # it runs (suspended, or started again): jupyter_server acts on it (a restart ends it)
        # ... but not while the resume restores into it: an interrupt then killed the kernel still starting, a
        # restart lost the restore, and the notebook ended failed ("died during the call") without a word of why
        for nb in self.state["notebooks"]:
            if (awaiting_resume(nb) or id(nb) in self._in_resume) and nb["kernel_id"] == kernel_id:
                if id(nb) in self._in_resume:
                    raise Conflict(f"{nb['path']!r} is being resumed: wait until its session is ready; its kernel "
                                   f"is being brought back from checkpoint {nb['checkpoint']}, and to {action} it "
                                   f"now would lose that.")
                raise Conflict(f"{nb['path']!r} is paused: resume it first (GPU session: Resume); the pause "
                               f"released its kernel, so there is no process to {action} (its variables are in "
                               f"checkpoint {nb['checkpoint']}).")

    async def _live_session(self, path: str) -> dict | None:
        """The session at path (exactly, as jupyter_server looks it up) whose kernel runs, if any."""
        km = self.serverapp.kernel_manager
        for session in await self.serverapp.session_manager.list_sessions():
            if session.get("path") == path and (session.get("kernel") or {}).get("id") in km:
                return session
        return None

    #: seconds a server asked to stop (SIGTERM: `jupyter server stop`, a Pod's eviction, whose grace period is
    #: 30 s by default) lets a running pause go on: its checkpoints take seconds, and the kernels stop next
    stop_wait = 20.0

    async def shutdown(self) -> None:
        if self.state["state"] == State.PAUSING and self._tasks:
            # a pause cut here lost every notebook not checkpointed yet, though each would have taken moments
            await asyncio.wait(list(self._tasks), timeout=self.stop_wait)
        if self.state["state"] == State.PAUSING:
            await self._stopping_mid_pause()
        # held kernels stay held: the server stopping shuts them down, and a restart rolls the pause forward
        if self._watch:
            self._watch.cancel()
        if self._restore_watch:
            self._restore_watch.cancel()
        for task in list(self._tasks):
            task.cancel()

    async def _stopping_mid_pause(self) -> None:
        """The kernels stop with this server: the pause's release begins now, not when a restarted server
        completes the pause (the report's hours began at that restart), so the state on disk says when."""
        self.state["timeline"]["environment_stopped"] = now()
        snapshot = copy.deepcopy(self.state)
        try:
            async with self._write_lock:
                await asyncio.to_thread(self.store.save, snapshot)
        except OSError as exc:  # a full volume: the restart takes its own time instead, as before
            if self.log:
                self.log.warning("gkews: the stop during the pause could not be recorded: %s", exc)


def gone_while_paused(nb: dict) -> str | None:
    """What to say of a notebook whose kernel was to live on while paused (GPU suspend) and whose process is
    gone: shut down or restarted (api/kernels, the page), or killed. The death watch says so only when
    Jupyter's restarter sees it; the resume restores such a notebook from its checkpoint either way."""
    gpu = nb.get("gpu") or {}
    if nb.get("status") not in LIVE_STATUSES or "kernel_pid" not in gpu or nb.get("gpu_fallback"):
        return None
    from ..gpu_suspend.procs import same_process
    if same_process(gpu["kernel_pid"], gpu.get("kernel_start")):
        return None
    return (f"its kernel process {gpu['kernel_pid']} is gone (shut down, restarted or ended while paused); resume "
            "restores it from its checkpoint")
