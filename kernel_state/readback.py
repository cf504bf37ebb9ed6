"""Read back the blobs a checkpoint reuses before anyone relies on it.

A save writes only what changed: a storage whose bytes an earlier save already stored is named by its
hash and not written again. The file under that name was hashed when it was written, possibly days ago;
if it was damaged since (a bad disk, a tool that rewrote it, a copy cut short), every checkpoint naming it
carries the damage, and it shows only at restore. A pause then releases the kernel whose memory still
held the good bytes: they are lost. So the pause's save reads back each reused blob and compares it with
its name. A damaged one is removed (blobs are named by content: nothing else can be under that name) and
the save runs again, writing it from the kernel's memory; that heals every checkpoint naming it.
"""
from __future__ import annotations

import os
import stat

from .hashing import file_blocks, new_hasher
from .store import Store

_EXTENSIONS = ("safetensors", "pkl")  # what a save writes (an automatic checkpoint's .enc is not checked here)


def damaged_blobs(store: Store, blobs: dict, written: set[str]) -> list[str]:
    """Paths of the blobs in `blobs` ({digest: size}) that this save did not write (`written`: their paths)
    and whose file no longer holds what its name says: another size, or other bytes."""
    damaged = []
    for digest, size in blobs.items():
        for ext in _EXTENSIONS:
            path = store.blob_path(digest, ext)
            if path in written:
                break
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            except OSError:  # a link under our name (ELOOP) or unreadable: not a blob to trust
                damaged.append(path)
                break
            with os.fdopen(fd, "rb") as f:
                if os.fstat(fd).st_size != size or not stat.S_ISREG(os.fstat(fd).st_mode):
                    damaged.append(path)
                    break
                hasher = new_hasher()
                for block in file_blocks(f):
                    hasher.update(block)
                if hasher.hexdigest() != digest:
                    damaged.append(path)
            break
    return damaged


def remove(paths: list[str]) -> None:
    """Take damaged blobs out of the store, so that the next save writes them again."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
