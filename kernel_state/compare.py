"""What verify compares: a digest of each variable's value, stable across processes.

A pickle's bytes are not a value: they depend on which equal strings happen to be one object, on the
iteration order of sets (string hashes are salted per process) and, for classes and functions, on
dill's incidental choices. The digest here walks the same objects the pickler saved and feeds a hash
with what makes two values equal:

- None, bool, int, str, bytes: type and value (huge ints in hex); float and complex: type and exact bits
  (float.hex; a NaN by its bits);
- list, tuple, dict: type, length, items in order (dict insertion order is part of the value,
  except in an optimizer's param groups: load_state_dict rebuilds them with "params" last);
- set, frozenset, weakref.WeakSet: type and the sorted digests of the elements (independent of iteration
  order); a subclass also its class and instance __dict__;
- numpy arrays pickled inline: dtype (a structured one with its fields), shape and the bytes in C order,
  and (here and in the tables) the read-only flag when it is set;
  object arrays element by element; numpy dtypes and scalars by value, like ints (numpy shares or copies
  equal dtypes as it likes);
- builtin methods: name, and the object they are bound to; a method bound to an imported module's own
  object (`random.random`): that module and attribute, not the object's state;
- the process's environment and streams (`os.environ`, `sys.stdout`): their module and name only;
- tensors and arrays in the checkpoint's tables: dtype, shape, strides, offset, requires_grad and which
  of the variable's storages they view; the storages' bytes are compared by their fingerprints;
- functions defined in the notebook: qualified name, code (bytecode, constants, names, argument
  layout; not file names or line numbers), defaults, closure contents and attributes; imported
  functions and classes: module and qualified name;
- classes defined in the notebook: name, bases and their attributes sorted by name (not the caches
  `__slotnames__` and `_abc_impl`, nor `__annotations__` and `__orig_bases__`, which dill drops; of an
  enum's own tables their sizes, not the caches `_value2member_map_` and `_unhashable_values_`);
- any other object: the reduction its pickler used (callable, arguments, state, items), recursively;
- TorchScript modules: each method's code, attributes and submodules (not the torch.jit.save archive);
- another saved variable: its name (so verify calls a variable changed when one it refers to changed: held_through).

Shared objects and cycles are walked once; a second meeting records only that it is the same object.
Tuples and frozensets of only immutable constants are walked by value each time: whether equal constants
are one object is the compiler's choice (CPython shares them within a cell, dill does not).
"""
from __future__ import annotations

import copyreg
import enum
import functools
import itertools
import marshal
import struct
import sys
import types
import weakref

from . import module_objects, plain_values
from .alignment import writeable
from .hashing import new_hasher

_SCALARS = (int, float, str, bytes, bool, type(None))
_UNSALTED = (int, float, complex, bool, type(None))  # hashes that are the same in every process
_REPR_LIMIT = 10 ** 4300  # repr() refuses ints from here on (CPython's default int_max_str_digits)
_FLAT_DICT = 32  # a dict this long of keys of one scalar type and values of one: emitted in bulk (_flat_dict)
# caches, not definitions; and annotations, which dill does not carry for every kind of class
_SKIP_CLASS_ATTRS = {"__dict__", "__weakref__", "__slotnames__", "_abc_impl", "__annotations__",
                     "__orig_bases__"}


def _immutable(obj) -> bool:
    """A tuple or frozenset of only scalars, complex numbers and such tuples and frozensets."""
    return all(type(x) in _SCALARS or type(x) is complex or type(x) in (tuple, frozenset) and _immutable(x)
               for x in obj)


_ENUM_CACHES = {"_value2member_map_", "_unhashable_values_"}
# torch.compile's bookkeeping inside a compiled module's settings (its first call sets it), not a value
_COMPILE_STATE = {("torch._dynamo.convert_frame", "ConvertFrameBox")}


def _numpy_constant(obj) -> bool:
    """numpy's own dtypes, and its scalars that hold no object (an object field's bytes are a pointer)."""
    np = sys.modules.get("numpy")
    if np is None or type(obj).__module__ not in ("numpy", "numpy.dtypes"):
        return False
    return isinstance(obj, np.dtype) or isinstance(obj, np.generic) and not obj.dtype.hasobject


