"""The notebook's execution counter travels with its checkpoint, so that a restored kernel continues it
(the next cell is [n+1], not [1]) and the notebook reads as one session."""
from __future__ import annotations


def current(shell) -> int | None:
    """The number the next cell would get, or None outside IPython."""
    count = getattr(shell, "execution_count", None)
    return count if isinstance(count, int) else None


def continue_from(shell, saved) -> None:
    """Let the next cell continue the saved count; a counter already past it is left alone."""
    if shell is not None and isinstance(saved, int) and saved > (current(shell) or 0):
        shell.execution_count = saved
