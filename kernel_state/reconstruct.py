"""Reductions that pickle makes and cannot load, found at save time without running anything.

A value can pickle and still not unpickle; it was "saved", and lost with the kernel that saved it:

- an exception whose __init__ takes other arguments than it passes on (`RunError(message, code)` calling
  `super().__init__(message)`): BaseException pickles as (cls, args, __dict__), and loading calls cls(*args).
  It is rebuilt here as raising it left it: its class's __new__ with its args (BaseException's sets them and calls
  no __init__), then its attributes;
- an object whose class's __new__ needs arguments pickle does not keep (`np.finfo`, a notebook class with
  `def __new__(cls, x)` and no __getnewargs__): protocol 2 pickles it as `cls.__new__(cls)`. Whether that call
  can bind its arguments is read from the signature, never by calling it (a load may have side effects, or wait
  on a resource), and the save warns of such a variable, naming the class and the fix.
"""
from __future__ import annotations

import copyreg
import inspect


def reduce_exception(obj):
    """The reduction of an exception Python's own would not load; None for any other object, an exception that
    reduces itself (json.JSONDecodeError), or one that keeps BaseException's __init__."""
    cls = type(obj)
    if not isinstance(obj, BaseException) or cls.__reduce_ex__ is not BaseException.__reduce_ex__ or \
            cls.__reduce__ is not BaseException.__reduce__ or cls.__init__ is BaseException.__init__:
        return None
    return rebuild_exception, (cls, obj.args, dict(obj.__dict__) or None)


def rebuild_exception(cls, args, state):
    exc = cls.__new__(cls, *args)
    if state:
        exc.__dict__.update(state)
    return exc


def new_without_its_arguments(rv) -> str | None:
    """Why loading this reduction fails (its class's __new__ cannot take the arguments pickle kept), or None."""
    if not isinstance(rv, tuple) or len(rv) < 2 or not isinstance(rv[1], tuple) or not rv[1]:
        return None
    if rv[0] is copyreg.__newobj__:
        cls, args, kwargs = rv[1][0], rv[1][1:], {}
    elif rv[0] is copyreg.__newobj_ex__ and len(rv[1]) == 3:
        cls, args, kwargs = rv[1]
    else:
        return None
    new = getattr(cls, "__new__", None)
    if not isinstance(cls, type) or not inspect.isfunction(new):  # a builtin's __new__ takes what it pickled
        return None
    try:
        inspect.signature(new).bind(cls, *args, **(kwargs or {}))
    except TypeError as exc:
        return (f"its class {cls.__qualname__} has a __new__ that cannot load it ({cls.__qualname__}.__new__: "
                f"{exc}): pickle keeps no arguments for it, so a restore would not bring it back. Give the class "
                "__getnewargs__ returning them (or a __reduce__), or keep what it is made from in variables")
    except ValueError:  # no signature to read
        return None
    return None
