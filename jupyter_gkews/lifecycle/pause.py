"""The pause: checkpointing -> snapshotting -> releasing -> paused (or failed, saying what still runs)."""
from __future__ import annotations

import asyncio
import time

from ..backends.base import LIVE_STATUSES, SnapshotFailed
from ..bridge import kernel_identity, kernel_leaving, kernel_process
from ..claim import Claim
from ..errors import BadRequest, Conflict, KernelCallError
from ..state import now
from ..states import PAUSE_FROM, Event, NotebookStatus, PauseReason, Phase, State, awaiting_resume
from .paths import clean_notebook_paths, named, session_path
from .resume import mark_lost


class Pause:
    """The pause of Lifecycle (a mixin)."""

    async def request_pause(self, notebooks=None, interrupt: bool = False, *, reason: str = PauseReason.USER,
                            snapshot: bool = True, last_activity: float | None = None) -> dict:
        """reason and snapshot come from the idle policy (which also knows terminal activity, hence
        last_activity); a user's request takes the defaults."""
        if not isinstance(interrupt, bool):
            raise BadRequest('"interrupt" must be true or false')
        wanted = clean_notebook_paths(notebooks)
        async with Claim(self, "pause", PAUSE_FROM) as claim:
            # a notebook a resume left behind keeps its checkpoint until a resume brings it back: a kernel
            # it has now was not restored, and checkpointing that one would put an empty state in its place
            waiting = [nb for nb in self.state["notebooks"] if awaiting_resume(nb)]
            # ... unless its resume failed and the user names it: the state its kernel runs now is chosen
            # over a checkpoint no resume could restore (which stays in the store, no longer pinned)
            superseded = {nb["path"]: nb["checkpoint"] for nb in waiting
                          if wanted and nb["path"] in wanted and nb.get("status") == NotebookStatus.FAILED}
            waiting = [nb for nb in waiting if nb["path"] not in superseded]
            targets = await self._running_notebooks(wanted, {nb["path"] for nb in waiting})
            # deleted while paused, not yet named by a resume: a pause from paused carries them to the resume's
            # message (unless a new notebook at that path is paused now: the path is that one's)
            paths = {t["path"] for t in targets}
            deleted = [nb for nb in self.state["notebooks"] if nb.get("deleted") and nb["path"] not in paths
                       and self.state["state"] == State.PAUSED]
            for nb in targets:  # variables a resume could not restore stay missing until a checkpoint holds them
                nb.update({k: v for old in self.state["notebooks"] if old["path"] == nb["path"]
                           for k, v in old.items() if k in ("unrestored", "unrestored_checkpoints")})
            if not targets:
                failed = [nb["path"] for nb in waiting if nb.get("status") == NotebookStatus.FAILED]
                raise Conflict("nothing to pause: no notebook has a running kernel" + (
                    f" (still to resume: {', '.join(nb['path'] for nb in waiting)}; Resume brings them back"
                    + (f", or name {', '.join(failed)} in a pause to checkpoint the kernel it runs now instead"
                       if failed else "") + ")" if waiting else ""))
            km = self.serverapp.kernel_manager  # the processes the user asked to pause (see _checkpoint)
            self._paused_processes = {nb["kernel_id"]: kernel_process(km.get_kernel(nb["kernel_id"]))
                                      for nb in targets}
            if last_activity is None:
                last_activity = self._last_activity(targets)
            self._take_snapshot = snapshot
            # a pause from paused that pauses nothing leaves the earlier cycle paused, as it was (_pause)
            self._continued = ((self.state["cycle"], dict(self.state["timeline"]), self.state.get("paused_by"))
                               if self.state["state"] == State.PAUSED else None)
            message, requested = f"checkpointing {len(targets)} notebook(s)", now()

            def begin(state):
                state.update(cycle=state["cycle"] + 1, notebooks=targets + waiting + deleted, progress=None,
                             paused_by=reason,
                             state=State.PAUSING, phase=Phase.CHECKPOINTING, message=message, error=None,
                             timeline={"last_activity": last_activity, "pause_requested": requested})
            await self._begin(begin, Event.PAUSE_REQUESTED, message=message,
                              notebooks=[nb["path"] for nb in targets], interrupt=interrupt, reason=reason,
                              last_activity=last_activity, gpus=self.gpu_count, snapshot=snapshot,
                              **({"superseded": superseded} if superseded else {}))
            self._spawn_claimed(claim, self._pause(interrupt))
        return self.status()

    async def _running_notebooks(self, wanted: list[str] | None, waiting: set[str]) -> list[dict]:
        """One target per running kernel: its notebook's session. The other sessions on that kernel (a
        console opened for the notebook) follow it as `companions`: a second checkpoint of the same kernel
        would wait behind the first one's hold, and a console has no file to restore into."""
        sessions = await self.serverapp.session_manager.list_sessions()
        by_kernel: dict[str, dict] = {}
        for s in sessions:
            # as a notebook path is written (jupyter_server keeps `/a.ipynb` as a client gave it): the contents
            # API's renames and deletions, the routes and the kernel's own checkpoints name it so
            path = session_path(s["path"])
            if not (s.get("kernel") and s["kernel"].get("id")) or path in waiting:
                continue
            entry = {"path": path, "name": s["name"], "type": s["type"], "session_id": s["id"],
                     "kernel_id": s["kernel"]["id"], "kernel_name": s["kernel"]["name"],
                     "status": NotebookStatus.RUNNING}
            lead = by_kernel.setdefault(entry["kernel_id"], entry)
            if lead is entry:
                continue
            if entry["type"] == "notebook" and lead["type"] != "notebook":  # the notebook leads
                entry["companions"] = lead.pop("companions", [])
                by_kernel[entry["kernel_id"]], lead, entry = entry, entry, lead
            lead.setdefault("companions", []).append({k: entry[k] for k in ("path", "name", "type", "session_id")})
        targets = list(by_kernel.values())
        _refuse_shared_paths(targets)
        for t in targets:
            if t["type"] == "notebook" and not await self._file_exists(t["path"], unknown=True):
                # a client that keeps its notebook elsewhere (VS Code names a remote session after its local
                # file): no file here is no sign of a deletion when it resumes
                t["no_file"] = True
        if wanted is None:
            return targets
        still = [p for p in wanted if p in waiting]
        if still:
            why = "is paused already" if self.state["state"] == State.PAUSED else "is still to be resumed from its " \
                "checkpoint (a resume left it behind)"
            raise Conflict(f"{named(still)} {why}; resume it first, or leave it out")
        found = {p: t for t in targets for p in [t["path"]] + [c["path"] for c in t.get("companions", [])]}
        missing = [p for p in wanted if p not in found]
        if missing:
            raise BadRequest(f"no running kernel for {named(missing)}; "
                             f"open the notebook and start its kernel, or leave it out")
        return list({id(found[p]): found[p] for p in wanted}.values())

    def _last_activity(self, notebooks: list[dict]) -> float | None:
        """When the notebooks were last active: now, while a cell runs in one of them (a silent cell sends no
        message, and the report counted its run time as idle)."""
        km = self.serverapp.kernel_manager
        if any(km.get_kernel(nb["kernel_id"]).execution_state == "busy" for nb in notebooks if nb["kernel_id"] in km):
            return now()
        times = [getattr(km.get_kernel(nb["kernel_id"]), "last_activity", None)
                 for nb in notebooks if nb["kernel_id"] in km]
        times = [t.timestamp() for t in times if t is not None]
        return round(max(times), 3) if times else None

    def _still_running(self, notebooks: list[dict]) -> str:
        """What a failed pause left running, said truthfully (a kernel may have died meanwhile)."""
        gone = [nb["path"] for nb in notebooks if self._kernel_gone(nb)]
        restarted = [nb["path"] for nb in notebooks if nb["path"] not in gone and self._kernel_restarted(nb)]
        if not gone and not restarted:
            return "every kernel is still running"
        said = ([f"the kernel of {', '.join(gone)} is gone (open the notebook again and re-run its cells)"] if gone
                else []) + ([f"the kernel of {', '.join(restarted)} restarted during the pause (its process died: "
                             f"re-run its cells)"] if restarted else [])
        return "; ".join(said) + ("; the others are still running" if len(gone) + len(restarted) < len(notebooks)
                                  else "")

    def _kernel_gone(self, nb: dict) -> bool:
        return kernel_leaving(self.serverapp.kernel_manager, nb["kernel_id"])

    def _kernel_restarted(self, nb: dict) -> bool:
        """Another process than the one the pause began with (its cell crashed it, a restart)."""
        km, asked = self.serverapp.kernel_manager, getattr(self, "_paused_processes", {}).get(nb["kernel_id"])
        return asked is not None and nb["kernel_id"] in km and kernel_process(km.get_kernel(nb["kernel_id"])) != asked

    async def _pause(self, interrupt: bool) -> None:
        try:
            notebooks = [nb for nb in self.state["notebooks"] if not awaiting_resume(nb) and not nb.get("deleted")]
            carried = [nb["path"] for nb in self.state["notebooks"] if awaiting_resume(nb)]  # paused before
            for i, nb in enumerate(notebooks):
                self.state["progress"] = {"notebook": nb["path"], "notebooks_done": i,
                                          "notebooks_total": len(notebooks)}
                await self._checkpoint(nb, interrupt)
                await self._persist(Event.NOTEBOOK_CHECKPOINTED if nb["status"] == NotebookStatus.CHECKPOINTED
                                    else Event.NOTEBOOK_NOT_CHECKPOINTED, path=nb["path"], error=nb.get("error"),
                                    bytes=nb.get("bytes"), bytes_written=nb.get("bytes_written"),
                                    seconds=nb.get("seconds"), **({"missing": _missing(nb)} if _missing(nb) else {}))
            self.state["progress"] = None
            await self._renew_broken_holds(notebooks, interrupt)
            self.state["timeline"]["checkpoint_done"] = now()
            done = [nb for nb in notebooks if nb["status"] == NotebookStatus.CHECKPOINTED]
            left = [nb for nb in notebooks if nb["status"] != NotebookStatus.CHECKPOINTED]
            if notebooks and not done:
                reasons = "; ".join(dict.fromkeys(f"{nb['path']}: {_reason(nb)}" for nb in left))  # each once
                if carried:  # a pause from paused: what the earlier one released stays paused
                    details = {}
                    if self._continued:  # and its cycle goes on: its timeline, not this attempt's (the report's)
                        cycle, timeline, paused_by = self._continued
                        self.state.update(timeline=timeline, paused_by=paused_by)
                        details["continues_cycle"] = cycle
                    await self._enter(State.PAUSED, None, f"nothing more was paused: {reasons}; still paused: "
                                      f"{', '.join(carried)}", Event.PAUSED, final=True,
                                      timeline=dict(self.state["timeline"]), environment_released=self._released_all(),
                                      **details)
                    self._watch_for_restore()
                    return
                await self._fail(f"No notebook could be checkpointed, so nothing was released: {reasons}.",
                                 f"Fix the cause above and pause again; {self._still_running(notebooks)}.")
                return
            snapshot = None
            if self._take_snapshot:  # an idle policy may ask for the checkpoint only
                await self._enter(State.PAUSING, Phase.SNAPSHOTTING, "taking a snapshot", Event.SNAPSHOTTING)
                try:
                    snapshot = await self.backend.snapshot(done)
                except SnapshotFailed as exc:
                    if self.backend.abort_on_snapshot_failure or exc.abort:
                        await self._fail(f"The snapshot failed: {exc}.", "Nothing was released: every kernel is "
                                         "still running and the checkpoints are kept. Fix the cause and pause again.")
                        return
                    snapshot = {"status": "failed", "error": str(exc), "resume_from": "checkpoint"}
                    await self._persist(Event.SNAPSHOT_FAILED, error=str(exc))
            self.state["snapshot"] = snapshot
            self.state["timeline"]["snapshot_ready"] = now() if snapshot and snapshot.get("status") == "ready" else None
            # the code that asked for the snapshot is inside it: a restored copy wakes up here
            if await self._resume_if_restored(done):
                return
            for nb in done:  # persisted with the step: a kernel detached to live on (GPU suspend) outlives a
                # server killed during the release, and the restarted one must find its process to stop it
                nb["process"] = kernel_identity(self.serverapp.kernel_manager, nb["kernel_id"])
            await self._enter(State.PAUSING, Phase.RELEASING, "releasing the kernels", Event.RELEASING,
                              snapshot=snapshot)
            # from here a restart is refused (refuse_kernel_action); one under way ends first: a shutdown of a
            # kernel mid-restart failed the pause (InvalidStateError) or left the new process running, "paused"
            if self.kernel_changes is not None:
                await self.kernel_changes.settled([nb["kernel_id"] for nb in done])
            await self._renew_broken_holds(done, interrupt)  # the snapshot took a while: look once more
            left += [nb for nb in done if nb["status"] != NotebookStatus.CHECKPOINTED]
            done = [nb for nb in done if nb["status"] == NotebookStatus.CHECKPOINTED]
            # a kernel that lives on (GPU suspend) stays held while paused: no cell runs in it unnoticed
            released = await self.backend.release(done) or {}
            for nb in self.state["notebooks"]:  # released: what lives on says so in its own record ("gpu")
                nb.pop("process", None)
            await self._release_holds(only_stopped=True)
            if await self._resume_if_restored(done):
                return
            for nb in done:
                nb["status"] = NotebookStatus.RELEASED
                nb.update(released.get(nb["path"], {}))  # a kernel may live on (GPU suspend): its status, message
            self.state["timeline"]["environment_stopped"] = now()
            message = f"paused {len(done)} notebook(s)"
            gone_midway = await self._lost_midway(done)
            if gone_midway:
                message += f"; deleted while being paused, not to be resumed: {', '.join(gone_midway)} (its " \
                           f"checkpoint stays in the store)"
            if carried:  # a pause from paused: the ones paused before stay paused
                message += f" ({len(done) + len(carried)} paused in all)"
            if snapshot and snapshot.get("status") == "failed":
                message += f"; the snapshot failed ({snapshot['error']}), so the resume will restore the " \
                           "kernels from their application checkpoints"
            if any(nb["status"] in LIVE_STATUSES for nb in done):
                message += "; " + "; ".join(f"{nb['path']}: {nb['message']}" for nb in done)
            gone = [nb for nb in left if self._kernel_gone(nb)]  # shut down during the pause: not "still running"
            for clause, which in (("still running, not paused", [nb for nb in left if nb not in gone]),
                                  ("not paused, its kernel gone", gone)):
                if which:
                    said = dict.fromkeys(f"{nb['path']} ({_reason(nb)})" for nb in which)
                    message += f"; {clause}: " + "; ".join(said)
            strays = await self._kernels_without_a_session()
            if strays:
                message += f"; still running, not paused: {len(strays)} kernel(s) no session shows " \
                           f"({', '.join(strays)}), which keep their GPU memory: shut them down through api/kernels"
            for nb in done:
                if _missing(nb):
                    message += f"; the checkpoint of {nb['path']} lacks {', '.join(_missing(nb))} (not restored " \
                               "at the last resume)"
            await self._enter(State.PAUSED, None, message, Event.PAUSED, final=True,
                              timeline=dict(self.state["timeline"]), environment_released=self._released_all())
            self._watch_for_restore()
        except Exception as exc:  # an unexpected failure must still leave a state a person can act on
            if self.log:
                self.log.exception("gkews: pause failed")
            phase = self.state["phase"]
            try:  # a snapshot it took stays Ready otherwise: a later start would roll the running kernels back
                undone = await self.backend.pause_failed()
            except Exception as undo:
                undone = f"what the snapshot step made could not be taken back ({undo})"
            await self._fail(f"The pause stopped at {phase}: {type(exc).__name__}: {exc}."
                             + (f" {undone[0].upper()}{undone[1:]}." if undone else ""),
                             "Check the server log; the checkpoints already written are kept. Pause again.")
        finally:
            self._deleted_midway = set()
            if self.state["state"] != State.PAUSED:  # the kernels go on: let them run the cells waiting
                await self._release_holds()

    async def _lost_midway(self, released: list[dict]) -> list[str]:
        """The notebooks deleted (contents API) while this pause checkpointed and released them: lost, as one
        deleted once paused; a notebook created at that path since is another one, never resumed into."""
        lost = []
        for nb in released:  # a kernel that lives on (GPU suspend) is as one deleted once paused: resumed live
            if id(nb) in self._deleted_midway and nb.get("status") not in LIVE_STATUSES:
                mark_lost(nb, "so no kernel will be started for it, nor its state restored into a notebook "
                              "created at that path since", when="while it was being paused")
                lost.append(nb["path"])
                await self._persist(Event.NOTEBOOK_DELETED, path=nb["path"], notebooks=[nb["path"]], noticed="pause")
        return lost

    async def _wait_idle(self, nb: dict, interrupt: bool) -> bool:
        """Wait (bounded) for the kernel to finish its cell; with interrupt, interrupt it once and wait
        once more. False, with the reason in nb, when it is still busy."""
        km = self.serverapp.kernel_manager
        deadline = time.monotonic() + self.busy_timeout
        message = self.state["message"]
        try:
            while nb["kernel_id"] in km and km.get_kernel(nb["kernel_id"]).execution_state == "busy":
                if self._kernel_restarted(nb):
                    # its cell crashed it and the restarter started another process, whose first status the
                    # server's tracker may never see ("busy" stays, from the dead one): no cell of the user's
                    # runs; _checkpoint says the kernel restarted (it said "still running a cell after 8 s")
                    return True
                # the status says what the pause waits for (a minute of "checkpointing" said nothing)
                then = "interrupted" if interrupt and not nb.get("interrupted") else "left running"
                self.state["message"] = (f"{message}: waiting up to {self.busy_timeout:.0f} s for the running "
                                         f"cell of {nb['path']} to finish (then it is {then})")
                if time.monotonic() >= deadline:
                    if not interrupt:
                        nb.update(status=NotebookStatus.BUSY, error=f"its kernel was still running a cell after "
                                  f"{self.busy_timeout:.0f} s; let it finish and pause again, or pause with "
                                  f"interrupt to stop the cell")
                        return False
                    if nb.get("interrupted"):
                        nb.update(status=NotebookStatus.BUSY, error=f"its cell ignored the interrupt for "
                                  f"{self.busy_timeout:.0f} s and is still running; stop it by hand (or restart "
                                  f"the kernel) and pause again")
                        return False
                    await km.interrupt_kernel(nb["kernel_id"])
                    nb["interrupted"] = True
                    deadline = time.monotonic() + self.busy_timeout
                await asyncio.sleep(0.2)
            return True
        finally:
            self.state["message"] = message

    async def _checkpoint(self, nb: dict, interrupt: bool) -> None:
        """Checkpoint one notebook and hold its kernel until it is released (or the pause ends)."""
        if nb["status"] == NotebookStatus.NOT_CHECKPOINTED:  # refused before the pause began
            return
        if not await self._wait_idle(nb, interrupt):
            return
        if self._kernel_restarted(nb):
            # it died (its cell crashed it) or was restarted since Pause: checkpointing the new process
            # would report an empty state as the notebook's and pin it in place of the user's own. One
            # that restarted after its checkpoint keeps that checkpoint.
            if nb.get("checkpoint"):
                return
            nb.update(status=NotebookStatus.NOT_CHECKPOINTED,
                      error="its kernel restarted during the pause (its process died or was restarted: what it "
                            "held went with it); the new kernel runs, nothing of it was saved; pause again to "
                            "pause it")
            return

        def progress(p):
            if self.state["progress"] is not None:
                self.state["progress"].update(p)
        # read_back: the kernel is about to be released, so the blobs this save reuses are checked now,
        # while its memory can still write a damaged one again (kernel_state/readback.py)
        request = {"op": "save", "notebook": nb["path"], "root": self.checkpoint_root,
                   "keep_last": self.keep_last, "max_bytes": self.max_bytes, "progress": True, "read_back": True}
        try:
            result, hold = await self.bridge.save_and_hold(nb["kernel_id"], request, self._hold_file(nb["kernel_id"]),
                                                           label=nb["path"], on_progress=progress)
        except (KernelCallError, OSError) as exc:
            if isinstance(exc, KernelCallError) and self._kernel_gone(nb):
                # its answer is the interrupt that comes before a shutdown, not a fault of the save
                exc = "its kernel was shut down during its checkpoint, so nothing of it was saved"
            nb.update(status=NotebookStatus.NOT_CHECKPOINTED, error=str(exc))
            return
        self._holds[nb["kernel_id"]] = hold
        changes = dict(status=NotebookStatus.CHECKPOINTED, checkpoint=result["id"], bytes=result["bytes"],
                       bytes_written=result["bytes_written"], saved=result["saved"], skipped=result["skipped"],
                       seconds=result["seconds"])
        # what the save left out of a saved variable (a hook it cannot pickle), and damaged blobs of earlier
        # saves it wrote again before the kernel goes
        if result.get("warnings") or result.get("repaired"):
            changes["warnings"] = result.get("warnings", []) + result.get("repaired", [])
        if nb["path"] != request["notebook"]:  # renamed while it was being saved
            changes["saved_as"] = request["notebook"]
        if nb.get("unrestored"):  # a resume left variables behind: is this checkpoint without them?
            still = {k: v for k, v in nb["unrestored"].items() if k not in result["saved"]}
            kept = nb.get("unrestored_checkpoints", [])
            if still:
                changes.update(unrestored=still)
                changes.setdefault("warnings", []).append(
                    f"this checkpoint lacks {', '.join(sorted(still))}, not restored at the last resume; "
                    + (f"kept in checkpoint {', '.join(kept)}" if kept else "no checkpoint holds them"))
            else:  # saved again: the older checkpoints need no pin for them any more
                nb.pop("unrestored")
                nb.pop("unrestored_checkpoints", None)
        await self._pin_before(nb, changes)
        nb.update(changes)

    async def _kernels_without_a_session(self) -> list[str]:
        """Kernels that run though no session shows them (started through api/kernels alone): a pause pauses
        sessions, so they go on, and the message says so (the event's environment_released was all it had)."""
        sessions = await self.serverapp.session_manager.list_sessions()
        known = {nb["kernel_id"] for nb in self.state["notebooks"]} | {
            (s.get("kernel") or {}).get("id") for s in sessions}
        return [kid for kid in self.serverapp.kernel_manager.list_kernel_ids() if kid not in known]

    def _released_all(self) -> bool:
        """Did the pause leave the session holding no GPU? A kernel that was not paused (a notebook not named,
        busy, or not checkpointed) keeps its GPU; one that lives on suspended or without a CUDA context holds
        none. A backend that stops the whole environment (GKE pauses the Pod) releases every GPU."""
        if self.backend.releases_environment:
            return True
        live = {nb["kernel_id"] for nb in self.state["notebooks"] if nb.get("status") in LIVE_STATUSES}
        return all(kid in live for kid in self.serverapp.kernel_manager.list_kernel_ids())


