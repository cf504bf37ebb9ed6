"""An interrupt (SIGINT: the page's Interrupt, `km.interrupt_kernel`) held off while a restore puts its
values in place, so that the namespace is changed whole or not at all.

Loading a checkpoint can take minutes and stays interruptible: an interrupt then stops the restore before
anything is changed. Putting the loaded values into the namespace takes microseconds, and an interrupt in
its middle left some variables restored and others not (a rewind half done, with no word of it): during
that step SIGINT is noted instead, and the step finishes.
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
