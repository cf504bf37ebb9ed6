"""Warm staging memory for kernel undo: buffers the writer is done with, kept for the next snapshot.

A cell that trains a model changes the same tensors, of the same sizes, cell after cell. Copying them
into fresh memory costs a page fault per page (and on a VM that hands freed memory back to its host,
a trip to the host as well): several times the copy itself. So once the writer has written a snapshot,
its staging buffers go back here, and the next snapshot copies into one of exactly the size it needs.
The pool is bounded (GKEWS_AUTO_STAGING_MB), lets go of a buffer that 20 snapshots in a row did not
take, and is emptied when auto-checkpointing stops or a pause begins.
"""
from __future__ import annotations

import mmap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import config
from .alignment import private_memory

MIN_POOLED = 1 << 20  # smaller copies are cheap to allocate and too varied in size to match
PIECE = 1 << 20      # copied on one thread, then hashed from the cache on this one
LARGE_PIECE = 8 << 20  # when nothing is hashed: 268 MB of 16 MiB tensors in 14 ms, against 19 with 1 MiB
KEEP_FOR = 20  # snapshots a buffer waits to be taken again before it goes back to the system
_copiers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gkews-stage")


def _fresh(n: int):
    """New staging memory: small copies in a bytearray; large ones in an anonymous private mapping,
    which is neither zeroed first (a bytearray is) nor backed by huge pages (numpy asks for them, and
    zeroing 2 MiB pages on first touch made a cold copy twice as slow here), and which goes back to the
    system when dropped."""
    return bytearray(n) if n < MIN_POOLED else private_memory(n)


class StagingPool:
    def __init__(self):
        self._lock = threading.Lock()
        self._free: dict[int, list[tuple[int, mmap.mmap]]] = {}  # size -> (snapshot it came from, buffer)
        self._given = 0  # snapshots given back so far
        self.bytes = 0
        self.reused = 0  # bytes copied into warm buffers since the start, for status and benchmarks

    def copy(self, mv, hasher=None) -> memoryview:
        """A private copy of `mv` (1-D bytes), in a warm buffer of its size when one is free, fed to
        `hasher` (if any) in order. Large ones are copied piece by piece on two threads (numpy lets go
        of the GIL); with a hasher, each piece is hashed as soon as it is there, while it is still in
        the CPU's cache."""
        n = mv.nbytes
        buf = self._take(n) if n >= MIN_POOLED else None
        if buf is None:
            buf = _fresh(n)
        out = memoryview(buf)
        if n < 2 * PIECE:
            out[:] = mv
            if hasher is not None:
                hasher.update(out)
            return out
        src, dst = np.frombuffer(mv, np.uint8), np.frombuffer(buf, np.uint8)
        # hashed as it arrives: pieces that fit in the cache; else larger ones (fewer hand-offs)
        piece = PIECE if hasher is not None else max(PIECE, min(LARGE_PIECE, -(-n // 2)))
        starts = range(0, n, piece)
        copies = [_copiers.submit(np.copyto, dst[i:i + piece], src[i:i + piece]) for i in starts]
        for start, done in zip(starts, copies):
            done.result()
            if hasher is not None:
                hasher.update(out[start:start + piece])
        return out

    def _take(self, nbytes: int) -> bytearray | None:
        with self._lock:
            free = self._free.get(nbytes)
            if not free:
                return None
            self.bytes -= nbytes
            self.reused += nbytes
            return free.pop()[1]

    def give(self, views) -> None:
        """Buffers the writer no longer needs; what does not fit the bound is left to the allocator."""
        try:
            limit = config.auto_staging_bytes()
        except ValueError:  # said when auto-checkpointing was turned on
            limit = 0
        with self._lock:
            self._given += 1
            for size, free in list(self._free.items()):  # sizes the last snapshots did not need: let go
                kept = [(given, buf) for given, buf in free if given > self._given - KEEP_FOR]
                self.bytes -= size * (len(free) - len(kept))
                if kept:
                    self._free[size] = kept
                else:
                    del self._free[size]
            for view in views:
                buf = view.obj if isinstance(view, memoryview) else None
                if type(buf) is not mmap.mmap or len(buf) < MIN_POOLED or self.bytes + len(buf) > limit:
                    continue
                self._free.setdefault(len(buf), []).append((self._given, buf))
                self.bytes += len(buf)

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self.bytes = 0