def _refuse_shared_paths(targets: list[dict]) -> None:
    """Two kernels whose sessions are at one path (a notebook saved as another open one's name: jupyter_server
    moves its session there): a checkpoint is filed under the path, and the resume restores the path's
    checkpoint into the kernel a session there has, so each would come back as the other. Neither is
    paused; both keep running with what they hold, and the error says how to part them."""
    by_path: dict[str, list[dict]] = {}
    for t in targets:
        by_path.setdefault(t["path"], []).append(t)
    for path, sharing in by_path.items():
        if len(sharing) < 2:
            continue
        kernels = ", ".join(t["kernel_id"] for t in sharing)
        paused = "neither was paused" if len(sharing) == 2 else "none was paused"
        for t in sharing:
            t.update(status=NotebookStatus.NOT_CHECKPOINTED,
                     error=f"{len(sharing)} sessions are at {path} with different kernels ({kernels}), and a "
                           f"checkpoint is a path's: {paused}, each keeps running with what it holds; "
                           f"save one under another name (File > Save Notebook As) or shut one of the kernels "
                           f"down, then pause again")


def _missing(nb: dict) -> list[str]:
    """The variables its checkpoint lacks because a resume could not restore them (_checkpoint keeps
    `unrestored` only while they are missing)."""
    return sorted(nb["unrestored"]) if nb.get("unrestored") and nb.get("checkpoint") else []


def _reason(nb: dict) -> str:
    """Why a notebook was not checkpointed, as a clause inside a sentence (no full stop of its own)."""
    return (nb.get("error") or "not checkpointed").rstrip(".")
