"""Live resources: objects whose value is a handle on something outside the process.

Pickling one saves the handle, not the thing, and unpickling it re-opens or re-creates that thing: dill
re-opens a file in its saved mode (mode 'w' truncates it), a restored TemporaryDirectory deletes its
folder when it is collected. A checkpoint never holds one: the variable that reaches one is skipped,
named with the cell that made it, and a restore touches nothing outside the checkpoint store.
"""
from __future__ import annotations

import io
import mmap
import socket
import sys
import threading
import types
import weakref

_LOCKS = (type(threading.Lock()), type(threading.RLock()))
_IN_MEMORY = (io.BytesIO, io.StringIO)


def _describe_file(obj) -> str:
    name = getattr(obj, "name", None)
    return f"an open file ({name})" if isinstance(name, str) else "a file object"


def live_resource(obj) -> str | None:
    """What kind of live resource `obj` is, or None when it is a plain value."""
    if isinstance(obj, io.IOBase) and not isinstance(obj, _IN_MEMORY):
        return _describe_file(obj)
    if isinstance(obj, socket.socket):
        return "an open socket"
    if isinstance(obj, mmap.mmap):
        return "a memory map of a file or of shared memory"
    if isinstance(obj, _LOCKS):
        return "a lock (its holder is a thread of this process)"
    if isinstance(obj, weakref.finalize):
        return "a finalizer (it would run its cleanup again in the restored kernel)"
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None and isinstance(obj, (tempfile.TemporaryDirectory, tempfile._TemporaryFileWrapper)):
        return "a temporary file or directory (restoring it would delete it again)"
    subprocess = sys.modules.get("subprocess")
    if subprocess is not None and isinstance(obj, subprocess.Popen):
        return "a child process"
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None and isinstance(obj, mp.BaseProcess):
        return "a child process"
    selectors = sys.modules.get("selectors")
    if selectors is not None and isinstance(obj, selectors.BaseSelector):
        return "a selector (open file descriptors)"
    return _database_or_segment(obj)


def _database_or_segment(obj) -> str | None:
    """Handles that hold a path or a name instead of an open file: a restored dbm.dumb database rewrites
    its index file on close (keys written after the checkpoint are lost); a restored SharedMemory
    re-attaches another process's segment and unlinks it at exit."""
    shelve = sys.modules.get("shelve")
    if shelve is not None and isinstance(obj, shelve.Shelf):
        return "an open shelf (a database on disk)"
    dumb = sys.modules.get("dbm.dumb")  # the other dbm kinds are C objects pickle refuses anyway
    if dumb is not None and isinstance(obj, dumb._Database):
        return "an open dbm database (files on disk)"
    shm = sys.modules.get("multiprocessing.shared_memory")
    if shm is not None and isinstance(obj, shm.SharedMemory):
        return f"a shared memory segment ({obj.name})"
    return None


# What a checkpoint never holds, and a restore never loads: what opens, writes or deletes files, or starts
# processes, when called (a `__reduce__` returning `(io.open, (path, "w"))` truncated that file at every restore)
_OPENS = {("builtins", "open"), ("io", "open"), ("_io", "open"), ("io", "open_code"), ("_io", "open_code"),
          ("io", "FileIO"), ("_io", "FileIO"), ("codecs", "open"), ("dill._dill", "_create_filehandle"),
          ("subprocess", "Popen"), ("tempfile", "TemporaryDirectory"), ("tempfile", "SpooledTemporaryFile"),
          ("socket", "socket"), ("_socket", "socket")}
# modules whose classes a value may hold (os.stat_result, subprocess.CompletedProcess), but none of their functions
_TYPES_ONLY = {"os", "posix", "nt", "shutil", "subprocess", "pty", "socket", "_socket", "tempfile", "io", "_io"}
# a path's methods that change the file system (its others only read)
_PATH_WRITES = {"open", "write_text", "write_bytes", "touch", "mkdir", "rmdir", "unlink", "rename", "replace",
                "chmod", "lchmod", "symlink_to", "hardlink_to", "link_to"}
_CALLABLES = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
              types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType)


def outside_call(module, name, obj) -> bool:
    """Whether `obj`, a function or class known as module.name, opens, writes or deletes files, or starts
    processes, when called."""
    if module == "pathlib":
        return name.rpartition(".")[2] in _PATH_WRITES and not isinstance(obj, type)
    return (module, name) in _OPENS or module in _TYPES_ONLY and not isinstance(obj, type)


def outside_call_reason(module: str, name: str) -> str:
    return (f"{module}.{name} could open, write or delete a file (or start a process) outside the checkpoint "
            f"store: a checkpoint never holds it, so that a restore never runs it")


def refuse(obj) -> None:
    """Raise the TypeError that makes capture skip the variable holding `obj`, with the reason."""
    if isinstance(obj, _CALLABLES):
        module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if isinstance(module, str) and isinstance(name, str) and outside_call(module, name, obj):
            raise TypeError(f"cannot pickle {name!r}: {outside_call_reason(module, name)}")
    shell = sys.modules.get("IPython.core.interactiveshell")
    if shell is not None and isinstance(obj, shell.InteractiveShell):  # it reached its history database first
        raise TypeError("IPython's own shell (get_ipython()) is the kernel itself, never saved; call get_ipython() "
                        "again after a restore")
    if isinstance(obj, threading.Thread):
        if obj.is_alive():
            # dill would save the Thread object, but never the running code: it would come back dead
            raise TypeError(f"cannot pickle a running thread ({obj.name}): its stack lives only in this process")
        # one not started or finished holds the locks it waits on: skipped as "a lock", which named no thread
        raise TypeError(f"cannot pickle a thread ({obj.name}, {'finished' if obj.ident else 'not started'}): a "
                        f"Thread object holds live locks of this process; keep what it computed in a variable of "
                        f"its own")
    what = live_resource(obj)
    if what is not None and isinstance(obj, io.IOBase) and obj.closed:  # (`with open(...) as f:` leaves f)
        raise TypeError(f"cannot pickle {type(obj).__qualname__!r} object: {what.replace('an open', 'a closed', 1)}: "
                        "file objects are never saved, so that a restore cannot re-open a file; open it again")
    if what is not None:
        raise TypeError(f"cannot pickle {type(obj).__qualname__!r} object: {what} is a live resource, never saved "
                        f"so that a restore cannot touch anything outside the checkpoint")
