"""The pause/resume lifecycle of a Jupyter server's notebooks, independent of Tornado.

    active → pausing(checkpointing → snapshotting → releasing) → paused
           → resuming(waiting-for-capacity → restoring → verifying) → active (with verdicts)
    and failed(reason, next step) from any step.

One transition runs at a time: the claim is taken synchronously on the event loop before the first
await, so concurrent requests cannot both pass it. Every change of state is persisted atomically and
appended to the event log (blocking file work runs in a thread, off the event loop).
"""
from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import posixpath
import time

from kernel_state.pins import write_pins
from kernel_state.timestamps import utc_epoch

from .backends.base import LIVE_STATUSES, SnapshotFailed
from .bridge import hold_file
from .claim import Claim
# LifecycleError and NotFound: re-exported for callers that still import them from here
from .errors import BadRequest, Conflict, KernelCallError, LifecycleError, NotFound, StateNotWritable  # noqa: F401
from .journal import event_record
from .state import StateStore, initial_state, now
from .states import PAUSE_FROM, RESUME_FROM, State, check_transition


def clean_notebook_paths(paths) -> list[str] | None:
    """Paths relative to the contents root, normalised; anything that could leave the root is refused."""
    if paths is None:
        return None
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise BadRequest('"notebooks" must be a list of notebook paths relative to the contents root')
    out = []
    for p in paths:
        # a backslash is an ordinary character of a POSIX file name (run\1.ipynb), but never a way out
        escape = posixpath.normpath(p.replace("\\", "/"))
        if p.startswith(("/", "~", "\\")) or escape == ".." or escape.startswith("../") or "\0" in p:
            raise BadRequest(f"notebook path {p!r} is outside the contents root; give a path relative to it")
        norm = posixpath.normpath(p)
        if norm not in out:  # a notebook named twice is paused (and resumed) once
            out.append(norm)
    return out


