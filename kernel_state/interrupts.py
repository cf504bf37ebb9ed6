"""An interrupt (SIGINT: the page's Interrupt, `km.interrupt_kernel`) held off while a restore takes away
what it must, or puts back what an interrupted restore changed, so that the namespace is changed whole
or not at all.

Loading a checkpoint can take minutes and stays interruptible: restore_namespace puts each value in place
as it is loaded, and an interrupt part way puts back what the namespace held (it left some variables
restored and others not: a rewind half done, with no word of it). The short steps at its end, and that
putting back, must not be cut short themselves: during them SIGINT is noted instead, and the step finishes.
"""
from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def held_off():
    """Yields a list that holds the SIGINTs that came during the block (which then ran whole). Outside the
    main thread, where no signal handler can be set, the block runs as it is."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    try:
        before = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    except (ValueError, OSError):  # signals cannot be handled here (a sub-interpreter)
        yield came
        return
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, before)
