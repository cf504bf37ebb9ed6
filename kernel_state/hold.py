"""Save, then hold the kernel: the pause's checkpoint and the wait for its release in one shell request.

A kernel runs its shell requests one at a time, so while this request holds it no cell can run: a cell a
user starts meanwhile waits behind it. Interrupts are ignored while held (Jupyter interrupts a kernel
before shutting it down, which would otherwise let the waiting cell run in the last moment). The hold ends
when the server removes the hold file (the pause failed or was undone: the kernel goes on and the waiting
cell runs then), when the kernel is shut down (released: the process exits here, the waiting cell never
ran), or when its bound runs out (the server sees that and checkpoints again). The save's result is
printed as one line at once, so the server need not wait for the hold to end to read it.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time

from . import api


def save_then_hold(request: str, hold_file: str, seconds: float) -> api.Answer:
    answer = api.answer(request)
    print(json.dumps({"gkews_saved": answer.payload}), flush=True)
    if answer.payload["ok"]:
        with _interrupts_ignored():
            _hold(hold_file, seconds)
    return answer


def _hold(hold_file: str, seconds: float) -> None:
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    deadline = time.monotonic() + seconds  # bounded: a server that vanished does not hold us forever
    while os.path.exists(hold_file) and time.monotonic() < deadline:
        if os.path.exists(hold_file + DETACH_SUFFIX):  # asked while held: no shell request can reach us now
            detach_from_parent()
            with contextlib.suppress(FileNotFoundError):
                os.remove(hold_file + DETACH_SUFFIX)
        if getattr(shell, "exit_now", False):  # a shutdown request arrived (ipykernel's do_shutdown)
            time.sleep(0.2)  # its reply goes out from the control thread meanwhile
            os._exit(0)
        time.sleep(0.05)


#: beside the hold file: the server asks a held kernel to outlive it (GPU suspend keeps it across restarts)
DETACH_SUFFIX = ".detach"


def detach_from_parent() -> None:
    """Let this kernel outlive the server that started it: ipykernel's parent poller exits the kernel once
    its parent changes, so give it a parent pid that equals every pid. Pure Python: it works while the
    process's CUDA calls are locked."""
    from ipykernel.kernelapp import IPKernelApp

    class AnyParent(int):
        def __ne__(self, other):
            return False

        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    poller = getattr(IPKernelApp.instance(), "poller", None)
    if poller is not None:
        poller.parent_pid = AnyParent(1)


@contextlib.contextmanager
def _interrupts_ignored():
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to ignore here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
