"""Objects an imported module holds as its own, reached from a notebook variable: saved as a reference
to the module's object, not as a copy of it.

- a method bound to a module's object: `rnd = random.random`, `from numpy.random import randn` are
  methods of the module's global generator (`random._inst`, `numpy.random.mtrand._rand`). Bound to a
  copy, they no longer followed `random.seed(0)`; the global random state itself is saved and put back
  on its own (randomstate.py).
- the process's own state that a module holds: `env = os.environ`, `out = sys.stdout` are the
  environment child processes get and the kernel's streams, not values the notebook made. Saved as the
  module's attribute, so a restore gives the restoring kernel's own object (and never writes the saved
  environment over the real one); verify compares which object it is, not its contents. Only the
  objects in PROCESS_OBJECTS: any other module attribute is an ordinary value, saved by value.
- a logger: `logging.getLogger(name)` is one object per name, which pickles as that call. Its level is
  the notebook's setting: saved with the name, set again on restore, and compared by verify. Its
  handlers and filters are not saved (a handler holds a stream or a file).
"""
from __future__ import annotations

import importlib
import os
import site
import sys
import sysconfig
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


PROCESS_OBJECTS = (("os", "environ"), ("os", "environb"), ("sys", "stdin"), ("sys", "stdout"), ("sys", "stderr"))
#: what a pickle meets most, and none of PROCESS_OBJECTS is: answered at once (this runs for every object)
_PLAIN = frozenset((int, float, complex, bool, str, bytes, bytearray, tuple, list, dict, set, frozenset,
                    type(None), types.FunctionType, type))


def process_object(obj) -> tuple[str, str] | None:
    """(module, attribute) when `obj` is one of PROCESS_OBJECTS as this process has it now; else None."""
    if type(obj) in _PLAIN:
        return None
    for module, attr in PROCESS_OBJECTS:
        if getattr(sys.modules.get(module), attr, None) is obj:
            return module, attr
    return None


def module_attribute(module: str, attr: str):
    return getattr(importlib.import_module(module), attr)


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


def import_folder(module) -> str | None:
    """The folder on sys.path a module was imported from, when that is not where packages are installed
    (a `helpers.py` beside the notebook): a fresh kernel finds it only with that folder on sys.path."""
    top = sys.modules.get(module.__name__.partition(".")[0], module)
    path = getattr(top, "__file__", None)
    if not path:  # builtin, frozen, namespace package
        return None
    path = os.path.realpath(path)
    folder = os.path.dirname(os.path.dirname(path) if os.path.basename(path).startswith("__init__.") else path)
    return None if installed(folder) else folder


def installed(path: str) -> bool:
    """Whether a real path is where Python and its packages are installed (the standard library, site-packages,
    the environment's prefix), not a folder of the user's own."""
    places = [p for p in (*sysconfig.get_paths().values(), *site.getsitepackages(), site.getusersitepackages()) if p]
    return any(path == os.path.realpath(p) or path.startswith(os.path.realpath(p) + os.sep) for p in places)