def _defined_here(obj) -> bool:
    return getattr(obj, "__module__", None) in ("__main__", None)


def value_digest(value, capture=None) -> str:
    return _Digest(capture).run(value)


def _float(x: float) -> str:
    """float.hex, which is 'nan' for every NaN: a NaN by its bits (payload and sign). The usual NaN
    (float('nan'), math.nan, np.nan) keeps 'nan', as earlier checkpoints digested it."""
    if x == x:
        return x.hex()
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    return "nan" if bits == 0x7FF8000000000000 else f"nan:{bits:016x}"


def dtype_key(dtype) -> str:
    """dtype.str, which is '|V16' for every structured dtype of 16 bytes: then its fields as well (name,
    type, offset, title; dtype.descr refuses overlapping fields), and a field's subarray shape."""
    if dtype.subdtype is not None:
        return f"{dtype_key(dtype.subdtype[0])}{dtype.subdtype[1]}"
    if dtype.fields is None:
        return dtype.str
    return f"{dtype.str}{[(n, dtype_key(dtype.fields[n][0]), *dtype.fields[n][1:]) for n in dtype.names]}"


def _scalar_reprs(items: list):
    """(type name, the repr of each value) when walk emits these scalars as (type name, value) and they are all of
    one type; None otherwise (mixed types, an int too large for repr)."""
    kinds = set(map(type, items))
    t = kinds.pop()
    if kinds or t not in (str, bytes, bool, int, float, type(None)):
        return None
    if t is int and not (-_REPR_LIMIT < min(items) and max(items) < _REPR_LIMIT):
        return None
    return t.__name__, map(repr, map(_float, items) if t is float else items)


