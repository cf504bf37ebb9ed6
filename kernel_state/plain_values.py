"""Values whose identity nothing relies on: what they are is all there is to them.

A variable that holds the object another variable is bound to (`cfg = {"log": log}`) saves it as a reference
to that variable, so that the two still share it after a restore, and verify counts it changed when that
variable changes (the object inside changed with it). For a value like `np.dtype("float32")`, `torch.float32`,
`(1, "a")` or an imported class, rebinding the other name (`dt = np.dtype("int8")`) changed no object: verify
called `cfg` changed all the same. Such values are saved, and compared, as what they are, wherever they are met.
"""
from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import pathlib
import sys
import types

_SCALARS = (int, float, complex, str, bytes, bool, type(None))
_IMMUTABLE = (decimal.Decimal, fractions.Fraction, datetime.date, datetime.time, datetime.timedelta, range,
              pathlib.PurePath)


def by_value(obj) -> bool:
    """Whether a variable holding obj keeps it as a value of its own rather than as another variable's object."""
    t = type(obj)
    if t in (tuple, frozenset):
        return all(type(x) in _SCALARS or by_value(x) for x in obj)
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        return getattr(obj, "__module__", None) not in ("__main__", None)  # a notebook's own is a definition
    if isinstance(obj, enum.Enum):
        return t.__module__ != "__main__"
    if isinstance(obj, _IMMUTABLE):
        return t.__module__ in ("datetime", "decimal", "fractions", "pathlib", "builtins") or \
            t.__module__.startswith("_pydecimal")
    np = sys.modules.get("numpy")
    if np is not None and (isinstance(obj, np.dtype) or isinstance(obj, np.generic) and not obj.dtype.hasobject):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, (torch.dtype, torch.device, torch.layout, torch.memory_format))
