"""The resume: waiting-for-capacity -> restoring -> verifying -> active, each notebook live-verified or
restored from its checkpoint; also the resume a process takes when it wakes up in a restored snapshot."""
from __future__ import annotations

import asyncio
import re

from jupyter_core.utils import ensure_async
from kernel_state.config import magic_quoted
from kernel_state.errors import CheckpointError
from kernel_state.store import Store, variable_blobs

from ..bridge import ignores_our_activity
from ..claim import Claim
from ..errors import KERNEL_NOT_FOUND, KERNEL_UNREADABLE, BadRequest, Conflict, KernelCallError
from ..state import now
from ..states import RESUME_FROM, Event, NotebookStatus, Phase, State, Verdict, awaiting_resume
from .paths import clean_notebook_paths, named

#: a notebook whose state is back in its kernel (fully or not)
BACK_VERDICTS = (Verdict.LIVE_VERIFIED, Verdict.RESTORED_FROM_CHECKPOINT, Verdict.PARTIALLY_RESTORED)


class Resume:
    """The resume of Lifecycle (a mixin)."""

    async def request_resume(self, notebooks=None, why: str | None = None) -> dict:
        wanted = clean_notebook_paths(notebooks)
        async with Claim(self, "resume", RESUME_FROM) as claim:
            await self._files_back()
            # released by a pause, or left failed by an earlier resume: both come back from their checkpoint
            paused = [nb for nb in self.state["notebooks"] if awaiting_resume(nb)]
            # deleted while paused (Lifecycle.notebook_deleted): not resumed, but the resume's message names them
            gone = [nb for nb in self.state["notebooks"] if nb.get("deleted")]
            if wanted is not None:
                known, named_here = {nb["path"] for nb in paused + gone}, set(wanted)
                unknown = [p for p in wanted if p not in known]
                moved = {nb["saved_as"]: nb["path"] for nb in paused + gone if nb.get("saved_as") in unknown}
                if moved:  # renamed while paused: it was paused, under the name given
                    raise BadRequest("; ".join(f"{old!r} was renamed to {new!r} while paused: name it {new!r}"
                                               for old, new in moved.items()))
                if unknown:
                    raise BadRequest(f"{named(unknown)} was not paused; paused notebooks: "
                                     f"{', '.join(nb['path'] for nb in paused) or 'none'}")
                paused = [nb for nb in paused if nb["path"] in named_here]
                gone = [nb for nb in gone if nb["path"] in named_here]
            deleted = [nb["path"] for nb in gone]
            # the pause could not checkpoint them (the server stopped first): named by the resume that ends it
            unsaved = [] if wanted is not None or self.state["state"] != State.PAUSED else [
                nb for nb in self.state["notebooks"]
                if nb.get("status") == NotebookStatus.LOST and not nb.get("deleted") and not nb.get("verdict")]
            if not paused:
                if wanted is not None:  # asked for by name: only notebooks deleted while paused
                    raise Conflict("; ".join(f"{nb['error']}: nothing to resume; {nb['next_step']}" for nb in gone))
                if self.state["state"] != State.PAUSED:
                    raise Conflict("nothing to resume: no notebook is paused")
                # paused, but every notebook was lost (deleted, or a server stopped before their checkpoints)
                message = ("resumed: nothing to restore" + deleted_note(deleted) if deleted
                           else "resumed: no notebook had a checkpoint to restore") + unsaved_note(unsaved)
                await self._begin(lambda state: state.update(state=State.ACTIVE, phase=None, progress=None,
                                                             error=None, message=message),
                                  Event.RESUMED, message=message, **({"deleted": deleted} if deleted else {}))
                return self.status()  # not handed over: the claim is given back as the block ends
            if self._restore_watch:  # resumed on request: no longer waiting to wake up in a restored Pod
                self._restore_watch.cancel()
            requested = now()

            def begin(state):
                state["timeline"]["resume_requested"] = requested
                state.update(state=State.RESUMING, phase=Phase.WAITING_FOR_CAPACITY, message="waiting for capacity",
                             error=None)
            await self._begin(begin, Event.RESUME_REQUESTED, message="waiting for capacity",
                              notebooks=[nb["path"] for nb in paused])
            # from the instant the state says resuming, not once the task runs: a restart asked in between was
            # told to "resume it first"
            self._in_resume = {id(nb) for nb in paused}
            self._spawn_claimed(claim, self._resume(paused, why=why, deleted=deleted, unsaved=unsaved))
        return self.status()

    async def _resume(self, notebooks: list[dict], why: str | None = None, acquired: bool = False,
                      deleted: list[str] = (), unsaved: list[dict] = ()) -> None:
        """deleted: the paths of notebooks deleted while paused before the resume (Lifecycle.notebook_deleted),
        for its message; those it finds deleted itself are added. unsaved: those the pause did not checkpoint."""
        deleted = list(deleted)
        started: list[dict] = []  # the notebooks whose kernels this resume started (not ones that lived on)
        self._in_resume = {id(nb) for nb in notebooks}  # a session asked for on them is told to wait
        try:
            if not acquired:
                await self.backend.acquire(notebooks)
                self.state["timeline"]["capacity_obtained"] = now()
                await self._enter(State.RESUMING, Phase.RESTORING, f"restoring {len(notebooks)} notebook(s)",
                                  Event.RESTORING)
            # a kernel that lived on is still held; by entry, not by path: a rename during the resume moves the path
            held = {id(nb): nb["kernel_id"] for nb in notebooks}
            km = self.serverapp.kernel_manager
            for nb in notebooks:
                nb.update(verdict=None, error=None, failed={})
                nb.pop("next_step", None)  # an earlier resume's advice
                if id(nb) in self._deleted_midway:  # through the contents API, since this resume began
                    await self._deleted_during_resume(nb, deleted)
                    continue
                if await self._deleted_while_paused(nb):
                    # the user's doing, as through the contents API: not a resume (no verdict), not a failure
                    mark_lost(nb, "so no kernel was started for it (if it was not deleted, this server may run on "
                                  "another folder than the one that paused it: start it there and Resume again)")
                    nb["found_missing"] = True
                    deleted.append(nb["path"])
                    await self._persist(Event.NOTEBOOK_DELETED, path=nb["path"], notebooks=[nb["path"]],
                                        noticed="resume")
                    continue
                try:
                    fresh = nb["kernel_id"] not in km
                    nb["kernel_id"] = await self.backend.start_kernel(nb)
                    if fresh:
                        started.append(nb)
                except Exception as exc:
                    # the server's log has it too, with where it came from (the status has one line)
                    if self.log:
                        self.log.warning("gkews: no kernel could be started for %s", nb["path"], exc_info=True)
                    nb.update(status=NotebookStatus.FAILED, verdict=Verdict.FAILED,
                              error=f"no kernel could be started: {type(exc).__name__}: {exc}",
                              next_step=f"make its kernel ({nb.get('kernel_name') or 'its kernelspec'}) start again "
                                        f"(`jupyter kernelspec list` shows the installed ones), then resume: its "
                                        f"checkpoint {nb.get('checkpoint')} is kept")
            self.state["timeline"]["kernels_started"] = now()
            await self._enter(State.RESUMING, Phase.VERIFYING, "verifying and restoring", Event.VERIFYING)
            self.state["progress"] = {"notebooks_done": 0, "notebooks_total": len(notebooks)}

            async def resume_one(nb):  # kernels are separate processes: restore them side by side
                lost = nb.get("deleted", False)
                changes = self._kernel_changes(nb["kernel_id"])
                if nb.get("verdict") != Verdict.FAILED and not lost:
                    await self._verify_or_restore(nb, self._hold_file(held[id(nb)]))
                await self._let_go(*{held[id(nb)], nb["kernel_id"]})  # the cells sent while paused run now
                if not lost and id(nb) in self._deleted_midway:
                    await self._deleted_during_resume(nb, deleted)
                    lost = True
                if nb.get("verdict") in BACK_VERDICTS and self._kernel_changes(nb["kernel_id"]) != changes:
                    self._lost_to_a_kernel_change(nb)
                self.state["progress"]["notebooks_done"] += 1
                if not lost:  # a deleted notebook was not resumed: its notebook-deleted event says so
                    await self._persist(Event.NOTEBOOK_RESUMED, path=nb["path"], verdict=nb["verdict"],
                                        why=nb.get("why_restored") or nb.get("error"), failed=nb["failed"])
            # each to its end, a failure of one included: a kernel another failure stops must not be mid-restore
            failures = [r for r in await asyncio.gather(*(resume_one(nb) for nb in notebooks), return_exceptions=True)
                        if isinstance(r, BaseException)]
            if failures:
                raise failures[0]
            self.state["progress"] = None
            self.state["timeline"]["restore_done"] = now()
            counts = {}
            for nb in notebooks:
                if nb.get("verdict"):
                    counts[nb["verdict"]] = counts.get(nb["verdict"], 0) + 1
            self._watch_first_cell(notebooks)  # before the state says active: a user may run a cell at once
            message = (f"{why}; " if why else "") + "resumed: " + (
                ", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing to restore")
            for nb in notebooks:
                if nb["verdict"] == Verdict.PARTIALLY_RESTORED:
                    message += f"; not restored in {nb['path']}: {', '.join(sorted(nb['failed']))}"
                message += unsaved_variables_note(nb)
            message += deleted_note(deleted) + unsaved_note(unsaved)
            waiting = [nb["path"] for nb in self.state["notebooks"] if awaiting_resume(nb)]
            if waiting:  # not named in this resume, or failed in it: a resume brings them back
                message += f"; still to resume (Resume brings them back): {', '.join(waiting)}"
            await self._enter(State.ACTIVE, None, message, Event.RESUMED, final=True,
                              verdicts=counts, timeline=dict(self.state["timeline"]),
                              **({"deleted": deleted} if deleted else {}))
        except Exception as exc:
            if self.log:
                self.log.exception("gkews: resume failed")
            for nb in notebooks:  # what did not come back is resumed again from its checkpoint
                # but a notebook found deleted, or whose checkpoint is gone: nothing can resume it (lost)
                if nb.get("status") not in (NotebookStatus.RESUMED, NotebookStatus.LOST):
                    nb["status"] = NotebookStatus.FAILED
            stopped = await self._stop_unrestored(started)
            await self._fail(f"The resume stopped at {self.state['phase']}: {type(exc).__name__}: {exc}."
                             + (f" The kernels it had started for {', '.join(stopped)} are shut down again, so "
                                "that no cell runs in them before their restore." if stopped else ""),
                             "Resume again; the checkpoints are kept.")
        finally:
            self._in_resume = set()
            self._deleted_midway = set()

    async def _deleted_during_resume(self, nb: dict, deleted: list[str]) -> None:
        """Its file was deleted (contents API) while this resume brought it back: not resumed, and the kernel the
        resume started or verified for it is shut down (it held memory, a GPU, for a file no one can open; the
        page's own delete stops a notebook's kernel so too)."""
        km = self.serverapp.kernel_manager
        if nb["kernel_id"] in km:
            try:
                await km.shutdown_kernel(nb["kernel_id"], now=True)
            except Exception:  # gone meanwhile: nothing runs in it either
                if self.log:
                    self.log.warning("gkews: could not shut down the kernel of %s", nb["path"], exc_info=True)
        mark_lost(nb, "so its kernel was shut down and its state is not restored into a notebook created at that "
                      "path since", when="during its resume")
        deleted.append(nb["path"])
        await self._persist(Event.NOTEBOOK_DELETED, path=nb["path"], notebooks=[nb["path"]], noticed="resume")

    async def _stop_unrestored(self, started: list[dict]) -> list[str]:
        """A resume that failed after starting kernels left them in their start hold, answering nothing, until its
        bound ran out (10 minutes), then running cells on an empty namespace: the ones nothing was verified or
        restored into are shut down, as the pause left them; the next resume starts them again. Their paths."""
        km = self.serverapp.kernel_manager
        stopped = []
        for nb in started:
            if nb.get("verdict") is not None or nb["kernel_id"] not in km:
                continue
            try:
                await km.shutdown_kernel(nb["kernel_id"], now=True)
            except Exception:  # gone meanwhile: nothing runs in it either
                if self.log:
                    self.log.warning("gkews: could not shut down the kernel of %s", nb["path"], exc_info=True)
            await self._let_go(nb["kernel_id"])  # its hold file, which the next start of that id would find
            stopped.append(nb["path"])
        return stopped

    def _kernel_changes(self, kernel_id: str) -> int:
        return self.kernel_changes.count(kernel_id) if self.kernel_changes is not None else 0

    @staticmethod
    def _lost_to_a_kernel_change(nb: dict) -> None:
        """A restart or a shutdown of the kernel was asked during the resume (through the REST API, the page, a
        session deleted or given another kernel): the process the state was verified or restored in goes, so
        the notebook is not back, whatever the verify or restore said."""
        nb.update(status=NotebookStatus.FAILED, verdict=Verdict.FAILED,
                  error="its kernel was restarted or shut down during the resume, after its state was brought back "
                        "into it: that state went with the process",
                  next_step=f"resume again to restore it into the notebook's kernel (its checkpoint "
                            f"{nb.get('checkpoint')} is kept)")

    async def _files_back(self) -> None:
        """A notebook taken for deleted whose file is there again is paused again, its checkpoint to resume from
        (it stays in the store): a server started on the wrong root_dir found no file, and its resume marked
        every notebook deleted for good; a file put back (git checkout) was never resumed either."""
        for nb in self.state["notebooks"]:
            # only one a resume found gone: a deletion the server saw (the contents API) is the user's, and a
            # notebook made at that path since is a new one; so is one whose path runs a kernel now
            if not (nb.get("found_missing") and nb.get("checkpoint")) or await self._live_session(nb["path"]):
                continue
            if await self._file_exists(nb["path"], unknown=False):  # one that cannot say: as it was
                for key in ("deleted", "found_missing", "next_step"):
                    nb.pop(key, None)
                nb.update(status=NotebookStatus.RELEASED, verdict=None, error=None)

    async def _deleted_while_paused(self, nb: dict) -> bool:
        """A notebook whose kernel was shut down and whose file is gone gets no new kernel (it would hold
        memory, a GPU, for a file no one can open)."""
        if nb.get("status") not in (NotebookStatus.RELEASED, NotebookStatus.FAILED):
            return False  # its kernel lived on: verified as it is
        if nb.get("type") == "console" or nb.get("no_file"):
            return False  # a console's path names no file, nor did this one's when it was paused
        # a contents service that cannot say: start the kernel as before
        return not await self._file_exists(nb["path"], unknown=True)

    async def _file_exists(self, path: str, unknown: bool) -> bool:
        """Whether the contents service has a file at path; `unknown` when it cannot say (it raised)."""
        try:
            return await ensure_async(self.serverapp.contents_manager.file_exists(path))
        except Exception:
            return unknown

    async def _verify_or_restore(self, nb: dict, hold_file: str) -> None:
        """Same process with bit-identical state: live-verified. Anything else: restore from the checkpoint.
        A kernel that lived on answers in its hold, before the cells sent to it while paused."""
        # saved_as: the name it was checkpointed under, when it was renamed while paused
        request = {"notebook": nb.get("saved_as") or nb["path"], "root": self.checkpoint_root,
                   "checkpoint": nb["checkpoint"]}
        try:
            verdict = await self.bridge.call(nb["kernel_id"], {"op": "verify", **request}, label=nb["path"],
                                             hold_file=hold_file)
            if verdict["verified"]:
                nb.update(status=NotebookStatus.RESUMED, verdict=Verdict.LIVE_VERIFIED, restored=[], failed={},
                          skipped_at_save=verdict["skipped_at_save"], same_process=True)
                return
            reason = nb.pop("fallback", None) or (
                "reopened while paused: restored into the kernel it was reopened with" if nb.get("reopened")
                else "a new process: the live state did not survive" if not verdict["same_process"]
                else "the same process, but its state differs from the checkpoint")
            # values the kernel holds now that the checkpoint's replace (work done in a reopened notebook)
            replaced = sorted(name for name, v in verdict.get("variables", {}).items()
                              if v.get("verdict") == "changed" and "module" not in v)
            result = await self.bridge.call(nb["kernel_id"], {"op": "restore", **request}, label=nb["path"],
                                            hold_file=hold_file)
        except KernelCallError as exc:
            # its checkpoint is gone, or damaged: no later resume could restore it, so none tries (each would
            # count one more failed resume), and it is no longer pinned (it can be deleted, as the error says)
            why = ("is gone from the store" if exc.kind in KERNEL_NOT_FOUND
                   else "cannot be read" if exc.kind in KERNEL_UNREADABLE else None)
            if why:
                nb.update(status=NotebookStatus.LOST, verdict=Verdict.FAILED, error=str(exc),
                          next_step=f"its checkpoint {nb['checkpoint']} {why}, so its kernel runs without the "
                                    "saved state: restore an older checkpoint into it (the Checkpoints panel, or "
                                    "%gkews_checkpoint restore --checkpoint ID with an ID from %gkews_checkpoint "
                                    "list), or re-run its cells")
                return
            # the checkpoint is intact (what failed was the kernel, or its call): a resume again restores it, as the
            # session's message says
            nb.update(status=NotebookStatus.FAILED, verdict=Verdict.FAILED, error=str(exc),
                      next_step=f"resume again: its checkpoint {nb['checkpoint']} is kept, and the resume restores it "
                                f"into the notebook's kernel (in the notebook, %gkews_checkpoint restore --checkpoint "
                                f"{nb['checkpoint']} does the same)")
            return
        nb.update(status=NotebookStatus.RESUMED, verdict=Verdict.PARTIALLY_RESTORED if result["failed"]
                  else Verdict.RESTORED_FROM_CHECKPOINT, why_restored=reason,
                  restore_seconds=result["seconds"],
                  restored=result["restored"], failed=result["failed"],
                  skipped_at_save=result["skipped_at_save"], warnings=result["warnings"] + (
                      [f"the checkpoint's values replaced the ones this kernel held: {', '.join(replaced)}"]
                      if replaced else []),
                  same_process=verdict["same_process"])  # restored in place, or into a new process
        if result["failed"]:
            await self._keep_unrestored(nb, result["failed"])
        elif nb.get("unrestored"):  # missing since an earlier resume: its checkpoint lacks them too
            names, kept = ", ".join(sorted(nb["unrestored"])), ", ".join(nb.get("unrestored_checkpoints") or [])
            nb["warnings"].append(f"not in this checkpoint, as an earlier resume could not restore them: {names}"
                                  + (f"; checkpoint {kept} holds them" if kept else ""))

    async def _keep_unrestored(self, nb: dict, failed: dict) -> None:
        """Some variables did not come back: the notebook says which and why, and the earlier checkpoints
        that hold them are kept (pinned) until a pause saves them again, since the next pause checkpoints
        the notebook without them and retention would otherwise let those older checkpoints go."""
        names = sorted(failed)
        holders = await asyncio.to_thread(checkpoints_holding, self.checkpoint_root,
                                          nb.get("saved_as") or nb["path"], failed, nb["checkpoint"])
        if not all(_damaged(why) for why in failed.values()):
            # its own checkpoint holds them too, and is the one to restore them from once the cause is fixed (a
            # helper module put back on sys.path): left unpinned, the next saves' retention deleted it
            holders.append(nb["checkpoint"])
        kept = sorted(set(nb.get("unrestored_checkpoints", [])) | set(holders), reverse=True)  # ids: newest first
        nb.update(unrestored={**nb.get("unrestored", {}), **failed}, unrestored_checkpoints=kept,
                  error="not restored: " + "; ".join(f"{n} ({failed[n]})" for n in names),
                  next_step=f"re-run the cells that define {', '.join(names)}" + (
                      f", or restore them from a checkpoint that holds them (kept until a pause saves them again): "
                      f"%gkews_checkpoint restore {' '.join(names)} --checkpoint ID, ID one of {', '.join(kept)}"
                      if kept else " (no checkpoint that can bring them back is left)"))

    def _watch_first_cell(self, notebooks: list[dict]) -> None:
        """Record 'kernel usable': the moment a user's cell first started running in a restored kernel (the
        bridge notes each user's execute_input; a kernel whose activity it does not follow counts the end of
        the first activity after the resume, as before)."""
        km = self.serverapp.kernel_manager

        def mark(kernel):
            return getattr(kernel, "last_activity", None), getattr(kernel, "gkews_cell_started", None)
        marks = {nb["kernel_id"]: mark(km.get_kernel(nb["kernel_id"])) for nb in notebooks if nb["kernel_id"] in km}
        cycle = self.state["cycle"]

        def first_cell(kernel, before) -> float | None:
            started = getattr(kernel, "gkews_cell_started", None)
            if started is not None and started != before[1]:
                return started.timestamp()
            if not ignores_our_activity(kernel) and kernel.last_activity != before[0] and \
                    kernel.execution_state == "idle":
                return kernel.last_activity.timestamp()
            return None

        async def watch():
            while self.state["cycle"] == cycle and marks:
                for kid, before in marks.items():
                    if kid not in km:
                        continue
                    started = first_cell(km.get_kernel(kid), before)
                    if started is not None:
                        stamp = round(started, 3)

                        def mark_usable(state):
                            state["timeline"]["kernel_usable"] = stamp
                        await self._write_then_publish(mark_usable, Event.KERNEL_USABLE, kernel_id=kid,
                                                       kernel_usable=stamp)
                        return
                await asyncio.sleep(0.25)
        if self._watch:
            self._watch.cancel()
        self._watch = asyncio.create_task(watch())

    # -- waking up in a restored snapshot -------------------------------------------------------------
    async def _resume_if_restored(self, notebooks: list[dict]) -> bool:
        """Ask the backend whether this process now runs in a restored environment; if so, take the resume
        path (verify every kernel, fall back to its checkpoint) instead of finishing the pause."""
        found = await self.backend.restored()
        if not found:
            return False
        await self._resume_restored(notebooks, found)
        return True

    async def _resume_restored(self, notebooks: list[dict], found: dict) -> None:
        self.state["timeline"].update(resume_requested=now(), capacity_obtained=now())
        self.state["restored_from"] = found
        snapshot = self.state.get("snapshot")
        if isinstance(snapshot, dict) and snapshot.get("status") == "ready":
            # Ready before this process saw itself restored from it (on a loaded node the restore came between
            # the pause's two looks): it is the snapshot this process came back from, as the backend says when
            # it sees the restore first
            snapshot["status"] = "restored"
        await self._enter(State.RESUMING, Phase.RESTORING, f"this process was restored from a snapshot "
                          f"({found['reason']}): verifying every kernel", Event.RESTORED_DETECTED, evidence=found)
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
                [nb for nb in self.state["notebooks"]
                 if nb["status"] == NotebookStatus.RELEASED and nb.get("checkpoint")], found))
        if self._restore_watch:
            self._restore_watch.cancel()
        self._restore_watch = asyncio.create_task(watch())


