"""Objects an imported module holds as its own, reached from a notebook variable: saved as a reference
to the module's object, not as a copy of it.

- a method bound to a module's object: `rnd = random.random`, `from numpy.random import randn` are
  methods of the module's global generator (`random._inst`, `numpy.random.mtrand._rand`). Bound to a
  copy, they no longer followed `random.seed(0)`; the global random state itself is saved and put back
  on its own (randomstate.py).
- a logger: `logging.getLogger(name)` is one object per name, which pickles as that call. Its level is
  the notebook's setting: saved with the name, set again on restore, and compared by verify. Its
  handlers and filters are not saved (a handler holds a stream or a file).
"""
from __future__ import annotations

import importlib
import sys
import types


def owner_of(method) -> tuple[str, str] | None:
    """(module, attribute) of the object a bound method belongs to, when that object is an attribute of
    the module its class comes from; else None."""
    if type(method) not in (types.BuiltinMethodType, types.MethodType):
        return None
    owner = method.__self__
    if isinstance(owner, (types.ModuleType, type)):  # a function of a module, a classmethod: named as they are
        return None
    module = sys.modules.get(type(owner).__module__)
    if module is None or module.__name__ in ("__main__", "builtins"):  # the notebook's objects are its own
        return None
    for attr, value in vars(module).items():
        if value is owner:
            return module.__name__, attr
    return None


def bound_method(module: str, attr: str, name: str):
    return getattr(getattr(importlib.import_module(module), attr), name)


def reduce_logger(obj):
    """The reduction of a logger, with its level; None for anything else."""
    logging = sys.modules.get("logging")
    if logging is None or not isinstance(obj, logging.Logger):
        return None
    return logger, (None if isinstance(obj, logging.RootLogger) else obj.name, obj.level)


def logger(name: str | None, level: int):
    import logging
    found = logging.getLogger(name)
    found.setLevel(level)
    return found
