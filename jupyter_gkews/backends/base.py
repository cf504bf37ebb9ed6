"""What a backend does for the lifecycle. The lifecycle checkpoints and verifies kernels itself;
a backend only takes snapshots, releases the environment, gets it back, and says how to recover."""
from __future__ import annotations

import math

from traitlets import TraitError
from traitlets.config import LoggingConfigurable

from ..states import NotebookStatus, State


#: Per-notebook statuses of a pause whose kernel process lives on (local GPU suspend): "suspended" (its GPU
#: state is in host memory, the GPU is free) and "kept-running" (it held no CUDA context: nothing to release).
#: A resume brings them back live and verifies them; "released" notebooks come back from their checkpoints.
SUSPENDED = NotebookStatus.SUSPENDED
KEPT_RUNNING = NotebookStatus.KEPT_RUNNING
LIVE_STATUSES = (SUSPENDED, KEPT_RUNNING)  # a paused notebook whose kernel process lives on


def in_range(proposal, low: float, *, strict: bool = False, zero: str = ""):
    """For a traitlets @validate of a number setting: the proposed value when it is finite and at least low (more
    than low when strict), else a TraitError naming c.<Class>.<setting>, the range and the value. zero: what 0
    means, for a setting whose range starts at a special 0."""
    value, trait = proposal["value"], proposal["trait"]
    if math.isfinite(value) and (value > low if strict else value >= low):
        return value
    rule = f"0 ({zero}) or positive" if zero else f"more than {low:g}" if strict else f"at least {low:g}"
    if not math.isfinite(value):  # "at least 0, not inf" read as if inf were too small
        rule = f"a finite number, {rule}"
    raise TraitError(f"c.{trait.this_class.__name__}.{trait.name} must be {rule}, not {value!r}")


class SnapshotFailed(Exception):
    """The backend could not take its snapshot; the message names the cause (the pause then completes on the
    application checkpoint unless the backend's abort_on_snapshot_failure says otherwise, or `abort`: the release
    itself could not end, so nothing may be released)."""

    def __init__(self, message: str, abort: bool = False):
        super().__init__(message)
        self.abort = abort


class Backend(LoggingConfigurable):
    name = "base"
    #: a failed snapshot fails the pause (nothing released) instead of pausing on the checkpoint alone
    abort_on_snapshot_failure = False
    #: its release stops every kernel of the server, paused or not (GKE releases the Pod); otherwise a kernel
    #: the pause did not release keeps its GPU, and the GPU hours of that pause are none
    releases_environment = False

    def bind(self, server_app) -> None:
        """Called once, with the running ServerApp (kernel and session managers)."""
        self.serverapp = server_app

    async def snapshot(self, notebooks: list[dict]) -> dict | None:
        """Take a snapshot of the environment after the checkpoints; None when the backend has none."""
        return None

    async def release(self, notebooks: list[dict]) -> dict | None:
        """Give the resources back (kernels, the GPU, the Pod). May return, per notebook path, what to record
        on that notebook: {"status": "released" or one of LIVE_STATUSES, "message": what the user reads, ...};
        None: every notebook was released."""
        raise NotImplementedError(f"{type(self).__name__} must define release(): a backend has to free something")

    async def pause_failed(self) -> str:
        """The pause failed after snapshot() (the kernels run on): take back what it made that a later start
        could bring back; what was done, or what a person must do, as a sentence ('' when nothing)."""
        return ""

    async def acquire(self, notebooks: list[dict]) -> None:
        """Wait until the environment can run again (capacity); raise with the reason if it cannot."""

    async def start_kernel(self, notebook: dict) -> str:
        """Return the id of a kernel running for this notebook after a resume. A backend that had to give up
        the notebook's live kernel sets notebook["fallback"] to why; the verdict then carries that reason."""
        raise NotImplementedError(f"{type(self).__name__} must define start_kernel()")

    async def cleanup(self, *, dry_run: bool = False) -> list[dict]:
        """Remove what this backend keeps outside the checkpoint store and no longer needs (the GKE
        backend: old PodSnapshots and spent triggers). Returns one dict per object removed (or that
        would be, with dry_run): at least "kind", "name" and "bytes" (0 when unknown)."""
        return []

    async def recover_paused(self, lifecycle, found: str = State.PAUSED) -> None:
        """The server started and found the state `paused`, or a pause (`found` "pausing") rolled forward or
        a resume ("resuming") rolled back to paused by lifecycle.recovery: do what this backend's users
        expect."""

    async def server_stopping(self, lifecycle) -> None:
        """The server is stopping (before it shuts its kernels down)."""

    async def restored(self) -> dict | None:
        """Asked after the snapshot request and before each later step of a pause: does this process now
        run in a restored copy of the environment (it was inside the snapshot)? Evidence, or None."""
        return None

    async def wait_restored(self) -> dict | None:
        """After a completed pause: wait until this process turns out to run in a restored environment
        (evidence), or return None at once when that cannot happen here."""
        return None
