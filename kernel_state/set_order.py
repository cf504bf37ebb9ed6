"""A set's iteration order, kept through a save and a restore.

Under the same string hashes (PYTHONHASHSEED), a set iterates in the order of its table's slots, and where an
item sits depends on the table's size and on the items added before it. Pickle adds the items back one by one
in the order they iterated (the table grows as they come): a set that wrapped around its table, that had
collisions, or whose table was sized at once (a literal `{"a", "b"}` is a copy of a frozenset constant, as is
`set(other)` or `s.copy()`: its table is twice its items from the start) can come back iterating otherwise.
The save looks for an insertion order and a table size that give the same iteration (`insertion_order`), and the
restore builds the set that way (`build`).
"""
from __future__ import annotations

import itertools
import sys

#: orders of a set's items tried to find one that fills a set as it was (each try builds a set or two)
TRIES = 256
SEARCH_LIMIT = 1_000  # items of the largest set looked at (256 sets of 1,000 items: some milliseconds)
_MIN_TABLE = 8  # CPython's PySet_MINSIZE: the table inside the set object itself


def table_size(s: set) -> int:
    """The slots of a set's table (CPython: sys.getsizeof counts a table outside the object, 16 bytes a slot)."""
    extra = sys.getsizeof(s) - sys.getsizeof(set())
    return _MIN_TABLE if extra <= 0 else extra // 16


def build(order: list, table: int | None = None) -> set:
    """The set of `order`'s items added in that order: one by one, the table growing as they come (table None,
    what set(order) and pickle do), or into a table of `table` slots sized before the first one is added.
    Sized at once: set.update of a dict makes its table hold twice what it adds; padding objects added after
    the items (so that they take no slot an item wanted) bring it to that size, and are removed again."""
    if table is None:
        return set(order)
    pads = max(0, table // 4 - len(order))
    padding = [object() for _ in range(pads)]
    out = set()
    out.update(dict.fromkeys(order + padding))
    out.difference_update(padding)
    return out


def insertion_order(items: list, table: int) -> tuple[list, int | None] | None:
    """An order of the items, and None (one by one, growing) or `table` (sized at once), that fills a set that
    iterates as `items` do; None when none is found within TRIES orders: the items in their order, then with
    their first k moved to the end (undoes a wrap around the table), then with one item moved to the end (one
    that collided with a later one), then both."""
    n = len(items)
    tables = [None] + ([table] if table > _MIN_TABLE else [])  # each kept only where it gives `items` back

    def rotated():
        return (items[k:] + items[:k] for k in range(1, n))
    moves = (r[:i] + r[i + 1:] + [r[i]] for r in itertools.chain([items], rotated()) for i in range(n))
    for order in itertools.islice(itertools.chain([items], rotated(), moves), TRIES):
        for size in tables:
            if list(build(order, size)) == items:
                return order, size
    return None
