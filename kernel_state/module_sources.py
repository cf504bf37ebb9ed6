"""The source files of the notebook's own modules that a checkpoint needs (a `helpers.py` beside it).

A pickle names a class or function of such a module (`helpers.Model`) and the restore imports it from the
file as it is then. Edited since the save, the restored objects run other code than they were saved with,
and nothing said so. A save records each such file's digest; a restore that imports one changed since says
which, so that a surprise in the next cell has a name.
"""
from __future__ import annotations

import os
import sys

from .hashing import digest_bytes
from .module_objects import installed

_OWN = ("kernel_state", "jupyter_gkews")  # this project, which a development install also runs from a folder
_own_files: dict[tuple, str | None] = {}  # (name, id(module)) -> its source file if a module of the user's own


def record(module_names) -> dict:
    """{module: {"file", "digest"}} for those of these modules imported from a folder of the user's own."""
    out = {}
    for name in sorted(n for n in set(module_names) if isinstance(n, str)):
        path = _own_file(name, sys.modules.get(name))
        digest = _file_digest(path) if path else None
        if digest is not None:
            out[name] = {"file": path, "digest": digest}
    return out


def changed(recorded: dict, names) -> list[str]:
    """Of the recorded modules among these names, those whose source file differs now: "name (file)"."""
    out = []
    for name in sorted(set(names) & set(recorded)):
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str) and _file_digest(path) != recorded[name].get("digest"):
            out.append(f"{name} ({path})")
    return out


def _own_file(name: str, module) -> str | None:
    """Its file, when the module is the user's own; kept per module object (kernel undo saves after every cell).
    The file itself is looked at, not its top package's: a folder without __init__.py has no file."""
    key = (name, id(module))
    if key not in _own_files:
        path = getattr(module, "__file__", None)
        own = isinstance(path, str) and path.endswith(".py") and name.partition(".")[0] not in _OWN \
            and name != "__main__" and not installed(os.path.realpath(path))
        _own_files[key] = path if own else None
    return _own_files[key]


def _file_digest(path: str) -> str | None:
    """Read each time: a copy that keeps the time stamps (cp -p, rsync -t) changes a file of the same size."""
    try:
        with open(path, "rb") as f:
            return digest_bytes(f.read())
    except OSError:  # gone, unreadable: nothing to compare
        return None
