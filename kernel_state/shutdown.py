"""Leave the process as a kernel shutdown would, from inside a shell request (the pause's hold).

A held kernel that is shut down must exit without returning to its shell loop, where the cell waiting
behind the hold would run: so os._exit. But os._exit skips what Python does at exit, and a notebook's
open files lose what it wrote and had not yet flushed (a log opened for append comes out empty, a gzip or
zip archive unreadable). So first what the interpreter would do: the atexit handlers (logging's flush),
then every open file closed, each wrapper before what it wraps (a text file before its buffer, a gzip or
zip archive before its file), as the objects' finalizers would.
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import io
import os
import sys


def exit_as_a_shutdown_would(status: int = 0) -> None:
    # ipykernel's streams first, while its IOPub thread still runs: one of its atexit handlers stops that thread,
    # and a stream still watching its pipe then failed to forward the last bytes ("RuntimeError: Event loop is
    # closed", a traceback in the server's log at every pause that shut a held kernel down)
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "watch_fd_thread", None) is not None:
            with contextlib.suppress(BaseException):
                stream.flush()
                stream.close()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    close_open_files()
    os._exit(status)


def close_open_files() -> int:
    """Close every open file object of the process but its standard streams, outermost first; returns
    how many. A file that fails to close (its disk is full) is left: the process exits anyway."""
    keep = {id(s) for s in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)}
    keep |= {id(getattr(s, "buffer", None)) for s in (sys.__stdin__, sys.__stdout__, sys.__stderr__)}
    archives = tuple(t for t in (_type("zipfile", "ZipFile"), _type("tarfile", "TarFile")) if t is not None)
    layers: list[list] = [[], [], [], [], []]
    for obj in gc.get_objects():
        if id(obj) in keep:
            continue
        if archives and isinstance(obj, archives):
            layers[0].append(obj)
        elif isinstance(obj, io.IOBase) and not _closed(obj):
            layers[_layer(obj)].append(obj)
    closed = 0
    for layer in layers:
        for obj in layer:
            try:
                if not _closed(obj):
                    obj.close()
                    closed += 1
            except Exception:  # whatever a close raises, the others still get theirs
                pass
    return closed


def _layer(f) -> int:
    """1 text files, 2 files written in Python over another file (gzip, bz2, lzma), 3 buffered, 4 raw."""
    if isinstance(f, io.TextIOBase):
        return 1
    if isinstance(f, (io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.BufferedRWPair, io.BytesIO)):
        return 3
    if isinstance(f, io.RawIOBase):
        return 4
    return 2


def _closed(f) -> bool:
    try:
        closed = getattr(f, "closed", None)
    except Exception:  # a half-made object: nothing to close
        return True
    if isinstance(closed, bool):
        return closed
    return getattr(f, "fp", None) is None  # ZipFile has no `closed`: it drops its fp when closed


def _type(module: str, name: str):
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None
