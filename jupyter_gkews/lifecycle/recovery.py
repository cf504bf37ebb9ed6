"""What a starting server does with the state a stopped one left: a half-done pause is rolled forward
(paused; failed when it had committed no checkpoint at all), a half-done resume rolled back (paused, resume
again); states.RECOVERIES lists them."""
from __future__ import annotations


from ..backends.base import LIVE_STATUSES
from ..state import now
from ..states import Event, NotebookStatus, State, awaiting_resume, check_recovery


#: what a pause leaves running: a kernel of the server's own, which stops with it
LEFT_RUNNING = (NotebookStatus.BUSY, NotebookStatus.NOT_CHECKPOINTED, NotebookStatus.RUNNING,
                NotebookStatus.CHECKPOINTED)


class Recovery:
    """The start-up of Lifecycle (a mixin)."""

    def load(self) -> None:
        """Read the persisted state and finish or roll back what a stopped server left half done.

        Runs while the server initialises, before it answers any request, so no client ever sees a
        half-recovered state; the work is a few small file reads and one atomic write.
        """
        saved = self.store.load()
        self._found = saved["state"] if saved else None
        if saved is None:
            self._record(Event.STARTED)
            return
        self.state = saved
        self.state["backend"] = self.backend.name
        self.state["progress"] = None
        if saved["state"] == State.PAUSING:
            self._finish_interrupted_pause()
        elif saved["state"] == State.RESUMING:
            self._roll_back_interrupted_resume()
        else:
            if saved["state"] == State.PAUSED:
                self._left_running_stopped()
            self._record(Event.STARTED)

    def _left_running_stopped(self) -> None:
        """Notebooks a pause left running (busy, or not checkpointed) had their kernels stop with the server:
        said "busy" with a kernel id no server has, and the resume never named them. They are lost, and the
        resume says so (unsaved_note)."""
        for nb in self.state["notebooks"]:
            if nb.get("status") in LEFT_RUNNING:
                nb.update(status=NotebookStatus.LOST, verdict=None,
                          error=f"left running by the pause ({nb.get('error') or nb['status']}), its kernel stopped "
                                f"with the server: what it held since its last checkpoint is gone")

    async def recover(self) -> None:
        """After the server started: what a backend does on finding the state paused, a pause it rolled
        forward or a resume it rolled back (the GKE backend restores a cold-started Pod; the local one checks
        which suspended kernels still live, and waits for the user)."""
        if self._found in (State.PAUSED, State.PAUSING, State.RESUMING) and self.state["state"] == State.PAUSED:
            await self.backend.recover_paused(self, found=self._found)
            await self._persist(Event.RECOVERED_PAUSED)

    def _failed_on_start(self, lost: list[str]) -> None:
        """A pause the server stopped before any checkpoint was committed: failed, with what to do."""
        reason = ("the server stopped during the pause, before any checkpoint was written: nothing was paused, "
                  "and the kernels stopped with the server")
        next_step = (f"Run the cells of {', '.join(lost) or 'your notebooks'} again (a new kernel starts); "
                     "%gkews_checkpoint list shows the checkpoints saved before this pause, and restore brings "
                     "one back")
        check_recovery(self.state["state"], State.FAILED)  # IllegalTransition: a bug, never bad input
        self.state["timeline"].pop("environment_stopped", None)  # nothing was paused: no release to count
        self.state.update(state=State.FAILED, phase=None, message=f"{reason}. {next_step}",
                          error={"reason": reason, "next_step": next_step})
        self._record(Event.RECOVERED_INTERRUPTED_PAUSE)

    def _recovered(self, message: str, event: Event, **changes) -> None:
        check_recovery(self.state["state"], State.PAUSED)  # IllegalTransition: a bug, never bad input
        self.state.update(state=State.PAUSED, phase=None, message=message, **changes)
        self._record(event, timeline=dict(self.state["timeline"]))  # the report reads when the release began

    def _roll_back_interrupted_resume(self) -> None:
        """Every notebook is paused again, the ones already resumed too: their kernels stopped with the
        server that restored them. The next resume restores each from its checkpoint. A kernel that still
        lives on detached (GPU suspend) keeps its status; recover_paused checks that it is still there."""
        for nb in self.state["notebooks"]:
            if nb.get("status") not in LIVE_STATUSES and nb.get("checkpoint"):
                nb.update(status=NotebookStatus.RELEASED, verdict=None)
        self._recovered("the server stopped during a resume; resume again to restore the notebooks from their "
                        "checkpoints", Event.RECOVERED_INTERRUPTED_RESUME)

    def _stop_outliving_kernels(self) -> list[str]:
        """A server killed while it released the kernels leaves those it had detached running (GPU suspend:
        they live through a server's death), holding GPU or host memory, out of its reach: the rolled-forward
        pause restores every notebook from its checkpoint, so they are stopped (their checkpoints hold them)."""
        from ..gpu_suspend.procs import same_process
        from ..gpu_suspend.keepalive import kill
        stopped = []
        for nb in self.state["notebooks"]:
            process = nb.pop("process", None)
            if process and nb["status"] == NotebookStatus.RELEASED and same_process(process["pid"], process["start"]):
                kill(process["pid"])
                stopped.append(nb["path"])
        return stopped

    def _finish_interrupted_pause(self) -> None:
        """Roll the pause forward: the old kernels are out of reach, every checkpoint they committed counts."""
        from kernel_state.store import Store, id_seconds  # reading manifests only; the server never unpickles
        store = Store(self.checkpoint_root)
        requested = self.state["timeline"].get("pause_requested", 0)
        for nb in self.state["notebooks"]:
            if nb.get("status") in (NotebookStatus.CHECKPOINTED, NotebookStatus.RELEASED):
                nb["status"] = NotebookStatus.RELEASED
                continue
            if awaiting_resume(nb):  # carried over from an earlier resume (or suspended): as it was
                continue
            # the pause's own: begun after it was requested, to the millisecond (a "checkpoint now" taken earlier
            # in the same second, compared by whole seconds, was resumed as the pause's, older values and all)
            fresh = [r for r in store.list(nb["path"]) if "error" not in r and id_seconds(r["id"]) >= requested]
            if fresh:
                nb.update(status=NotebookStatus.RELEASED, checkpoint=fresh[0]["id"], bytes=fresh[0]["bytes"])
            else:
                nb.update(status=NotebookStatus.LOST,
                          error="the server stopped before this notebook's checkpoint was written")
        stopped = self._stop_outliving_kernels()
        released = [nb for nb in self.state["notebooks"] if nb["status"] == NotebookStatus.RELEASED]
        lost = [nb["path"] for nb in self.state["notebooks"] if nb["status"] == NotebookStatus.LOST]
        if not released and not any(awaiting_resume(nb) for nb in self.state["notebooks"]):
            # nothing is paused: "paused, 0 notebook(s)" had the page hold the notebooks' cells until a Resume
            # that had nothing to bring back, and said nothing of the variables gone with the kernels
            self._failed_on_start(lost)
            return
        # A server stopped with SIGTERM recorded when it shut the kernels down; a killed one did not: its
        # kernels ended with it (their parent poller), and the last state it wrote (the pause's progress) is
        # the nearest moment on record. The restart, hours later maybe, counted the GPU as held until then.
        last_written = min(self.state.get("updated") or now(), now())
        self.state["timeline"].setdefault("environment_stopped", max(last_written, requested))
        message = f"the server stopped during a pause; completed on restart: {len(released)} notebook(s) paused"
        if stopped:
            message += (f"; stopped the kernel process(es) of {', '.join(stopped)}, detached to live on (GPU "
                        "suspend) when it stopped: the resume restores them from their checkpoints")
        if lost:
            message += f"; not checkpointed (re-run their cells): {', '.join(lost)}"
        self._recovered(message, Event.RECOVERED_INTERRUPTED_PAUSE, error=None)