def _damaged(why: str) -> bool:
    """Whether a variable failed for bytes of its checkpoint that are damaged or gone (kernel_state's
    CorruptBlob names the blob or the storage): then that checkpoint cannot bring it back, whatever is fixed."""
    return why.startswith(("blob ", "storage "))


_DAMAGED_BLOB = re.compile(r"blob ([0-9a-f]{12})")  # how kernel_state's CorruptBlob begins


def checkpoints_holding(root: str, notebook: str, failed: dict[str, str], exclude: str) -> list[str]:
    """The notebook's checkpoints but `exclude`, newest first, that hold one of the failed variables in bytes
    other than the damaged blob it failed on (reads manifests only, as the server may). Checkpoints share a
    blob whose bytes did not change: an earlier one naming the same damaged blob fails the same way."""
    damaged = {name: _DAMAGED_BLOB.match(why) for name, why in failed.items()}
    store, found = Store(root), []
    for cid in store.checkpoint_ids(notebook):
        try:
            manifest = store.load_manifest(notebook, cid)
        except CheckpointError:  # a damaged (or meanwhile deleted) manifest: nothing can be restored from it
            continue
        if cid != exclude and any(_holds(manifest, name, damaged[name]) for name in failed):
            found.append(cid)
    return found


def _holds(manifest: dict, name: str, damaged) -> bool:
    if name in manifest["modules"]:
        return True
    if name not in manifest["variables"]:
        return False
    return damaged is None or not any(b.startswith(damaged.group(1)) for b in variable_blobs(manifest, name))


