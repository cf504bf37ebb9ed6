"""The weak containers of `weakref` (WeakSet, WeakKeyDictionary, WeakValueDictionary), saved by what they
hold.

Their own reduction pickles their internals: a set or dict of weak references whose callbacks (the
container's `_remove`, which drops an entry when its referent dies) dill leaves out, so a restored
WeakSet kept dead entries for ever, and a WeakValueDictionary could not be saved at all. Saved as the
class called on their items, they come back as new containers with live callbacks: an entry whose object
nothing else held is dropped as the restore ends, as it would have been had the object died in the
saving process; one another variable holds stays, shared with it.
"""
from __future__ import annotations

import weakref

_BY_ITEMS = (weakref.WeakKeyDictionary, weakref.WeakValueDictionary)


def reduction(obj):
    """(the class, its items) for a weak container of weakref's own classes (not a subclass, whose state
    may hold more); None for anything else."""
    t = type(obj)
    if t is weakref.WeakSet:
        return t, (list(obj),)
    if t in _BY_ITEMS:
        return t, (list(obj.items()),)
    return None
