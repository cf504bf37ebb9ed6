"""How the lifecycle changes its state: every change checked against the transition table (states.py),
written atomically with its event line (journal.py) and its checkpoint pins, off the event loop."""
from __future__ import annotations

import asyncio
import copy
import errno

from kernel_state.pins import write_pins
from kernel_state.store import write_error

from ..errors import StateNotWritable
from ..journal import event_record
from ..state import now
from ..states import Event, NotebookStatus, Phase, State, awaiting_resume, check_transition
from .paths import one_line


#: what a pin that cannot be written stops (write_error's action and outcome)
PINNING = ("pin the checkpoints the paused notebooks resume from in", "the checkpoints are as they were")


def pinned_checkpoints(state: dict) -> dict:
    """checkpoint id -> notebook path: what a notebook of this state would resume from (once active, only
    the notebooks a resume left behind), and in any state the checkpoints that hold variables a resume
    could not restore (until a pause saves them again)."""
    kept = {cid: nb["path"] for nb in state["notebooks"] for cid in nb.get("unrestored_checkpoints", [])}
    if state["state"] == State.ACTIVE:
        return {**kept, **{nb["checkpoint"]: nb["path"] for nb in state["notebooks"] if awaiting_resume(nb)}}
    return {**kept, **{nb["checkpoint"]: nb["path"] for nb in state["notebooks"]
                       if nb.get("checkpoint") and nb.get("status") != NotebookStatus.RESUMED}}


def _one_line(state: dict, details: dict) -> None:
    """The state's message and the event's, each one line (paths.one_line)."""
    state["message"] = one_line(state.get("message") or "")
    if isinstance(details.get("message"), str):
        details["message"] = one_line(details["message"])


