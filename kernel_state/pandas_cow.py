"""pandas Copy-on-Write after a restore: blocks over one memory share one reference tracker again.

Under Copy-on-Write (pandas 3, or pandas 2 with `mode.copy_on_write`), a frame derived from another
(`df.rename(...)`, `df["b"]`, `df.reset_index()`) shares the other's memory lazily: pandas tracks the blocks
over one memory in a `BlockValuesRefs` and copies before the first write to any of them. A restore brings those
blocks back over one memory, as they were, but unpickling gives each block a tracker of its own: a write to the
derived frame then changed the frame it came from. `relink` puts every block over one memory under one
tracker, so the first write copies, as it did before the pause.
"""
from __future__ import annotations

import sys
import types

#: objects looked at, at most, when finding the restored frames (a notebook's values, their containers and
#: attributes): the walk is bounded, a frame deeper than that keeps a tracker of its own
WALK_LIMIT = 200_000


def relink(values) -> int:
    """Relink the trackers of the pandas blocks reachable from `values`; returns the blocks relinked."""
    pd = sys.modules.get("pandas")
    if pd is None or not _copy_on_write(pd):
        return 0
    spans = sorted(((span, blk) for blk in _blocks(values, pd) if (span := _span(blk.values)) is not None),
                   key=lambda pair: pair[0])
    relinked, group, end = 0, [], -1
    for (start, stop), blk in spans + [((float("inf"), 0), None)]:
        if start >= end:  # a new memory: the blocks over the last one share its tracker
            relinked += _share_tracker(group)
            group, end = [], -1
        group.append(blk)
        end = max(end, stop)
    return relinked


def _copy_on_write(pd) -> bool:
    try:
        major = int(pd.__version__.split(".")[0])
    except ValueError:
        major = 0
    if major >= 3:
        return True
    try:
        return pd.get_option("mode.copy_on_write") is True
    except Exception:  # an option this version does not have: no Copy-on-Write
        return False


def _share_tracker(blocks: list) -> int:
    if len(blocks) < 2:
        return 0
    tracker, moved = blocks[0].refs, 0
    others = {id(b.refs): b.refs for b in blocks[1:] if b.refs is not tracker}
    for refs in others.values():
        for ref in list(refs.referenced_blocks):
            blk = ref()
            if blk is not None and blk.refs is not tracker:
                blk.refs = tracker
                tracker.add_reference(blk)
                moved += 1
    return moved


def _span(values) -> tuple[int, int] | None:
    """The bytes a block's values cover (a masked array's data), or None where that cannot be told."""
    np = sys.modules.get("numpy")
    data = getattr(values, "_data", values)  # IntegerArray, BooleanArray: their numpy data
    if np is None or not isinstance(data, np.ndarray) or data.size == 0:
        return None
    low, high = np.lib.array_utils.byte_bounds(data) if hasattr(np.lib, "array_utils") else np.byte_bounds(data)
    return low, high


def _blocks(values, pd):
    """The blocks of the DataFrames and Series reachable from values through containers and attributes."""
    frames = (pd.DataFrame, pd.Series)
    stack, seen = list(values), set()
    while stack and len(seen) < WALK_LIMIT:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, frames):
            yield from getattr(obj._mgr, "blocks", ())
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif not isinstance(obj, (type, types.ModuleType, types.FunctionType, str, bytes)) and \
                isinstance(getattr(obj, "__dict__", None), dict):
            stack.extend(obj.__dict__.values())
