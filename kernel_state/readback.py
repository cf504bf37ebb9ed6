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

from .hashing import digest_file
from .store import Store

_EXTENSIONS = ("safetensors", "pkl")  # what a save writes (an automatic checkpoint's .enc is not checked here)


def damaged_blobs(store: Store, blobs: dict, written: set[str]) -> dict[str, str]:
    """{digest: path} of the blobs in `blobs` ({digest: size}) that this save did not write (`written`: their
    paths) and whose file no longer holds what its name says: not a regular file, or other bytes."""
    damaged = {}
    for digest, size in blobs.items():
        for ext in _EXTENSIONS:
            path = store.blob_path(digest, ext)
            if path in written:
                break
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            # by its bytes alone: a blob is named by its hash, and only the hash proves damage (removing a
            # pack on a size recorded wrong would take the entries of older checkpoints with it)
            if not stat.S_ISREG(st.st_mode) or _hash(path) != digest:
                damaged[digest] = path
            break
    return damaged


def _hash(path: str) -> str | None:
    try:
        return digest_file(path)
    except OSError:  # unreadable: not a blob to trust
        return None