def mark_lost(nb: dict, why: str, when: str = "while paused") -> None:
    """A paused notebook whose file was deleted: no kernel for it, and where its checkpoint is. Its user deleted
    it: it is not resumed, so it has no verdict (not a failed resume: the metrics and the report leave it out of
    the resumes and count it apart, from its `notebook-deleted` event)."""
    checkpoint = nb["checkpoint"]
    # its message said what the pause did with it ("released ..."), which no longer holds
    nb.update(status=NotebookStatus.LOST, verdict=None, deleted=True,
              message=f"deleted {when}: not resumed; its checkpoint {checkpoint} stays in the store",
              error=f"the notebook file {nb['path']} was deleted {when}, {why}",
              next_step=f"its checkpoint {checkpoint} stays in the store: in another notebook run "
                        f"%gkews_checkpoint restore --notebook {magic_quoted(nb.get('saved_as') or nb['path'])} "
                        f"--checkpoint {checkpoint}")


def deleted_note(paths: list[str]) -> str:
    """What a resume's message says of the notebooks deleted while paused."""
    return f"; deleted while paused, not resumed: {', '.join(paths)}" if paths else ""


def unsaved_variables_note(nb: dict) -> str:
    """What a resume's message says of the variables a notebook's checkpoint could not hold (an open file, a
    generator): in a new process they are gone, and "resumed: 1 restored-from-checkpoint" alone read as all back."""
    skipped = nb.get("skipped_at_save") or {}
    if not skipped or nb.get("same_process") or nb.get("verdict") not in (Verdict.RESTORED_FROM_CHECKPOINT,
                                                                          Verdict.PARTIALLY_RESTORED):
        return ""
    return f"; not saved by the pause, so not back in {nb['path']} (re-run their cells): {', '.join(sorted(skipped))}"


def unsaved_note(notebooks: list[dict]) -> str:
    """What a resume's message says of the notebooks its pause could not checkpoint: no kernel, nothing restored."""
    return "".join(f"; not resumed: {nb['path']} ({nb.get('error') or 'not checkpointed by the pause'}; open it "
                   f"and re-run its cells, or restore an earlier checkpoint: %gkews_checkpoint list)"
                   for nb in notebooks)
