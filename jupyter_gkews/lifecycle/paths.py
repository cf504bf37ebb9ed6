"""The notebook paths a request names, checked and normalised."""
from __future__ import annotations

import posixpath

from ..errors import BadRequest


def one_line(message: str) -> str:
    """A status message is one line: a control character a notebook's name brought in (a newline in a file
    name is legal) is written as its escape, so the message can neither break nor forge a line."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)


def clean_notebook_paths(paths) -> list[str] | None:
    """Paths relative to the contents root, normalised; anything that could leave the root is refused."""
    if paths is None:
        return None
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise BadRequest('"notebooks" must be a list of notebook paths relative to the contents root')
    if not paths:  # an empty list would act on nothing, yet end the pause (or start one) for all
        raise BadRequest('"notebooks" is empty: name at least one notebook, or leave "notebooks" out for all')
    out: dict[str, None] = {}  # a notebook named twice is paused (and resumed) once, in the order first named
    for p in paths:
        if "\0" in p:
            raise BadRequest(f"notebook path {p!r} contains a NUL character, which no file name can hold")
        # a backslash is an ordinary character of a POSIX file name (run\1.ipynb), but never a way out. So is a
        # leading ~: the contents API expands no home folder (~draft.ipynb, and even ~/a.ipynb, are in the root)
        escape = posixpath.normpath(p.replace("\\", "/"))
        if p.startswith("/") and p.strip("/"):  # absolute: no request names a file by its place on the disk
            raise BadRequest(f"notebook path {p!r} is outside the contents root as written (it starts with /); give "
                             f"a path relative to it ({p.lstrip('/')!r} names the one in the root)")
        if p.startswith(("/", "\\")) or escape == ".." or escape.startswith("../"):
            raise BadRequest(f"notebook path {p!r} is outside the contents root; give a path relative to it")
        out[posixpath.normpath(p)] = None
    return list(out)


def named(paths: list[str], most: int = 10) -> str:
    """Paths for a message: the first `most`, quoted, and how many more."""
    shown = ", ".join(map(repr, paths[:most]))
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def under(path: str, base: str) -> bool:
    """path is base, or inside the folder base (a rename of base moves it)."""
    return path == base or path.startswith(base.rstrip("/") + "/")


def moved_path(path: str, old: str, new: str) -> str:
    """Where path (under old) is once old is renamed new."""
    return new + path[len(old):]


def session_path(path) -> str | None:
    """A session's path (POST api/sessions) as the notebook paths are written: `/a.ipynb` and `a//./a.ipynb`
    name a.ipynb to the user, though jupyter_server keeps them as given. None for what is not a string."""
    if not isinstance(path, str):
        return None
    return posixpath.normpath("/" + path).lstrip("/")