class _Digest:
    def __init__(self, capture):
        self.capture = capture
        self.hasher = new_hasher()
        self.memo: dict[int, int] = {}
        self.keep: list = []

    def run(self, value) -> str:
        self.walk(value)
        return self.hasher.hexdigest()

    def emit(self, *parts) -> None:
        self.hasher.update(repr(parts).encode())
        self.hasher.update(b"\0")

    def sub(self, value) -> str:
        return _Digest(self.capture).run(value)

    def walk(self, obj) -> None:
        t = type(obj)
        if t is int and not -_REPR_LIMIT < obj < _REPR_LIMIT:
            self.emit("int", hex(obj))
            return
        if t in (int, str, bytes, bool) or obj is None:
            self.emit(t.__name__, obj)
            return
        if t is float:
            self.emit("float", _float(obj))
            return
        if t is complex:
            self.emit("complex", _float(obj.real), _float(obj.imag))
            return
        if t is tuple and all(type(x) in _SCALARS for x in obj):
            # by value, not memoized: whether equal constants are one object is the compiler's choice
            # (CPython merges equal constant tuples of one cell; dill rebuilds each code object's own)
            self.emit(t.__name__, marshal.dumps(obj, 2))  # marshal v2 has no identity refs
            return
        if t in (tuple, frozenset) and _immutable(obj):  # nested constants: the same, walked by value
            self._plain(obj)
            return
        if _numpy_constant(obj):
            return self._numpy_constant(obj)
        seen = self.memo.get(id(obj))
        if seen is not None:
            self.emit("same", seen)
            return
        self.memo[id(obj)] = len(self.memo)
        self.keep.append(obj)
        if self._reference(obj):
            return
        if t in (list, tuple):
            if all(type(x) in _SCALARS for x in obj):  # fast path: marshal v2 has no identity refs
                self.emit(t.__name__, marshal.dumps(obj, 2))
                return
            self._plain(obj)
            return
        if t is dict and obj is getattr(sys.modules.get("__main__"), "__dict__", None):
            # `ns = globals()`: saved, and restored, as the kernel's namespace; its contents are the other
            # variables (and IPython's history, which every cell changes): walked, it never read the same
            self.emit("namespace", "__main__")
            return
        if t is dict:
            self.emit("dict", len(obj))
            if len(obj) >= _FLAT_DICT and self._flat_dict(obj):
                return
            for key, value in obj.items():
                self.walk(key)
                self.walk(value)
            return
        if t in (set, frozenset):
            self._plain(obj)
            return
        if isinstance(obj, (set, frozenset)) and not all(type(x) in _UNSALTED for x in obj):
            # a subclass: its reduction lists the elements in iteration order, which follows the per-process
            # string hash; of elements whose hashes are the same everywhere, that reduction is compared
            self.emit("set-subclass", sorted(self.sub(x) for x in obj))
            self.walk(t)
            self.walk(dict(sorted(getattr(obj, "__dict__", {}).items())))
            return
        if t is weakref.WeakSet:  # a set: its order follows the ids of what it holds, not the same after a restore
            self.emit("weakset", sorted(self.sub(x) for x in obj))
            return
        if t is bytearray:
            self.emit("bytearray", bytes(obj))
            return
        if isinstance(obj, type):
            self._class(obj)
            return
        if t is types.FunctionType:
            self._function(obj)
            return
        if t is types.CodeType:
            self._code(obj)
            return
        owner = module_objects.owner_of(obj)
        if owner is not None:  # bound to a module's own object (`random.random`): which one, not its state
            self.emit("module-object-method", *owner, obj.__name__)
            return
        named = module_objects.process_object(obj)
        if named is not None:  # os.environ: the process's own, whatever it holds now
            self.emit("process-object", *named)
            return
        if t is types.MethodType:
            self.emit("method")
            self.walk(obj.__func__)
            self.walk(obj.__self__)
            return
        if t is types.ModuleType:
            self.emit("module", obj.__name__)
            return
        if t in (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType):
            owner = getattr(obj, "__self__", None)
            self.emit("builtin", getattr(obj, "__module__", None), getattr(obj, "__qualname__", repr(obj)),
                      owner.__name__ if isinstance(owner, types.ModuleType) else None)
            if owner is not None and not isinstance(owner, types.ModuleType) and not (
                    isinstance(owner, type) and not _defined_here(owner)):  # `dict.fromkeys`: named above
                self.walk(owner)  # a bound method (`[1, 2].append`, `Random(5).random`): what it is bound to
            return
        if t in (staticmethod, classmethod):
            self.emit(t.__name__)
            self.walk(obj.__func__)
            return
        if t is property:
            self.emit("property")
            for f in (obj.fget, obj.fset, obj.fdel):
                self.walk(f)
            return
        if t is types.CellType:
            try:
                contents = obj.cell_contents
            except ValueError:
                self.emit("empty-cell")
                return
            self.emit("cell")
            self.walk(contents)
            return
        np = sys.modules.get("numpy")
        if np is not None and type(obj) in (np.ndarray, np.memmap) and not obj.dtype.hasobject:
            # a subclass (a masked array: its mask and fill value) is compared through its reduction
            self.emit("ndarray", dtype_key(obj.dtype), obj.shape)
            self._read_only(obj)
            self.hasher.update(_raw_bytes(np, obj))
            return
        if np is not None and type(obj) is np.ma.MaskedArray and not obj.dtype.hasobject and not (
                self.capture and self.capture.reduction(obj)):  # saved as its data's view: walked as such
            # data, mask and fill value; an unset fill value is its default (what unpickling sets)
            fill = obj._fill_value if obj._fill_value is not None else np.ma.default_fill_value(obj)
            self.emit("masked", dtype_key(obj.dtype), obj.shape, np.asarray(fill).tobytes())
            for part in (obj.data, np.ma.getmaskarray(obj)):
                self.hasher.update(_raw_bytes(np, part))
            return
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.jit.ScriptModule):
            self._script_module(obj)
            return
        if torch is not None and isinstance(obj, torch.Tensor) and obj.layout == torch.strided:
            cpu = obj.detach().to("cpu")
            if not cpu.is_quantized:  # view() refuses 0-d tensors, conjugate or negative views, and a stride
                # other than 1 (which contiguous() leaves on a tensor of one element): the bytes in C order
                cpu = cpu.resolve_conj().resolve_neg().reshape(-1).clone(memory_format=torch.contiguous_format)
            cpu = cpu.contiguous()
            self.emit("tensor", str(obj.dtype), tuple(obj.shape), obj.requires_grad)
            self.hasher.update(cpu.view(torch.uint8).numpy().tobytes() if cpu.numel() else b"")
            self._tensor_attrs(obj)
            return
        if torch is not None and isinstance(obj, (torch.UntypedStorage, torch.TypedStorage)):
            # torch's own reduction of a storage is a torch.save archive, not the same bytes in two processes
            typed = isinstance(obj, torch.TypedStorage)
            ust = obj._untyped_storage if typed else obj
            self.emit("storage", str(obj.dtype) if typed else None, ust.nbytes())
            data = torch.empty(0, dtype=torch.uint8, device=ust.device).set_(ust).cpu()
            self.hasher.update(data.numpy().tobytes() if data.numel() else b"")
            return
        if (t.__module__, t.__qualname__) in _COMPILE_STATE:
            self.emit("compile-state", t.__qualname__)
            return
        self._reduced(obj)

    def _numpy_constant(self, obj) -> None:
        """A numpy dtype or scalar, by value: whether two equal ones are one object is numpy's choice (a
        structured dtype's int32 field is numpy's own int32 dtype in the saving process, a copy of it once
        unpickled), like that of equal ints."""
        np = sys.modules["numpy"]
        if isinstance(obj, np.dtype):
            self.emit("dtype", dtype_key(obj), None if obj.metadata is None else sorted(obj.metadata.items()))
        else:
            self.emit("numpy-scalar", dtype_key(obj.dtype), obj.tobytes())

    def _flat_dict(self, obj: dict) -> bool:
        """A dict of scalar keys of one type and scalar values of one (a vocabulary, a table of counts): the
        bytes walk emits item by item, formatted in bulk; walked, a million keys took seconds of a save. False,
        having emitted nothing, for any other."""
        keys, values = _scalar_reprs(list(obj)), _scalar_reprs(list(obj.values()))
        if keys is None or values is None:
            return False
        item = f"({keys[0]!r}, %s)\0({values[0]!r}, %s)\0"  # emit's repr((type name, value)) and its separator
        while flat := tuple(itertools.chain.from_iterable(zip(itertools.islice(keys[1], 65536), values[1]))):
            self.hasher.update((item * (len(flat) // 2) % flat).encode())
        return True

    def _plain(self, obj) -> None:
        """A list, tuple, set or frozenset (not the fast path's tuple of scalars): its items."""
        t = type(obj)
        if t in (set, frozenset):
            self.emit(t.__name__, sorted(self.sub(x) for x in obj))
            return
        self.emit(t.__name__, len(obj))
        for item in obj:
            self.walk(item)

    def _reference(self, obj) -> bool:
        """Tensors, arrays and other variables: what the checkpoint's tables hold instead of a pickle."""
        c = self.capture
        if c is None:
            return False
        name = c.var_ids.get(id(obj))
        if name is not None and name != c._current and name in c.saved_vars and not plain_values.by_value(obj):
            self.emit("var", name)
            return True
        key = c._tensor_keys.get(id(obj))
        if key is not None:
            r = c.tensors[key]
            self.emit("tensor", self._storage_index(r["storage"]), r["offset"], r["shape"], r["stride"],
                      r["dtype"], r["requires_grad"], r["parameter"])
            if "grad" in r:
                self.walk(obj.grad)
            elif (obj.is_leaf or obj.retains_grad) and obj.grad is not None:  # one the table cannot hold (sparse)
                self.walk(obj.grad)
            hooks = [list((getattr(obj, a, None) or {}).values())
                     for a in ("_backward_hooks", "_post_accumulate_grad_hooks")]
            if any(hooks):  # a gradient hook changes the next backward: part of the value
                self.emit("hooks", len(hooks[0]), len(hooks[1]))
                for hook in hooks[0] + hooks[1]:
                    self.walk(hook)
            self._tensor_attrs(obj)
            return True
        key = c._array_keys.get(id(obj))
        if key is not None:
            r = c.arrays[key]
            source = r.get("memmap")
            self.emit("array", self._storage_index(r["buffer"]), r["offset"], r["shape"], r["strides"],
                      dtype_key(obj.dtype), source and (source["path"], source["file_offset"]))
            self._read_only(obj)
            return True
        return False

    def _read_only(self, arr) -> None:
        # a restore keeps the flag (a write then raises), so it is part of the value; said only when set, so
        # the digests of writeable arrays are those earlier checkpoints hold
        if not writeable(arr):
            self.emit("read-only")

    def _tensor_attrs(self, t) -> None:
        # Python attributes set on it (`p.no_decay = True`); not torch.compile's markers (`_dynamo_static_input_type`,
        # which a module's first compiled call sets on its parameters): how dynamo treats it, not its value
        attrs = {k: v for k, v in t.__dict__.items() if not k.startswith("_dynamo_")}
        if attrs:
            self.emit("attrs")
            self.walk(dict(sorted(attrs.items())))

    def _storage_index(self, skey: str) -> int:
        return self.capture._var_storages.get(skey, -1)

    def _script_module(self, m) -> None:
        """A TorchScript module by what it computes with: its torch.jit.save archive is other bytes after a
        load (torch mangles names), so each method's code, its attributes (tensors as table rows) and its
        submodules, likewise."""
        self.emit("script-module", m.original_name,
                  [(name, m._c._get_method(name).code) for name in sorted(m._c._method_names())])
        for name in sorted(m._concrete_type.get_attributes()):
            self.emit("attr", name)
            self.walk(getattr(m, name))
        for name, child in m.named_children():
            self.emit("module", name)
            self.walk(child)

    def _class(self, cls) -> None:
        if not _defined_here(cls):
            self.emit("class", cls.__module__, cls.__qualname__)
            return
        self.emit("notebook-class", type(cls).__qualname__, cls.__qualname__, len(cls.__bases__))
        for base in cls.__bases__:
            self.walk(base)
        for key in sorted(k for k in cls.__dict__ if k not in _SKIP_CLASS_ATTRS):
            value = cls.__dict__[key]
            self.emit("attr", key)
            if key.startswith("_") and key.endswith("_") and isinstance(value, (dict, list)) and \
                    isinstance(cls, enum.EnumMeta):
                # the enum machinery's own tables, rebuilt from the members: the members as declared
                # (names and aliases), not the caches of values looked up and of combinations of flags
                # made since (`Aug.FLIP | Aug.JITTER`), which `_value2member_map_` and
                # `_unhashable_values_` keep and which a rebuilt class has not met
                if key not in _ENUM_CACHES:
                    self.emit(len(value))
                continue
            self.walk(value)

    def _function(self, fn) -> None:
        if not _defined_here(fn):
            self.emit("function", fn.__module__, fn.__qualname__)
            return
        self.emit("notebook-function", fn.__qualname__, fn.__name__)
        self._code(fn.__code__)
        self.walk(fn.__defaults__)
        self.walk(fn.__kwdefaults__)
        self.walk(tuple(fn.__closure__ or ()))
        self.walk(dict(sorted(fn.__dict__.items())))

    def _code(self, code) -> None:
        self.emit("code", code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                  code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags)
        self.walk(code.co_consts)

    def _reduced(self, obj) -> None:
        rv = self.capture.reduction(obj) if self.capture is not None else None
        if rv is None:
            try:
                reducer = copyreg.dispatch_table.get(type(obj))
                rv = reducer(obj) if reducer else obj.__reduce_ex__(5)
            except Exception as exc:  # what neither pickler could reduce: compare its type only
                self.emit("opaque", type(obj).__module__, type(obj).__qualname__, type(exc).__name__)
                return
        if isinstance(rv, str):
            self.emit("global", getattr(obj, "__module__", None), rv)
            return
        rv = _without_caches(obj, tuple(rv))
        self.emit("reduce", len(rv))
        for i, part in enumerate(rv):
            self.walk(list(part) if i in (3, 4) and part is not None and not isinstance(part, list) else part)


def _without_caches(obj, rv: tuple) -> tuple:
    """A reduction without what merely reading the value fills in, so that showing a value is no change (and
    an optimizer's groups with their keys in order: reloading its own state_dict is no change either):
    pandas' memo of derived values (`_cache`: displaying a DatetimeIndex fills its array's), a masked
    array's unset fill value that displaying it or filled() sets to the default, and the empty __dict__
    that reading a functools.partial's vars() creates."""
    state = rv[2] if len(rv) > 2 else None
    if type(obj).__module__.startswith("pandas.") and state is not None:
        if isinstance(state, dict) and "_cache" in state:
            state = {k: v for k, v in state.items() if k != "_cache"}
        elif isinstance(state, tuple) and state and isinstance(state[-1], dict) and "_cache" in state[-1]:
            rest = {k: v for k, v in state[-1].items() if k != "_cache"}  # NDArrayBacked: (dtype, data, dict)
            state = state[:-1] + ((rest,) if rest else ())
        return rv[:2] + (state,) + rv[3:]
    if len(rv) == 3 and rv[0] is iter and type(state) is int and state == 0:
        # an iterator over a dict or a set pickles as one over the list of what it has left, which comes back as a
        # list iterator at position 0: the same items to come
        return rv[:2]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.optim.Optimizer) and isinstance(state, dict) and \
            isinstance(state.get("param_groups"), list):
        # load_state_dict (resuming a training run) rebuilds each group with "params" last: the order of a
        # group's keys is torch's bookkeeping, not a hyperparameter
        groups = [dict(sorted(g.items())) if type(g) is dict else g for g in state["param_groups"]]
        return rv[:2] + ({**state, "param_groups": groups},) + rv[3:]
    if isinstance(obj, functools.partial) and isinstance(state, tuple) and len(state) == 4 and state[3] == {}:
        return rv[:2] + (state[:3] + (None,),) + rv[3:]
    try:
        cached = _cached_property_names(type(obj))
    except TypeError:  # a metaclass whose classes do not hash: compare it all
        cached = frozenset()
    if cached and isinstance(state, dict) and cached & state.keys():
        return rv[:2] + ({k: v for k, v in state.items() if k not in cached},) + rv[3:]
    np = sys.modules.get("numpy")
    if np is not None and type(obj) is np.ma.MaskedArray and len(rv) == 2 and len(rv[1]) == 2 and \
            isinstance(rv[1][1], dict) and _default_fill(np, obj, rv[1][1].get("_fill_value")):
        return (rv[0], (rv[1][0], {**rv[1][1], "_fill_value": None}))  # capture's reduction (masked_view)
    return rv


@functools.lru_cache(maxsize=1024)
def _cached_property_names(cls) -> frozenset:
    """The functools.cached_property attributes of a class: reading one stores its result in the instance's
    __dict__, which is no change of the value (it is computed from the rest)."""
    return frozenset(k for klass in cls.__mro__ for k, v in vars(klass).items()
                     if isinstance(v, functools.cached_property))


def _default_fill(np, masked, fill) -> bool:
    """Whether a masked array's fill value is unset or its default (what the getter would set)."""
    if fill is None:
        return True
    try:
        fill = np.asarray(fill)
        return fill.tobytes() == np.asarray(np.ma.default_fill_value(masked), dtype=fill.dtype).tobytes()
    except (TypeError, ValueError):
        return False


def _raw_bytes(np, arr):
    """An array's bytes in C order, of any dtype: a memoryview of datetime64 or timedelta64 refuses them
    (no buffer format), so verify compared such a variable's pickle, which differs after a restore."""
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data if arr.nbytes else b""


def held_through(records: list[dict], moved: set[str]) -> dict[str, str]:
    """The variables that hold another variable whole (`history = log`, `cfg = {"log": log}`: their pickles
    refer to log, and their digests name it, not its contents) whose value moved with that one: each with the
    moved variable it holds, through any chain of such references. records: the manifests' (or a live
    capture's) variable records, whose `holds` name those others. (An object inside another variable, such as
    a model's weight an optimizer refers to, is not the whole of it: a change elsewhere in it is not one here.)"""
    refers: dict[str, set] = {}
    for variables in records:
        for name, record in variables.items():
            refers.setdefault(name, set()).update(record.get("holds", ()))
    held: dict[str, str] = {}
    grew = True
    while grew:
        grew = False
        for name, others in refers.items():
            if name in moved or name in held:
                continue
            through = sorted(o for o in others if o in moved or o in held)
            if through:
                held[name] = held.get(through[0], through[0])
                grew = True
    return held