class Lifecycle:
    def __init__(self, *, serverapp, backend, bridge, store: StateStore, checkpoint_root: str,
                 busy_timeout: float = 60.0, keep_last: int = 5, max_bytes: int = 0, log=None, gpu_count: int = 0):
        self.serverapp, self.backend, self.bridge, self.store = serverapp, backend, bridge, store
        self.gpu_count = gpu_count  # recorded with each pause: the report turns paused hours into GPU hours
        self.listeners: list = []  # called with (event record, state) after each write (metrics); any thread
        self._take_snapshot = True
        self.checkpoint_root, self.busy_timeout = checkpoint_root, busy_timeout
        self.keep_last, self.max_bytes, self.log = keep_last, max_bytes, log
        self.state = initial_state(backend.name)
        self._busy = False  # written only by a Claim (claim.py); read it as `busy`
        self._claim: Claim | None = None  # the claim of the transition running now, or the last one
        self._tasks: set[asyncio.Task] = set()
        self._watch: asyncio.Task | None = None
        self._restore_watch: asyncio.Task | None = None  # a paused process that may wake in a restored Pod
        self._found: str | None = None  # the state a starting server found on disk
        self._write_lock = asyncio.Lock()  # state.json is replaced in the order the changes happened
        self._holds: dict[str, object] = {}  # kernel id -> bridge.Hold: checkpointed, no cell runs until released
        self._pins: dict | None = None  # the checkpoints last pinned in the store (kernel_state.pins)

    # -- status and persistence ---------------------------------------------------------------------
    def status(self) -> dict:
        return copy.deepcopy(self.state)

    @property
    def busy(self) -> bool:
        """A transition is running: no other may start (the idle policy waits for it too)."""
        return self._busy

    async def _persist(self, event: str, **details) -> None:
        self.state["updated"] = now()
        snapshot = copy.deepcopy(self.state)
        record = event_record(snapshot, event, **details)
        async with self._write_lock:
            await asyncio.to_thread(self._write, snapshot, record)

    async def _write_then_publish(self, apply, event: str, **details) -> None:
        """Write a change to disk first and only then show it in status: whoever reads it from status
        finds it (and its event) on disk too."""
        pending = copy.deepcopy(self.state)
        apply(pending)
        pending["updated"] = now()
        record = event_record(pending, event, **details)
        async with self._write_lock:
            await asyncio.to_thread(self._write, pending, record)
        apply(self.state)
        self.state["updated"] = pending["updated"]

    def _write(self, snapshot: dict, record: dict) -> None:
        self._write_pins(snapshot)  # before the state: a paused state on disk always has its pins
        self.store.save(snapshot)
        self.store.append_event(record)
        for listener in self.listeners:
            listener(record, snapshot)

    async def _enter(self, state: str, phase: str | None, message: str, event: str, *, final: bool = False,
                     **details) -> None:
        """Move to a state. The last step of a transition (final) is written to disk before anyone can
        see it, and the claim is released at that same moment: whoever reads "paused" may resume at once."""
        check_transition(self.state["state"], state, phase)  # IllegalTransition: a bug, never bad input
        changes = {"state": state, "phase": phase, "message": message}
        if state != "failed":
            changes["error"] = None
        if final:
            changes["progress"] = None

            def apply(state):
                state.update(changes)
            await self._write_then_publish(apply, event, message=message, **details)
            self._release_claim()
            return
        self.state.update(changes)
        await self._persist(event, message=message, **details)

    def _write_pins(self, snapshot: dict) -> None:
        """Pin in the checkpoint store every checkpoint a notebook of this state would resume from, so that
        no delete, retention or cleanup (server or kernel) removes it; unpin them once active again."""
        needed = {} if snapshot["state"] == "active" else {
            nb["checkpoint"]: nb["path"] for nb in snapshot["notebooks"]
            if nb.get("checkpoint") and nb.get("status") != "resumed"}
        if needed != self._pins:
            write_pins(self.checkpoint_root, self.store.directory, needed)
            self._pins = needed

    def note(self, message: str) -> None:
        self.state["message"] = message

    async def _begin(self, apply, event: str, **details) -> None:
        """The first step of a transition, on disk before it shows in status. When the state cannot be
        written (a full volume), nothing changed: the claim is freed and the caller hears why."""
        try:
            await self._write_then_publish(apply, event, **details)
        except OSError as exc:
            raise StateNotWritable(
                f"the state directory {self.store.directory} cannot be written ({exc.strerror or exc}"
                f"{': ' + exc.filename if exc.filename else ''}); free space there or fix its permissions, "
                f"then try again. Nothing was changed.") from None

    async def _fail(self, reason: str, next_step: str) -> None:
        self.state["error"] = {"reason": reason, "next_step": next_step}
        try:
            await self._enter("failed", None, f"{reason} {next_step}", "failed", final=True, reason=reason)
        except OSError as exc:  # not even this could be written (a full volume): status still tells
            if self.log:
                self.log.error("gkews: cannot record the failure in %s: %s", self.store.directory, exc)
            self.state.update(state="failed", phase=None, progress=None, message=(
                f"{reason} {next_step} (This failure could not be recorded: the state directory "
                f"{self.store.directory} cannot be written: {exc.strerror or exc}.)"))
        finally:
            self._release_claim()

    def _still_running(self, notebooks: list[dict]) -> str:
        """What a failed pause left running, said truthfully (a kernel may have died meanwhile)."""
        km = self.serverapp.kernel_manager
        gone = [nb["path"] for nb in notebooks if nb["kernel_id"] not in km]
        if not gone:
            return "every kernel is still running"
        return (f"the kernel of {', '.join(gone)} is gone (open the notebook again and re-run its cells)"
                + ("; the others are still running" if len(gone) < len(notebooks) else ""))

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

    # -- pause ----------------------------------------------------------------------------------------
    async def request_pause(self, notebooks=None, interrupt: bool = False, *, reason: str = "user",
                            snapshot: bool = True, last_activity: float | None = None) -> dict:
        """reason and snapshot come from the idle policy (which also knows terminal activity, hence
        last_activity); a user's request takes the defaults."""
        if not isinstance(interrupt, bool):
            raise BadRequest('"interrupt" must be true or false')
        wanted = clean_notebook_paths(notebooks)
        async with Claim(self, "pause", PAUSE_FROM) as claim:
            targets = await self._running_notebooks(wanted)
            if not targets:
                raise Conflict("nothing to pause: no notebook has a running kernel")
            if last_activity is None:
                last_activity = self._last_activity(targets)
            self._take_snapshot = snapshot
            message, requested = f"checkpointing {len(targets)} notebook(s)", now()

            def begin(state):
                state.update(cycle=state["cycle"] + 1, notebooks=targets, progress=None, state="pausing",
                             phase="checkpointing", message=message, error=None,
                             timeline={"last_activity": last_activity, "pause_requested": requested})
            await self._begin(begin, "pause-requested", message=message, notebooks=[nb["path"] for nb in targets],
                              interrupt=interrupt, reason=reason, last_activity=last_activity,
                              gpus=self.gpu_count, snapshot=snapshot)
            self._spawn_claimed(claim, self._pause(interrupt))
        return self.status()

    async def _running_notebooks(self, wanted: list[str] | None) -> list[dict]:
        sessions = await self.serverapp.session_manager.list_sessions()
        found = {}
        for s in sessions:
            if s.get("kernel") and s["kernel"].get("id"):
                found[s["path"]] = {"path": s["path"], "name": s["name"], "type": s["type"],
                                    "session_id": s["id"], "kernel_id": s["kernel"]["id"],
                                    "kernel_name": s["kernel"]["name"], "status": "running"}
        if wanted is None:
            return list(found.values())
        missing = [p for p in wanted if p not in found]
        if missing:
            raise BadRequest(f"no running kernel for {', '.join(map(repr, missing))}; "
                             f"open the notebook and start its kernel, or leave it out")
        return [found[p] for p in wanted]

    def _last_activity(self, notebooks: list[dict]) -> float | None:
        km = self.serverapp.kernel_manager
        times = [getattr(km.get_kernel(nb["kernel_id"]), "last_activity", None)
                 for nb in notebooks if nb["kernel_id"] in km]
        times = [t.timestamp() for t in times if t is not None]
        return round(max(times), 3) if times else None

    async def _pause(self, interrupt: bool) -> None:
        try:
            notebooks = self.state["notebooks"]
            for i, nb in enumerate(notebooks):
                self.state["progress"] = {"notebook": nb["path"], "notebooks_done": i,
                                          "notebooks_total": len(notebooks)}
                await self._checkpoint(nb, interrupt)
                await self._persist("notebook-checkpointed" if nb["status"] == "checkpointed"
                                    else "notebook-not-checkpointed", path=nb["path"], error=nb.get("error"),
                                    bytes=nb.get("bytes"), seconds=nb.get("seconds"))
            self.state["progress"] = None
            await self._renew_broken_holds(notebooks, interrupt)
            self.state["timeline"]["checkpoint_done"] = now()
            done = [nb for nb in notebooks if nb["status"] == "checkpointed"]
            left = [nb for nb in notebooks if nb["status"] != "checkpointed"]
            if notebooks and not done:
                await self._fail("No notebook could be checkpointed, so nothing was released: "
                                 + "; ".join(f"{nb['path']}: {nb['error']}" for nb in left) + ".",
                                 f"Fix the cause above and pause again; {self._still_running(notebooks)}.")
                return
            snapshot = None
            if self._take_snapshot:  # an idle policy may ask for the checkpoint only
                await self._enter("pausing", "snapshotting", "taking a snapshot", "snapshotting")
                try:
                    snapshot = await self.backend.snapshot(done)
                except SnapshotFailed as exc:
                    if self.backend.abort_on_snapshot_failure:
                        await self._fail(f"The snapshot failed: {exc}.", "Nothing was released: every kernel is "
                                         "still running and the checkpoints are kept. Fix the cause and pause again.")
                        return
                    snapshot = {"status": "failed", "error": str(exc), "resume_from": "checkpoint"}
                    await self._persist("snapshot-failed", error=str(exc))
            self.state["snapshot"] = snapshot
            self.state["timeline"]["snapshot_ready"] = now() if snapshot and snapshot.get("status") == "ready" else None
            # the code that asked for the snapshot is inside it: a restored copy wakes up here
            if await self._resume_if_restored(done):
                return
            await self._enter("pausing", "releasing", "releasing the kernels", "releasing", snapshot=snapshot)
            await self._renew_broken_holds(done, interrupt)  # the snapshot took a while: look once more
            left += [nb for nb in done if nb["status"] != "checkpointed"]
            done = [nb for nb in done if nb["status"] == "checkpointed"]
            # a kernel that lives on (GPU suspend) stays held while paused: no cell runs in it unnoticed
            released = await self.backend.release(done) or {}
            await self._release_holds(only_stopped=True)
            if await self._resume_if_restored(done):
                return
            for nb in done:
                nb["status"] = "released"
                nb.update(released.get(nb["path"], {}))  # a kernel may live on (GPU suspend): its status, message
            self.state["timeline"]["environment_stopped"] = now()
            message = f"paused {len(done)} notebook(s)"
            if snapshot and snapshot.get("status") == "failed":
                message += f"; the snapshot failed ({snapshot['error']}), so the resume will restore the " \
                           "kernels from their application checkpoints"
            if any(nb["status"] in LIVE_STATUSES for nb in done):
                message += "; " + "; ".join(f"{nb['path']}: {nb['message']}" for nb in done)
            if left:
                message += "; still running, not paused: " + "; ".join(f"{nb['path']} ({nb['error']})" for nb in left)
            await self._enter("paused", None, message, "paused", final=True, timeline=dict(self.state["timeline"]))
            self._watch_for_restore()
        except Exception as exc:  # an unexpected failure must still leave a state a person can act on
            if self.log:
                self.log.exception("gkews: pause failed")
            await self._fail(f"The pause stopped at {self.state['phase']}: {type(exc).__name__}: {exc}.",
                             "Check the server log; the checkpoints already written are kept. Pause again.")
        finally:
            if self.state["state"] != "paused":  # the kernels go on: let them run the cells waiting
                await self._release_holds()

    async def _renew_broken_holds(self, notebooks: list[dict], interrupt: bool) -> None:
        """A checkpointed kernel that left its hold (its user interrupted it) may have run a cell since its
        checkpoint: take that checkpoint again, so that no cell's effect is lost."""
        for nb in notebooks:
            hold = self._holds.get(nb["kernel_id"])
            if nb["status"] != "checkpointed" or (hold is not None and not hold.ended):
                continue
            await self._release_hold(nb["kernel_id"])
            await self._checkpoint(nb, interrupt)
            await self._persist("notebook-checkpointed-again" if nb["status"] == "checkpointed"
                                else "notebook-not-checkpointed", path=nb["path"], error=nb.get("error"),
                                why="a cell ran after its checkpoint")

    async def _release_hold(self, kernel_id: str) -> None:
        hold = self._holds.pop(kernel_id, None)
        if hold is not None:
            await hold.release()

    async def _unhold(self, notebooks: list[dict]) -> None:
        """Before a resume talks to a kernel that lived on (GPU suspend): end its hold, also one a previous
        server left behind (its hold file), or every request would wait behind it."""
        await self._release_holds()
        for nb in notebooks:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._hold_file(nb["kernel_id"]))

    async def _release_holds(self, *, only_stopped: bool = False) -> None:
        """Let held kernels run again (all, or only those already stopped: their clients are closed)."""
        km = self.serverapp.kernel_manager
        for kernel_id in list(self._holds):
            if not only_stopped or kernel_id not in km:
                await self._release_hold(kernel_id)

    async def _resume_if_restored(self, notebooks: list[dict]) -> bool:
        """Ask the backend whether this process now runs in a restored environment; if so, take the resume
        path (verify every kernel, fall back to its checkpoint) instead of finishing the pause."""
        found = await self.backend.restored()
        if not found:
            return False
        await self._resume_restored(notebooks, found)
        return True

    async def _resume_restored(self, notebooks: list[dict], found: dict) -> None:
        await self._release_holds()  # a restored kernel wakes up held: it must answer the verification
        self.state["timeline"].update(resume_requested=now(), capacity_obtained=now())
        self.state["restored_from"] = found
        await self._enter("resuming", "restoring", f"this process was restored from a snapshot ({found['reason']}): "
                          "verifying every kernel", "restored-detected", evidence=found)
        await self._resume(notebooks, why="restored from a snapshot", acquired=True)

    def _watch_for_restore(self) -> None:
        """A paused process may wake up later in a restored Pod (the snapshot was taken after the pause, as
        the GKE Workspaces add-on does): the backend says when, and the resume path runs."""
        async def watch():
            found = await self.backend.wait_restored()
            if not found:
                return
            try:  # a request may have taken the session meanwhile: then it is not ours to resume
                claim = Claim(self, "resume a restored snapshot", (State.PAUSED,)).take()
            except Conflict:
                return
            self._spawn_claimed(claim, self._resume_restored(
                [nb for nb in self.state["notebooks"] if nb["status"] == "released" and nb.get("checkpoint")], found))
        if self._restore_watch:
            self._restore_watch.cancel()
        self._restore_watch = asyncio.create_task(watch())

    async def _wait_idle(self, nb: dict, interrupt: bool) -> bool:
        """Wait (bounded) for the kernel to finish its cell; with interrupt, interrupt it once and wait
        once more. False, with the reason in nb, when it is still busy."""
        km = self.serverapp.kernel_manager
        deadline = time.monotonic() + self.busy_timeout
        while nb["kernel_id"] in km and km.get_kernel(nb["kernel_id"]).execution_state == "busy":
            if time.monotonic() >= deadline:
                if not interrupt:
                    nb.update(status="busy", error=f"its kernel was still running a cell after "
                              f"{self.busy_timeout:.0f} s; let it finish and pause again, or pause with "
                              f"interrupt to stop the cell")
                    return False
                if nb.get("interrupted"):
                    nb.update(status="busy", error=f"its cell ignored the interrupt for {self.busy_timeout:.0f} s "
                              f"and is still running; stop it by hand (or restart the kernel) and pause again")
                    return False
                await km.interrupt_kernel(nb["kernel_id"])
                nb["interrupted"] = True
                deadline = time.monotonic() + self.busy_timeout
            await asyncio.sleep(0.2)
        return True

    def _hold_file(self, kernel_id: str) -> str:
        return hold_file(self.serverapp.runtime_dir, kernel_id)

    async def _checkpoint(self, nb: dict, interrupt: bool) -> None:
        """Checkpoint one notebook and hold its kernel until it is released (or the pause ends)."""
        if not await self._wait_idle(nb, interrupt):
            return

        def progress(p):
            if self.state["progress"] is not None:
                self.state["progress"].update(p)
        request = {"op": "save", "notebook": nb["path"], "root": self.checkpoint_root,
                   "keep_last": self.keep_last, "max_bytes": self.max_bytes, "progress": True}
        try:
            result, hold = await self.bridge.save_and_hold(nb["kernel_id"], request, self._hold_file(nb["kernel_id"]),
                                                           label=nb["path"], on_progress=progress)
        except (KernelCallError, OSError) as exc:
            nb.update(status="not-checkpointed", error=str(exc))
            return
        self._holds[nb["kernel_id"]] = hold
        nb.update(status="checkpointed", checkpoint=result["id"], bytes=result["bytes"],
                  bytes_written=result["bytes_written"], saved=result["saved"], skipped=result["skipped"],
                  seconds=result["seconds"])

    # -- resume ---------------------------------------------------------------------------------------
    async def request_resume(self, notebooks=None, why: str | None = None) -> dict:
        wanted = clean_notebook_paths(notebooks)
        async with Claim(self, "resume", RESUME_FROM) as claim:
            # released by a pause, or left failed by an earlier resume: both come back from their checkpoint
            paused = [nb for nb in self.state["notebooks"]
                      if nb["status"] in ("released", "failed", *LIVE_STATUSES) and nb.get("checkpoint")]
            if wanted is not None:
                unknown = [p for p in wanted if p not in {nb["path"] for nb in paused}]
                if unknown:
                    raise BadRequest(f"{', '.join(map(repr, unknown))} was not paused; paused notebooks: "
                                     f"{', '.join(nb['path'] for nb in paused) or 'none'}")
                paused = [nb for nb in paused if nb["path"] in wanted]
            if not paused:
                if self.state["state"] != "paused":
                    raise Conflict("nothing to resume: no notebook is paused")
                # paused, but every notebook was lost (a server stopped before their checkpoints)
                await self._begin(lambda state: state.update(state="active", phase=None, progress=None, error=None,
                                                             message="resumed: no notebook had a checkpoint to restore"),
                                  "resumed", message="resumed: no notebook had a checkpoint to restore")
                return self.status()  # not handed over: the claim is released as the block ends
            if self._restore_watch:  # resumed on request: no longer waiting to wake up in a restored Pod
                self._restore_watch.cancel()
            await self._release_holds()
            requested = now()

            def begin(state):
                state["timeline"]["resume_requested"] = requested
                state.update(state="resuming", phase="waiting-for-capacity", message="waiting for capacity",
                             error=None)
            await self._begin(begin, "resume-requested", message="waiting for capacity",
                              notebooks=[nb["path"] for nb in paused])
            self._spawn_claimed(claim, self._resume(paused, why=why))
        return self.status()

    async def _resume(self, notebooks: list[dict], why: str | None = None, acquired: bool = False) -> None:
        try:
            if not acquired:
                await self.backend.acquire(notebooks)
                self.state["timeline"]["capacity_obtained"] = now()
                await self._enter("resuming", "restoring", f"restoring {len(notebooks)} notebook(s)", "restoring")
            await self._unhold(notebooks)
            for nb in notebooks:
                nb.update(verdict=None, error=None)
                try:
                    nb["kernel_id"] = await self.backend.start_kernel(nb)
                except Exception as exc:
                    nb.update(status="failed", verdict="failed",
                              error=f"no kernel could be started: {type(exc).__name__}: {exc}")
            self.state["timeline"]["kernels_started"] = now()
            await self._enter("resuming", "verifying", "verifying and restoring", "verifying")
            self.state["progress"] = {"notebooks_done": 0, "notebooks_total": len(notebooks)}

            async def resume_one(nb):  # kernels are separate processes: restore them side by side
                if nb.get("verdict") != "failed":
                    await self._verify_or_restore(nb)
                self.state["progress"]["notebooks_done"] += 1
                await self._persist("notebook-resumed", path=nb["path"], verdict=nb["verdict"],
                                    why=nb.get("why_restored") or nb.get("error"))
            await asyncio.gather(*(resume_one(nb) for nb in notebooks))
            self.state["progress"] = None
            self.state["timeline"]["restore_done"] = now()
            counts = {}
            for nb in notebooks:
                counts[nb["verdict"]] = counts.get(nb["verdict"], 0) + 1
            self._watch_first_cell(notebooks)  # before the state says active: a user may run a cell at once
            await self._enter("active", None, (f"{why}; " if why else "") + "resumed: "
                              + ", ".join(f"{n} {v}" for v, n in counts.items()), "resumed", final=True,
                              verdicts=counts, timeline=dict(self.state["timeline"]))
        except Exception as exc:
            if self.log:
                self.log.exception("gkews: resume failed")
            for nb in notebooks:  # what did not come back is resumed again from its checkpoint
                if nb.get("status") != "resumed":
                    nb["status"] = "failed"
            await self._fail(f"The resume stopped at {self.state['phase']}: {type(exc).__name__}: {exc}.",
                             "Resume again; the checkpoints are kept.")

    async def _verify_or_restore(self, nb: dict) -> None:
        """Same process with bit-identical state: live-verified. Anything else: restore from the checkpoint."""
        # saved_as: the name it was checkpointed under, when it was renamed while paused
        request = {"notebook": nb.get("saved_as") or nb["path"], "root": self.checkpoint_root,
                   "checkpoint": nb["checkpoint"]}
        try:
            verdict = await self.bridge.call(nb["kernel_id"], {"op": "verify", **request}, label=nb["path"])
            if verdict["verified"]:
                nb.update(status="resumed", verdict="live-verified", restored=[], failed={},
                          skipped_at_save=verdict["skipped_at_save"], same_process=True)
                return
            reason = nb.pop("fallback", None) or (
                "a new process: the live state did not survive" if not verdict["same_process"]
                else "the same process, but its state differs from the checkpoint")
            result = await self.bridge.call(nb["kernel_id"], {"op": "restore", **request}, label=nb["path"])
        except KernelCallError as exc:
            nb.update(status="failed", verdict="failed", error=str(exc),
                      next_step="open the notebook and run %gkews_checkpoint restore, or re-run its cells")
            return
        nb.update(status="resumed", verdict="restored-from-checkpoint", why_restored=reason,
                  restore_seconds=result["seconds"],
                  restored=result["restored"], failed=result["failed"],
                  skipped_at_save=result["skipped_at_save"], warnings=result["warnings"], same_process=False)

    def _watch_first_cell(self, notebooks: list[dict]) -> None:
        """Record 'kernel usable': the moment a user's cell first ran in a restored kernel."""
        km = self.serverapp.kernel_manager
        marks = {nb["kernel_id"]: getattr(km.get_kernel(nb["kernel_id"]), "last_activity", None)
                 for nb in notebooks if nb["kernel_id"] in km}
        cycle = self.state["cycle"]

        async def watch():
            while self.state["cycle"] == cycle and marks:
                for kid, mark in marks.items():
                    if kid not in km:
                        continue
                    kernel = km.get_kernel(kid)
                    if kernel.last_activity != mark and kernel.execution_state == "idle":
                        stamp = round(kernel.last_activity.timestamp(), 3)

                        def mark_usable(state):
                            state["timeline"]["kernel_usable"] = stamp
                        await self._write_then_publish(mark_usable, "kernel-usable", kernel_id=kid,
                                                       kernel_usable=stamp)
                        return
                await asyncio.sleep(0.25)
        if self._watch:
            self._watch.cancel()
        self._watch = asyncio.create_task(watch())

    # -- start-up -------------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the persisted state and finish or roll back what a stopped server left half done.

        Runs while the server initialises, before it answers any request, so no client ever sees a
        half-recovered state; the work is a few small file reads and one atomic write.
        """
        saved = self.store.load()
        self._found = saved["state"] if saved else None
        if saved is None:
            self._record("started")
            return
        self.state = saved
        self.state["backend"] = self.backend.name
        self.state["progress"] = None
        if saved["state"] == "pausing":
            self._finish_interrupted_pause()
        elif saved["state"] == "resuming":
            for nb in self.state["notebooks"]:
                if nb.get("status") not in ("resumed", *LIVE_STATUSES) and nb.get("checkpoint"):
                    nb.update(status="released", verdict=None)
            self.state.update(state="paused", phase=None, message="the server stopped during a resume; resume "
                              "again to restore the notebooks from their checkpoints")
            self._record("recovered-interrupted-resume")
        else:
            self._record("started")

    async def recover(self) -> None:
        """After the server started: what a backend does on finding the state paused (the GKE backend
        restores a cold-started Pod; the local one waits for the user)."""
        if self._found == "paused" and self.state["state"] == "paused":
            await self.backend.recover_paused(self)
            await self._persist("recovered-paused")

    def _record(self, event: str) -> None:
        self.state["updated"] = now()
        self._write(copy.deepcopy(self.state), event_record(self.state, event, message=self.state["message"]))

    def _finish_interrupted_pause(self) -> None:
        """Roll the pause forward: the old kernels are out of reach, every checkpoint they committed counts."""
        from kernel_state.store import Store  # reading manifests only; the server never unpickles
        store = Store(self.checkpoint_root)
        requested = self.state["timeline"].get("pause_requested", 0)
        for nb in self.state["notebooks"]:
            if nb.get("status") in ("checkpointed", "released"):
                nb["status"] = "released"
                continue
            fresh = [r for r in store.list(nb["path"]) if "error" not in r and _epoch(r["created"]) >= int(requested)]
            if fresh:
                nb.update(status="released", checkpoint=fresh[0]["id"], bytes=fresh[0]["bytes"])
            else:
                nb.update(status="lost", error="the server stopped before this notebook's checkpoint was written")
        self.state["timeline"].setdefault("environment_stopped", now())
        released = [nb for nb in self.state["notebooks"] if nb["status"] == "released"]
        lost = [nb["path"] for nb in self.state["notebooks"] if nb["status"] == "lost"]
        message = f"the server stopped during a pause; completed on restart: {len(released)} notebook(s) paused"
        if lost:
            message += f"; not checkpointed (re-run their cells): {', '.join(lost)}"
        self.state.update(state="paused", phase=None, message=message, error=None)
        self._record("recovered-interrupted-pause")

    async def notebook_renamed(self, old: str, new: str) -> None:
        """The contents service renamed a file or folder: a paused notebook in it resumes at its new path
        (from the checkpoint taken under its old name)."""
        if self.state["state"] == "active":
            return  # running kernels follow their sessions; Jupyter renames those itself
        moved = []
        for nb in self.state["notebooks"]:
            if nb.get("status") not in ("released", "failed") or not (
                    nb["path"] == old or nb["path"].startswith(old.rstrip("/") + "/")):
                continue
            nb.setdefault("saved_as", nb["path"])
            nb["path"] = new + nb["path"][len(old):]
            nb["name"] = posixpath.basename(nb["path"])
            moved.append(nb["path"])
        if moved:
            await self._persist("notebook-renamed", old=old, new=new, notebooks=moved)

    async def shutdown(self) -> None:
        # held kernels stay held: the server stopping shuts them down, and a restart rolls the pause forward
        if self._watch:
            self._watch.cancel()
        if self._restore_watch:
            self._restore_watch.cancel()
        for task in list(self._tasks):
            task.cancel()


def _epoch(created: str) -> int:
    return int(utc_epoch(created))
