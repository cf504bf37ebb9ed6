"""Warm staging memory for kernel undo: buffers the writer is done with, kept for the next snapshot.

A cell that trains a model changes the same tensors, of the same sizes, cell after cell. Copying them
into fresh memory costs a page fault per page (and on a VM that hands freed memory back to its host,
a trip to the host as well): several times the copy itself. So once the writer has written a snapshot,
its staging buffers go back here, and the next snapshot copies into one of exactly the size it needs.
The pool is bounded (GKEWS_AUTO_STAGING_MB) and emptied when auto-checkpointing stops or a pause begins.
"""
from __future__ import annotations

import threading

from . import config

MIN_POOLED = 1 << 20  # smaller copies are cheap to allocate and too varied in size to match
PIECE = 512 << 10    # copied, then hashed from the cache


class StagingPool:
    def __init__(self):
        self._lock = threading.Lock()
        self._free: dict[int, list[bytearray]] = {}
        self.bytes = 0
        self.reused = 0  # bytes copied into warm buffers since the start, for status and benchmarks

    def copy(self, mv, hasher) -> memoryview:
        """A private copy of `mv` (1-D bytes), in a warm buffer of its size when one is free, fed to
        `hasher` piece by piece while each piece is still in the CPU's cache (a tenth faster than
        hashing the copy afterwards)."""
        buf = self._take(mv.nbytes) if mv.nbytes >= MIN_POOLED else None
        out = memoryview(bytearray(mv.nbytes) if buf is None else buf)
        for start in range(0, mv.nbytes, PIECE):
            piece = out[start:start + PIECE]
            piece[:] = mv[start:start + PIECE]
            hasher.update(piece)
        return out

    def _take(self, nbytes: int) -> bytearray | None:
        with self._lock:
            free = self._free.get(nbytes)
            if not free:
                return None
            self.bytes -= nbytes
            self.reused += nbytes
            return free.pop()

    def give(self, views) -> None:
        """Buffers the writer no longer needs; what does not fit the bound is left to the allocator."""
        try:
            limit = config.auto_staging_bytes()
        except ValueError:  # said when auto-checkpointing was turned on
            limit = 0
        with self._lock:
            for view in views:
                buf = view.obj if isinstance(view, memoryview) else None
                if type(buf) is not bytearray or len(buf) < MIN_POOLED or self.bytes + len(buf) > limit:
                    continue
                self._free.setdefault(len(buf), []).append(buf)
                self.bytes += len(buf)

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self.bytes = 0
