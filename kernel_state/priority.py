"""Background threads that must not slow the user's cells down."""
from __future__ import annotations

import os
import threading

BACKGROUND_NICE = 10


def background_priority() -> None:
    """Lower the calling thread's CPU priority (Linux schedules threads on their own, so only this thread
    is affected): kernel undo's writer and codec threads yield the cores to the next cell. Best effort."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (AttributeError, OSError):
        pass
