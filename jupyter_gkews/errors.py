"""What can go wrong in the server's domain, as types and without HTTP: the REST handlers alone decide
which status code each one gets (handlers.STATUS_CODES); the lifecycle, the idle policy and the
backends only raise and catch them."""
from __future__ import annotations


class LifecycleError(Exception):
    """A request the server refuses or could not carry out; the message names the problem and the fix."""


class BadRequest(LifecycleError):
    """The request itself is wrong (a field, a path, a notebook with no kernel)."""


class Conflict(LifecycleError):
    """The request is fine but not now: another transition runs, or the state does not allow it."""


class NotFound(LifecycleError):
    """What the request names does not exist (a checkpoint)."""


class StateNotWritable(LifecycleError):
    """The state directory cannot be written (a full or read-only volume): nothing was started."""


class StoreUnusable(LifecycleError):
    """The checkpoint root cannot be used as a store (not a store, a link inside): a setting to fix."""


class KernelCallFailed(LifecycleError):
    """The kernel answered with an error (or not at all): a server-side problem, not bad input."""


class KernelCallError(Exception):
    """A call into a kernel failed (missing kernel_state, timeout, dead kernel, or kernel_state raised).

    `kind` is the name of the exception class kernel_state raised in the kernel ("CheckpointNotFound",
    "ValueError", ...), or None when the kernel itself could not answer.
    """

    def __init__(self, message: str, kind: str | None = None):
        super().__init__(message)
        self.kind = kind


class KernelStateMissing(KernelCallError):
    """The kernel's environment has no kernel_state (jupyter-gkews is not installed there)."""


#: kernel_state's exception classes (by name, as they cross the bridge) that mean "no such thing"
KERNEL_NOT_FOUND = frozenset({"CheckpointNotFound"})
#: ... and "cannot be read": a damaged manifest (or one of a format this kernel_state does not read)
KERNEL_UNREADABLE = frozenset({"CorruptManifest"})
#: ... and "not now": a checkpoint a pausing or paused notebook needs (kernel_state.pins)
KERNEL_CONFLICT = frozenset({"CheckpointPinned"})


def from_kernel(exc: KernelCallError, suffix: str = "") -> LifecycleError:
    """The domain error for a failed kernel call, decided by the type kernel_state raised."""
    if exc.kind in KERNEL_NOT_FOUND:
        return NotFound(str(exc))
    if exc.kind in KERNEL_CONFLICT:
        return Conflict(str(exc))
    if exc.kind == "NotAStore":  # the checkpoint root is a folder of the user's, or has a link inside
        return StoreUnusable(str(exc))
    return KernelCallFailed(f"{exc}{suffix}")
