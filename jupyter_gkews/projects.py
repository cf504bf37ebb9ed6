"""Where a server keeps its state and checkpoints unless told: one directory per project folder.

A project folder is the server's contents root (`c.ServerApp.root_dir`, the folder `jupyter lab` was started
in). Notebooks are named by their path in it, so two folders' `train.ipynb` (or `Untitled.ipynb`) are one
name: in one shared store and state directory, a server started in project B showed project A's pause as
its own and restored A's variables into B's notebook, B's saves retired A's checkpoints, and B's renames
moved them. Each folder gets its own directory instead:
<jupyter data dir>/gkews/projects/<folder name>-<12 hex digits of its real path>/{state,checkpoints}.
"""
from __future__ import annotations

import os

from jupyter_core.paths import jupyter_data_dir
from kernel_state.config import project_dir

__all__ = ["project_dir", "shared_dirs"]


def shared_dirs(data_dir: str | None = None) -> list[str]:
    """The state directory and store that earlier versions shared between every project folder, where they
    still hold something (the server says so at its start, with the settings that use them)."""
    base = os.path.join(data_dir or jupyter_data_dir(), "gkews")
    marks = (os.path.join(base, "state", "state.json"), os.path.join(base, "checkpoints", "gkews-store.json"))
    return [os.path.dirname(m) for m in marks if os.path.exists(m)]
