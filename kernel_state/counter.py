"""The notebook's execution counter travels with its checkpoint, so that a restored kernel continues it
(the next cell is [n+1], not [1]) and the notebook reads as one session.

Cell numbers, and so kernel undo's labels, belong to a numbering: a kernel process numbers its cells from
[1], and one that continued the counter of a checkpoint (a resume) carries on the numbering of the
process that saved it, for the cells below that count. `CONTINUES` records those earlier processes, and
every manifest this process writes carries it ("continues"), so that a kernel resumed from it carries on
the same numbering again. A restart restores nothing: its numbering is new, and `rewind N` never reaches
a cell [N] of the process before it (auto.find_cell)."""
from __future__ import annotations

from .identity import TOKEN

#: token -> {"token", "pid", "started", "from", "below"}: the earlier kernel processes whose cells numbered from
#: `from` and below `below` are cells of this process's numbering (below `from` the numbers are this process's
#: own cells, run before it continued)
CONTINUES: dict[str, dict] = {}


def current(shell) -> int | None:
    """The number the next cell would get, or None outside IPython."""
    count = getattr(shell, "execution_count", None)
    return count if isinstance(count, int) else None


def continue_from(shell, saved, manifest: dict | None = None) -> bool:
    """Let the next cell continue the saved count; a counter already past it is left alone. True when it
    was continued: the cells of `manifest`'s process (and of those it continued) numbered below that count
    are of this process's numbering from now on."""
    if shell is None or not isinstance(saved, int) or saved <= (current(shell) or 0):
        return False
    start = current(shell) or 1  # cells numbered below it ran here: they stay this process's own
    shell.execution_count = saved
    if manifest is not None:
        _adopt(manifest, start, saved)
    return True


def _adopt(manifest: dict, start: int, below: int) -> None:
    identity = manifest.get("identity") or {}
    entries = [{"token": identity.get("token"), "pid": identity.get("pid"), "started": identity.get("started"),
                "from": start, "below": below}]
    for entry in manifest.get("continues") or []:
        if isinstance(entry, dict) and isinstance(entry.get("below"), int):
            first = entry.get("from") if isinstance(entry.get("from"), int) else 1
            entries.append({**entry, "from": max(first, start), "below": min(entry["below"], below)})
    for entry in entries:
        token = entry.get("token")
        if not isinstance(token, str) or token == TOKEN:
            continue
        known = CONTINUES.get(token)
        if known is None or known["below"] < entry["below"]:
            CONTINUES[token] = {k: entry.get(k) for k in ("token", "pid", "started", "from", "below")}


def continued() -> list[dict]:
    """What a manifest records as "continues" (empty when this process numbers its cells on its own)."""
    return [dict(e) for e in CONTINUES.values()]


def in_numbering(identity: dict | None, cell) -> bool:
    """Is a cell [cell] run by the process `identity` (a manifest's) one of this process's numbering?"""
    token = (identity or {}).get("token")
    if not isinstance(token, str):
        return False  # no token (a manifest of an old version): never taken for this kernel's
    if token == TOKEN:
        return True
    entry = CONTINUES.get(token)
    return entry is not None and isinstance(cell, int) and (entry.get("from") or 1) <= cell < entry["below"]


def earlier_kernel(row: dict) -> bool:
    """An automatic checkpoint (a list row or a manifest) that `rewind N` does not reach by its number: a
    cell of another kernel process's numbering (the one before a restart)."""
    label = row.get("label") or {}
    return bool(row.get("auto")) and not in_numbering(row.get("identity"), label.get("cell"))