class Persistence:
    """The write paths of Lifecycle (a mixin: it uses the lifecycle's state, store and claim)."""

    async def _persist(self, event: Event, **details) -> None:
        self.state["updated"] = now()
        _one_line(self.state, details)
        snapshot = copy.deepcopy(self.state)
        record = event_record(snapshot, event, **details)
        async with self._write_lock:
            await asyncio.to_thread(self._write, snapshot, record)

    async def _write_then_publish(self, apply, event: Event, **details) -> None:
        """Write a change to disk first and only then show it in status: whoever reads it from status
        finds it (and its event) on disk too."""
        pending = copy.deepcopy(self.state)
        apply(pending)
        if (pending["state"], pending["phase"]) != (self.state["state"], self.state["phase"]):
            check_transition(self.state["state"], pending["state"], pending["phase"])
        pending["updated"] = now()
        _one_line(pending, details)
        record = event_record(pending, event, **details)
        async with self._write_lock:
            await asyncio.to_thread(self._write, pending, record)
        apply(self.state)
        self.state.update(updated=pending["updated"], message=pending["message"])

    async def _pin_before(self, nb: dict, changes: dict) -> None:
        """A notebook's new checkpoint is pinned on disk before the status shows it: whoever reads the id
        there may try to delete it at once."""
        pending = copy.deepcopy(self.state)
        index = next(i for i, other in enumerate(self.state["notebooks"]) if other is nb)
        pending["notebooks"][index].update(changes)
        async with self._write_lock:
            await asyncio.to_thread(self._write_pins, pending)

    def _write(self, snapshot: dict, record: dict) -> None:
        self._write_pins(snapshot)  # before the state: a paused state on disk always has its pins
        # the event, then the state; a state that cannot be written takes its event back, so that a
        # refused change (507: "nothing was changed") leaves neither file changed
        before = self.store.append_event(record)
        try:
            self.store.save(snapshot)
        except BaseException:
            self.store.take_back_events(before)
            raise
        for listener in self.listeners:
            # written and about to show: a listener (the metrics) that fails must not fail the step it observes
            try:
                listener(record, snapshot)
            except Exception:
                if self.log:
                    self.log.exception("gkews: a listener of the event log failed on %s", record.get("event"))

    def _record(self, event: Event, **details) -> None:
        """Write the state and one event synchronously (a starting server, before it answers requests)."""
        self.state["updated"] = now()
        _one_line(self.state, {})
        self._write(copy.deepcopy(self.state), event_record(self.state, event, message=self.state["message"],
                                                            **details))

    def _write_pins(self, snapshot: dict) -> None:
        """Pin in the checkpoint store every checkpoint a notebook of this state would resume from, so that
        no delete, retention or cleanup (server or kernel) removes it; unpin them once active again."""
        needed = pinned_checkpoints(snapshot)
        if needed == self._pins:
            return
        try:
            write_pins(self.checkpoint_root, self.store.directory, needed)
        except OSError as exc:
            # Left as it is, and written at the next change (self._pins unchanged): on a read-only volume nothing
            # can delete a checkpoint, so none needs a pin (until it is writable again); and a file that pins
            # more than is needed (a resume unpinning on a full disk) keeps checkpoints a while longer and loses
            # none, so a resume that only reads the store does not fail for want of a block.
            fewer = self._pins is not None and needed.items() <= self._pins.items()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) and not fewer:  # a full volume: where, and the fix
                raise write_error(exc, self.checkpoint_root, PINNING) from None
            if exc.errno != errno.EROFS and not fewer:  # as it is: a server starting names the checkpoint root
                raise
            if self.log and self._pins_failing != str(exc):  # once, not at every change
                self.log.warning("gkews: cannot write the pins of %s (%s); trying again at each change",
                                 self.checkpoint_root, exc)
            self._pins_failing = str(exc)
            return
        self._pins, self._pins_failing = needed, None

    async def _enter(self, state: State, phase: Phase | None, message: str, event: Event, *, final: bool = False,
                     **details) -> None:
        """Move to a state. The last step of a transition (final) is written to disk before anyone can
        see it, and the claim is released at that same moment: whoever reads "paused" may resume at once."""
        check_transition(self.state["state"], state, phase)  # IllegalTransition: a bug, never bad input
        changes = {"state": state, "phase": phase, "message": message}
        if state != State.FAILED:
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

    async def _begin(self, apply, event: Event, **details) -> None:
        """The first step of a transition, on disk before it shows in status. When the state cannot be
        written (a full volume), nothing changed: the caller hears why (and its `async with Claim` gives the
        claim back)."""
        try:
            await self._write_then_publish(apply, event, **details)
        except OSError as exc:
            raise StateNotWritable(
                f"the state directory {self.store.directory} cannot be written ({exc.strerror or exc}"
                f"{': ' + exc.filename if exc.filename else ''}); free space there or fix its permissions, "
                f"then try again. Nothing was changed.") from None

    async def _fail(self, reason: str, next_step: str) -> None:
        # one line from here on: the error, the message, the fallback below and the event written later
        reason, next_step = one_line(reason), one_line(next_step)
        self.state["error"] = {"reason": reason, "next_step": next_step}
        try:
            await self._enter(State.FAILED, None, f"{reason} {next_step}", Event.FAILED, final=True, reason=reason)
        except OSError as exc:  # not even this could be written (a full volume): status still tells
            if self.log:
                self.log.error("gkews: cannot record the failure in %s: %s", self.store.directory, exc)
            self.state.update(state=State.FAILED, phase=None, progress=None, message=(
                f"{reason} {next_step} (This failure could not be recorded: the state directory "
                f"{self.store.directory} cannot be written: {exc.strerror or exc}.)"))
            self._record_failure_later(reason, f"{reason} {next_step}")
        finally:
            self._release_claim()

    #: seconds between two tries to write a failure the state directory refused, and how many tries (an hour)
    record_retry_interval, record_retries = 10.0, 360

    def _record_failure_later(self, reason: str, message: str) -> None:
        """Write the failure once the state directory takes it again (space freed): until then state.json
        still shows the transition as running, and a server restarted then would finish a pause the user
        was told had failed. Stops as soon as a newer change is made (it writes the whole state)."""
        cycle, updated = self.state["cycle"], self.state["updated"]

        async def retry():
            nonlocal updated
            for _ in range(self.record_retries):
                await asyncio.sleep(self.record_retry_interval)
                if self.busy or (self.state["cycle"], self.state["updated"]) != (cycle, updated):
                    return
                unrecorded, self.state["message"] = self.state["message"], message
                try:
                    await self._persist(Event.FAILED, message=message, reason=reason)
                    return
                except OSError:
                    self.state["message"], updated = unrecorded, self.state["updated"]
        task = asyncio.create_task(retry())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
