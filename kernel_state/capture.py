"""Capturing variables: one pickle per variable, every tensor and large array as safetensors data.

Each variable is pickled on its own, so one that cannot be pickled is skipped with its reason and costs
nothing else. Some objects never enter a pickle; the pickle holds a reference instead:
- torch tensors (and Parameters): a row in the checkpoint's tensor table (storage, offset, shape,
  stride, dtype, requires_grad); storages go to safetensors blobs, so views and tied weights share one.
  What a row cannot hold (a sparse .grad, gradient hooks) goes in the pickle around its reference
  (alignment.tensor_extras), and an optimizer's hooks into its state (torch's own leaves them out);
- numpy arrays of 64 KiB or more (and every np.memmap): a row in the array table, as an offset and
  strides into the memory of the outermost array, so a view stays a view of its base;
- a value that is itself another saved variable: ("var", name), and an object an earlier variable's
  pickle already holds: ("memo", name, index), so that identities between variables survive;
- a live resource (open file, socket, lock, child process...): never; the variable is skipped.
A method bound to an imported module's own object (`random.random`), the process's environment and
streams (`os.environ`, `sys.stdout`) and a logger are saved as references to the module's object
(module_objects.py). TorchScript and parametrized modules, which torch refuses to pickle, go as
torch_modules.py says; a torch.compile'd function is skipped with how to get it back.
Functions, classes, enums and cached functions defined in the notebook go by value (byvalue.py);
everything else through the standard pickler, falling back to dill for what only dill can handle. Each
object's __reduce__ runs once per save, whichever pickler ends up saving it.
"""
from __future__ import annotations

import array
import collections
import copyreg
import functools
import io
import itertools
import json
import math
import os
import pickle
import sys
import types
import warnings
import weakref
import zlib
from concurrent.futures import ThreadPoolExecutor

import dill

from . import (byvalue, cuda_io, module_objects, packed, pending_names, plain_values, reconstruct, set_order,
               shared_memory, skip_hints, torch_modules, weak_containers)
from .alignment import (array_from_layout, masked_view, small_root, subclass_view, tensor_extras, view_of,
                        view_of_bytearray, writeable)
from .dirty_pages import PAGE, TRACKER
from .dtype_json import dtype_to_json
from .errors import CheckpointWriteError
from .resources import refuse
from .fingerprint import (DEVICE_ALGORITHM, Mix64Batch, cpu_fingerprint, memory_view, on_device,
                          storage_fingerprint)
from .hashing import digest_bytes

try:
    import numpy as np
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # numpy < 2
        byte_bounds = np.byte_bounds
except ImportError:  # numpy is a dependency, but kernel_state must not die without it
    np = None

SMALL_ARRAY = 64 << 10   # numpy arrays below this (and not views of larger ones) are pickled inline
PACK_LIMIT = 1 << 20     # storages below this share pack blobs (flush_pack)
PACK_TARGET = 8 << 20    # about this much in each pack blob, so that one changed small array rewrites one pack
CHUNKED = 32 << 20       # numpy buffers from this size on are stored as chunks, each a blob of its own,
CHUNK = 8 << 20          # so that an in-place change to a slice rewrites one chunk, not the whole array
CHUNKS_ALGORITHM = "xxh3-128-chunks"
VIEW_LIMIT = 16 << 20    # a variable's views of part of a storage are fingerprinted on their own up to this
PROTOCOL = 5
_PLAIN = (int, float, str, bytes, bool, type(None), complex)
_FLAT = {int, float, str, bytes, bool, type(None)}
_NESTED = {dict, list, tuple}
_FLAT_TOP = {dict, list, str, bytes}  # what _flat may take
FLAT_MIN = 1024  # plain data (_flat) of this many items and more is pickled without the hooks
_NEWOBJ = (copyreg.__newobj__, copyreg.__newobj_ex__)  # protocol 2's `cls.__new__(cls, *args)`
_CONTAINERS = {dict, list, tuple, set, frozenset, collections.OrderedDict}
# what both picklers save by their own code, before any reducer_override
_BASIC = {int, float, str, bytes, bool, type(None), complex, list, dict, tuple, set, frozenset, bytearray}

TORCH_DTYPES = {
    "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}
NUMPY_DTYPES = {"b1": "BOOL", "u1": "U8", "i1": "I8", "i2": "I16", "u2": "U16", "f2": "F16",
                "i4": "I32", "u4": "U32", "f4": "F32", "i8": "I64", "u8": "U64", "f8": "F64"}

# What earlier saves in this process wrote, to prove torch storages unchanged by their version counter.
_written: dict[tuple, dict] = {}
_edges: dict[tuple, tuple[bytes, bytes]] = {}  # kernel undo: a tracked storage's bytes in its shared pages
# (store root, variable) -> (what its value digest depends on, the digest): Capture._value_digest
_digests: dict[tuple, tuple[str, str]] = {}
# a tracked numpy buffer -> its chunks' digests at the last scan of its pages (Capture._chunk_digests)
_chunks_known: dict[tuple, list[str]] = {}
# and of a whole buffer of 1 MiB or more below CHUNKED: ((dtype, shape), digest) (Capture._buffer_digest)
_buffers_known: dict[tuple, tuple] = {}
# an optimizer's hooks, which torch's Optimizer.__getstate__ leaves out (Capture._optimizer_state)
OPTIMIZER_HOOKS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
                   "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
                   "_optimizer_load_state_dict_post_hooks")


def _chunks_fingerprint(chunks: list) -> str:
    """A chunked buffer's fingerprint (CHUNKS_ALGORITHM): the hash of its chunks' digests, in order."""
    return digest_bytes(",".join(digest for digest, _n in chunks).encode())


def _torch():
    return sys.modules.get("torch")  # no tensors can exist unless the user imported torch


def defined_interactively(obj) -> bool:
    return getattr(obj, "__module__", None) in ("__main__", None)


def _missed_by_dill(obj) -> bool:
    """A class or function of a module that dill looks for as an attribute of its package, which it is not
    (torch.optim's `optimizer` is no longer the module): dill then pickles it by value, and fails (a notebook
    optimizer class was skipped: its base's methods cannot be pickled by value). pickle finds it by name."""
    name = getattr(obj, "__module__", None)
    if not isinstance(name, str) or name == "__main__" or "." not in name:
        return False
    module = sys.modules.get(name)
    package, _, last = name.rpartition(".")
    if module is None or getattr(sys.modules.get(package), last, None) is module:
        return False
    found = module
    for part in getattr(obj, "__qualname__", "<locals>").split("."):
        found = getattr(found, part, None)
    return found is obj


def _grad(t):
    """A tensor's gradient: a leaf's, or the one a non-leaf retains (`h.retain_grad()`); reading a non-leaf's
    `.grad` otherwise only warns."""
    return t.grad if t.is_leaf or t.retains_grad else None


# NaN equals nothing, so `np.nan in values` and `lookup[np.nan]` hold only through identity, which a pickled
# float loses: math.nan (torch.nan is it) and numpy.nan go by name, and come back as the restoring kernel's own
NAMED_NANS = {("math", "nan"), ("numpy", "nan")}


def named_nan(obj):
    """("constant", module, "nan") when obj is math.nan or numpy.nan itself, else None."""
    if obj is math.nan:
        return ("constant", "math", "nan")
    np = sys.modules.get("numpy")
    return ("constant", "numpy", "nan") if np is not None and obj is getattr(np, "nan", None) else None


def type_name(value) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ in ("builtins", "__main__") else f"{t.__module__}.{t.__qualname__}"


class _Hooks:
    capture: "Capture"

    def persistent_id(self, obj):
        return self.capture.reference(obj)


class FastPickler(_Hooks, pickle.Pickler):
    def reducer_override(self, obj):
        return self.capture.reduce(obj, dill_pickler=False)


class DillPickler(_Hooks, dill.Pickler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rehashed: set[int] = set()
        self._based: list[type] = []
        self._hidden: list[tuple] = []

    def dump(self, obj):
        try:
            return super().dump(obj)
        finally:
            for cls in self._based:  # the user's class as it was
                del cls.__orig_bases__
            for cls, name, value in self._hidden:
                type.__setattr__(cls, name, value)

    def reducer_override(self, obj):
        t = type(obj)
        if isinstance(obj, type) and id(obj) not in self._rehashed and defined_interactively(obj):
            if byvalue.lost_bases(obj) is not None:  # until this pickle is done: see byvalue.lost_bases
                obj.__orig_bases__ = obj.__bases__
                self._based.append(obj)
            for name in torch_modules.derived_class_attributes(obj):  # its metaclass makes them again
                self._hidden.append((obj, name, obj.__dict__[name]))
                type.__delattr__(obj, name)
            hash_ = byvalue.dropped_hash(obj)
            if hash_ is not None:  # the class itself, inside the arguments, goes by dill's own code
                self._rehashed.add(id(obj))
                return byvalue.restore_hash, (obj, hash_)
        if (t is types.FunctionType or isinstance(obj, type)) and _missed_by_dill(obj):
            return obj.__qualname__  # by reference, as pickle finds it
        if t is types.FunctionType and defined_interactively(obj):
            rv = torch_modules.unwrapped_step(obj)
            if rv is not None:
                return rv
        if (t is types.FunctionType or isinstance(obj, type)) and not defined_interactively(obj):
            self.capture.modules_named.add(getattr(obj, "__module__", None))  # by reference (a class's bases too)
        if (t in _BASIC or t in dill.Pickler.dispatch) and not (
                byvalue.is_namedtuple_class(obj) and defined_interactively(obj)  # dill drops its methods
                or module_objects.owner_of(obj)  # bound to random's own generator: by reference
                or module_objects.process_object(obj)):  # os.environ, sys.stdout: by name
            return NotImplemented
        return self.capture.reduce(obj, dill_pickler=True)


PICKLERS = {"pickle": FastPickler, "dill": DillPickler}


def _flat(value, held_elsewhere) -> list | None:
    """Plain data: a dict or list holding at least FLAT_MIN items, all plain scalars (int, str, bytes, bool, None,
    a float that is not a NaN: a NaN's identity goes through the hooks, named_nan) or dicts, lists and tuples of
    them at any depth (records, a vocabulary of tuples): the dicts and lists inside it, which a later variable
    may hold too. A str or bytes of at least FLAT_MIN characters: []. None for any other value, and for one
    holding an object that `held_elsewhere(ids)` says another variable is or holds (its pickle refers to that
    one, as the hooks do).

    Looked at one level at a time, each level's items in one pass of C loops: a million small records cost a
    walk of seconds one object at a time, more than the pickle itself."""
    if type(value) in (str, bytes):  # a long text or blob: its digest walk spent seconds in repr()
        return [] if len(value) >= FLAT_MIN else None
    if type(value) not in (dict, list):
        return None
    inside, level, seen, count = [], [value], {id(value)}, 0
    while level:
        dicts = [x for x in level if type(x) is dict]
        items = list(itertools.chain(itertools.chain.from_iterable(level),  # a dict's keys, a list's items
                                     itertools.chain.from_iterable(map(dict.values, dicts))))
        count += len(items)
        kinds = set(map(type, items))
        if float in kinds and any(map(math.isnan, [x for x in items if type(x) is float])):
            return None
        if not kinds - _FLAT:
            break
        if not kinds <= _FLAT | _NESTED:
            return None
        level = [x for x in items if type(x) in _NESTED]
        ids = list(map(id, level))
        if not seen.isdisjoint(ids) or len(set(ids)) < len(ids):  # held twice, or holding itself: looked at once
            level = list({id(x): x for x in level if id(x) not in seen}.values())
            ids = list(map(id, level))
        seen.update(ids)
        if held_elsewhere(ids):
            return None
        inside.extend(x for x in level if type(x) is not tuple)
    return inside if count >= FLAT_MIN else None


def _memo_of(pickler) -> dict:
    memo = pickler.memo
    return memo.copy() if hasattr(memo, "copy") else dict(memo)


class VariableSkipped(Exception):
    pass


class Deferred(Exception):
    """A pickle whose memo later variables cannot refer to (a notebook function or class by value, a
    variable only dill can save) met a variable not saved yet (`def predict(x, m=model)`). Saved after the
    others, it refers to that variable instead of holding a copy of its own."""


class Capture:
    """Turns live objects into blobs and tables. With dry=True it writes nothing and only fingerprints,
    which is how verify() re-derives what a checkpoint would say about the live state."""

    def __init__(self, store=None, *, dry: bool = False, progress=None, algorithms: dict | None = None,
                 reuse_digests: bool = False):
        self.store, self.dry, self.progress = store, dry, progress
        # kernel undo: hash only what was written since its last look (dirty_pages.py); verify hashes it all
        self.reuse_digests = reuse_digests and not dry
        self.algorithms = algorithms or {}
        self.tensors: dict[str, dict] = {}
        self.arrays: dict[str, dict] = {}
        self.storages: dict[str, dict] = {}
        self.variables: dict[str, dict] = {}
        self.blobs: dict[str, int] = {}
        self.bytes_written = 0
        self.hashed = 0  # bytes of large arrays hashed to find what changed
        self.var_ids: dict[int, str] = {}
        self.var_values: dict[str, object] = {}
        self.defer_forward = False  # stage's first pass: see Deferred
        self._nested = 0  # inside a pickle whose memo later variables cannot refer to (dill's)
        self.saved_vars: set[str] = set()
        self.modules_named: set[str] = set()  # of the classes and functions the pickles name (module_sources)
        self._tensor_keys: dict[int, str] = {}
        self._array_keys: dict[int, str] = {}
        self._storage_keys: dict[tuple, str] = {}
        self._seen: dict[str, list] = {}
        self._keep: list = []
        self._cells: dict[int, int] = {}  # id() of a notebook function's closure cell -> its number in this save
        self._viewed: dict[tuple, object] = {}  # ("tensor" | "array", table key) -> the live object (_views)
        self._pack: list = []
        self._packs_present: dict[str, bool] = {}
        self._reused_packs: dict[str, list] = {}  # an earlier pack -> the entries this save found in it
        self.sources: set[str] = set()  # the cells (their linecache file names) of the definitions saved by value
        self._current: str | None = None
        self._var_storages: dict[str, int] = {}  # the storages this variable's pickle uses -> their order
        self._var_refs: list[tuple] = []  # the tensors and arrays this variable's pickle refers to
        self._var_memo = False  # and whether it refers to an object another variable's pickle holds
        self._var_raw = False  # or to a storage outside the tensor table (torch's own reductions)
        self._new_checked: set[tuple] = set()  # (variable, class, arguments) whose __new__ was looked at
        self._sets: dict[int, tuple] = {}  # id of a set saved by reference (_set_reference) -> (variable, number)
        self.string_sets = False  # a set or frozenset of strings was saved: its order depends on the hash seed
        self._shared: dict[int, tuple] = {}
        self._inside: dict[int, str] = {}  # id of a dict or list inside a variable's plain data -> the variable
        self._lendable: dict[str, object] = {}  # those variables whose memo is not in _shared yet (_lend)
        self._reductions: dict[int, tuple] = {}
        self._small_roots: dict[int, _SmallRoot] = {}  # id of a small array's root: its pickled memory
        self._attrs_sent: set[int] = set()  # tensors whose Python attributes this variable's pickle holds
        self._extras_sent: set[int] = set()  # tensors whose sparse grad and hooks this variable's pickle holds
        self._extras: dict[int, tuple] = {}  # a tensor's, between reference() and reduce()
        self._with_hooks = True  # False: this variable is saved again without them (add_variable)
        self._hooked: list[str] = []  # the hooks this variable's pickle holds
        self.warnings: list[str] = []
        # verify, saying why a variable changed: buffer fingerprint -> the checkpoint's np.memmap source
        # that an in-memory array with those bytes is digested as (checkpoint.verify, _memmap_copies)
        self.copies_of: dict[str, dict] = {}
        self._torch_memory = shared_memory.Spans()  # CPU torch storages: a small array on them is not inlined
        self._device_fingerprints = Mix64Batch()  # ident -> this save's GPU fingerprint (prefetch_device)

    # -- per variable -------------------------------------------------------------------------------
    def name_variable(self, name: str, value) -> None:
        """Before any variable is added: which object is which variable (the first name wins)."""
        if id(value) not in self.var_ids:
            self.var_ids[id(value)] = name
            self.var_values[name] = value
        torch = _torch()
        if torch is not None and isinstance(value, torch.Tensor) and value.device.type == "cpu":
            try:  # before any array is added: `t = torch.from_numpy(small)` may follow `small`
                ust = value.untyped_storage()
                self._torch_memory.add(ust.data_ptr(), ust.nbytes())
            except (RuntimeError, NotImplementedError):  # meta, sparse, quantized: no plain storage
                pass

    def add_variable(self, name: str, value, picklers=("pickle", "dill")) -> dict:
        """Pickle one variable. Hooks it holds (a tensor's gradient hooks, an optimizer's step hooks) that
        cannot be pickled are left out, with a warning naming them, and the variable saved without them."""
        self._hooked, self._with_hooks = [], True
        try:
            record = self._add_variable(name, value, picklers)
            if isinstance(value, (type, types.FunctionType)):  # a restore in this process tells a redefinition
                record["object_id"] = id(value)  # (a new object) from state that moved on (the same one)
            return record
        except VariableSkipped as exc:
            if not self._hooked:
                raise
            hooked, self._with_hooks = sorted(set(self._hooked)), False
            try:
                record = self._add_variable(name, value, picklers)
            finally:
                self._with_hooks = True
            warning = (f"{name}: its hooks {', '.join(hooked)} cannot be saved ({exc}); saved without them, "
                       f"so after a restore they no longer run")
            record["hooks_not_saved"] = hooked
            self.warnings.append(warning)  # the save's result says it (the magic prints it, a pause shows it)
            return record

    def _add_variable(self, name: str, value, picklers) -> dict:
        self._current = name
        errors = []
        for kind in picklers:
            self._var_storages, self._var_refs, self._var_memo, self._var_raw = {}, [], False, False
            self._var_names = set()  # the other variables whose objects this one's pickle refers to
            self._var_holds = set()  # of those, the ones it holds whole (`history = log`, `{"log": log}`)
            self._attrs_sent, self._extras_sent, self._extras = set(), set(), {}
            self._nested = int(kind == "dill")
            buf = io.BytesIO()
            # plain data (a vocabulary, a list of records): pickled without the hooks (the same bytes: none
            # would act), its memo copied only for a later variable that holds a dict or list of it (_lend); a
            # million records spent ten seconds, after every cell with kernel undo, in the hooks and the memo
            # (reference() after _flat: it has side effects, a set's first reference carries its items)
            inside = _flat(value, self._held_elsewhere) if kind == "pickle" and type(value) in _FLAT_TOP else None
            if inside is not None and self.reference(value) is not None:
                inside = None
            flat = inside is not None
            try:
                pickler = pickle.Pickler(buf, protocol=PROTOCOL) if flat else PICKLERS[kind](buf, protocol=PROTOCOL)
                if not flat:
                    pickler.capture = self
                with warnings.catch_warnings():  # what dill cannot do ends in the skip's own reason
                    warnings.simplefilter("ignore", dill.PicklingWarning)
                    pickler.dump(value)
            except (CheckpointWriteError, Deferred):
                raise
            except (Exception, SystemExit) as exc:  # anything a pickler raises means: this variable cannot be saved
                # (an exit() in its __reduce__ too: it failed the notebook's whole checkpoint, naming no variable)
                errors.append(exc)
                continue
            data = buf.getvalue()
            if kind == "dill":
                try:
                    byvalue.refuse_main_references(value, data)
                except TypeError as exc:
                    errors.append(exc)
                    continue
            if self.dry:
                digest = digest_bytes(data)
            else:
                digest, size, new = self.store.put_bytes(data)
                self._account(digest, size, new)
            record = {"kind": _kind(value), "type": type_name(value), "pickler": kind, "pickle": digest,
                      "bytes": len(data) + sum(self.storages[s]["nbytes"] for s in self._var_storages),
                      "storages": list(self._var_storages)}
            if self._var_names:
                record["refers_to"] = sorted(self._var_names)
            if self._var_holds:
                record["holds"] = sorted(self._var_holds)
            record.update(_describe(value))
            try:
                views = self._views()
            except Exception:  # a view it cannot copy or hash (a broken subclass): compared whole, as before
                views = {}
            if views:
                record["views"] = views
            try:
                # plain data's pickle is its value, byte for byte (no hook acted): walking a million records
                # for the digest took longer than the save itself, and verify walked them again
                record["digest"] = f"pickle:{digest}" if flat else self._value_digest(name, value, digest)
            except Exception:  # a value the walk cannot read (datetime64 cells, meta or nested tensors):
                # verify compares its pickle instead, the same way on both sides
                record["digest"] = f"pickle:{digest}"
            try:  # the manifest is JSON: a variable it cannot describe is skipped, never the whole save
                json.dumps(record)
            except (TypeError, ValueError) as exc:
                raise VariableSkipped(f"its description cannot be put in the manifest ({exc})") from None
            self.variables[name] = record
            self.saved_vars.add(name)
            if kind == "pickle":  # dill edits its memo as it goes: its indices are not the unpickler's
                # a dict or list is memoized before its items: index 0
                self._share(name, {id(value): (0, value)} if flat else _memo_of(pickler))
                if inside:
                    self._lendable[name] = value
                    self._inside.update(dict.fromkeys(map(id, inside), name))
            return record
        exc = errors[0]
        if isinstance(exc, RecursionError):  # pickling recurses once per level: the limit is Python's
            raise VariableSkipped(
                f"it is nested deeper than Python's recursion limit ({sys.getrecursionlimit()}) lets a pickle go "
                "(RecursionError); keep it flatter (a list of rows, not a chain of lists), or save it yourself")
        raise VariableSkipped(skip_hints.hint(f"{type(exc).__name__}: {str(exc)[:300]}"))

    def _check_new(self, rv: tuple) -> None:
        """Warn, once per variable and class, of an object whose class's __new__ cannot load it (reconstruct)."""
        key = (self._current, rv[1][0] if rv[1] else None, len(rv[1]))
        if key in self._new_checked:
            return
        self._new_checked.add(key)
        why = reconstruct.new_without_its_arguments(rv)
        if why:
            self.warnings.append(f"{self._current}: saved, but {why}")

    def _views(self) -> dict:
        """{storage key: fingerprint of this variable's own views of it} for each storage it views only in
        part (`head = t[:3]` beside `t`): verify compares those, so a write elsewhere in the storage (to
        another variable's part) does not read as a change of this one. A storage its views cover whole
        (one tensor, or a flat buffer's parameters together), any raw storage, and views of more than
        VIEW_LIMIT bytes in all (each is copied to be hashed) are compared whole, by the storage's own."""
        if self._var_raw:
            return {}
        by_storage: dict[str, list] = {}
        for kind, key in dict.fromkeys(self._var_refs):
            record = (self.tensors if kind == "tensor" else self.arrays)[key]
            skey = record["storage"] if kind == "tensor" else record["buffer"]
            by_storage.setdefault(skey, []).append(self._viewed.get((kind, key)))
        out = {}
        for skey, objs in by_storage.items():
            storage = self.storages[skey]
            if any(o is None for o in objs) or sum(_nbytes(o) for o in objs) > VIEW_LIMIT or \
                    _covers([_extent(o) for o in objs], storage["nbytes"]):
                continue
            parts = [_view_fingerprint(o, self.algorithms.get(f"{skey}/view")) for o in objs]
            out[skey] = {"algorithm": parts[0]["algorithm"],
                         "value": digest_bytes("|".join(p["value"] for p in parts).encode())}
        return out

    def _value_digest(self, name: str, value, pickle_digest: str) -> str:
        """The digest verify compares. Walking a large object graph costs milliseconds (after every cell for
        kernel undo, and most of an unchanged model's pause save), so a save reuses the last one of the
        variable in the same store when nothing it depends on changed: the same pickle bytes,
        the same tensor and array layouts, and no object of another variable (whose contents the pickle
        does not hold). The contents of the tables' tensors and arrays are not part of it (verify
        compares their storages' fingerprints on their own); those of a storage the pickle refers to
        outside the tables (torch's own reduction of a quantized or subclassed tensor) are."""
        from .compare import value_digest
        key = None if self.dry else self._digest_key(pickle_digest)  # verify (dry) always walks the live value
        cached = _digests.get((self.store.root, name)) if key else None
        if cached and cached[0] == key:
            return cached[1]
        digest = value_digest(value, self)
        if key:
            _digests[(self.store.root, name)] = (key, digest)
        return digest

    def _digest_key(self, pickle_digest: str) -> str | None:
        if self._var_memo:
            return None
        parts: list = [pickle_digest]
        for kind, key in self._var_refs:
            record = (self.tensors if kind == "tensor" else self.arrays)[key]
            parts.append(record)
            if "grad" in record:
                parts.append(self.tensors[record["grad"]])
        if self._var_raw:  # the digest walks such a tensor's bytes; one in the table it names by layout
            parts.append([self.storages[s].get("fingerprint") for s in self._var_storages])
        return digest_bytes(json.dumps(parts, sort_keys=True, default=str).encode())

    def _share(self, name: str, memo: dict) -> None:
        """Objects this variable's pickle holds: a later variable that reaches one refers to it here."""
        self._keep.append(memo)  # temporaries in the memo must not die: their ids would be reused
        for oid, (index, obj) in memo.items():
            if oid in self._tensor_keys:  # a tensor with extras (reduce): the table shares it, not the memo
                continue
            if oid not in self._shared and not isinstance(obj, _PLAIN) and not self._by_name(obj):
                self._shared[oid] = (name, index)

    def _held_elsewhere(self, ids: list) -> bool:
        """Whether another variable than the one being saved is one of these objects, or its pickle holds one
        (_flat). Looked up, not merged: the shared table of a model's pickle has many entries."""
        mine = self._current
        if any(self.var_ids[i] != mine for i in self.var_ids.keys() & ids):
            return True
        if any(self._inside[i] != mine for i in self._inside.keys() & ids):
            return True
        return any(self._shared[i][0] != mine for i in self._shared.keys() & ids)

    def _lend(self, oid: int) -> tuple | None:
        """(variable, memo index) of a dict or list inside an earlier variable's plain data (_flat), whose memo
        was not kept: it is pickled again, the same way, for its memo (the same indices as the one saved)."""
        name = self._inside.get(oid)
        value = self._lendable.pop(name, None) if name is not None else None
        if value is not None:
            pickler = pickle.Pickler(io.BytesIO(), protocol=PROTOCOL)
            pickler.dump(value)
            self._share(name, _memo_of(pickler))
        return self._shared.get(oid)

    def _by_name(self, obj) -> bool:
        """Saved as a name (an imported class, function or module, torch.float32): every pickle can
        name it itself, so no variable needs another one for it."""
        if isinstance(obj, (type, types.FunctionType)):
            return not defined_interactively(obj)
        if isinstance(obj, (types.BuiltinFunctionType, types.ModuleType)):
            return True
        cached = self._reductions.get(id(obj))
        return cached is not None and isinstance(cached[1], str)

    # -- the pickler hooks --------------------------------------------------------------------------
    def reference(self, obj):
        if isinstance(obj, _PLAIN):
            return named_nan(obj) if type(obj) is float and obj != obj else None
        name = self.var_ids.get(id(obj))
        if name is not None and name != self._current and not plain_values.by_value(obj):
            if name in self.saved_vars:
                self._var_names.add(name)
                self._var_holds.add(name)
                return ("var", name)
            if self._nested and self.defer_forward:
                raise Deferred(name)
        path = self._path(obj)
        if path is not None:
            self._var_names.add(path[1])
            return path
        shared = self._shared.get(id(obj)) or (self._lend(id(obj)) if id(obj) in self._inside else None)
        if shared is not None and shared[0] != self._current:
            self.variables[shared[0]]["shared"] = True
            self._var_memo = True
            self._var_names.add(shared[0])
            return ("memo",) + shared
        if type(obj) in (set, frozenset) and len(obj) > 1 and not self.string_sets:  # its first items tell
            self.string_sets = any(isinstance(x, (str, bytes)) for x in itertools.islice(obj, 64))
        if type(obj) is set and len(obj) > 1:
            return self._set_reference(obj)
        if type(obj) in _CONTAINERS:  # most of what a model's pickle meets: never a tensor nor a resource
            return None
        if module_objects.process_object(obj):  # sys.stdout is no resource to refuse: reduce() names it
            return None
        torch = _torch()
        if torch is not None:
            if isinstance(obj, torch.Tensor):
                key = self._tensor(obj, torch)
                if key is None:
                    return None
                if id(obj) not in self._extras_sent:
                    self._extras_sent.add(id(obj))
                    extras = self._tensor_extras(obj, key)
                    if extras is not None:  # reduce() wraps the reference to this tensor in tensor_extras
                        self._extras[id(obj)] = extras
                        return None
                self._var_refs.append(("tensor", key))
                if obj.__dict__ and id(obj) not in self._attrs_sent:
                    # Python attributes set on a tensor or Parameter (`p.no_decay = True`) travel with its
                    # first reference in each variable's pickle; later ones (one inside the attributes
                    # themselves included) get the same tensor, so need not repeat them
                    self._attrs_sent.add(id(obj))
                    return ("tensor", key, dict(obj.__dict__))
                return ("tensor", key)
            if isinstance(obj, torch.storage.TypedStorage):
                skey = self._storage(obj._untyped_storage, None, TORCH_DTYPES.get(str(obj.dtype)[6:]))
                self._var_raw = True
                return ("storage", skey, str(obj.dtype)[6:])
            if isinstance(obj, torch.UntypedStorage):
                self._var_raw = True
                return ("storage", self._storage(obj, None, None), None)
        if np is not None and isinstance(obj, np.ndarray):
            key = None
            if isinstance(obj, np.memmap) and not obj.dtype.hasobject:
                key = self._array(obj, memmap=True)
            elif type(obj) is np.ndarray:
                key = self._array(obj)
            if key is not None:
                self._var_refs.append(("array", key))
                return ("array", key)
            if type(obj) is np.ndarray:
                return None
        refuse(obj)
        torch_modules.refuse_compiled(obj)
        return None

    def _set_reference(self, obj):
        """A set whose pickle would come back iterating in another order (pickle adds its items in the order they
        are iterated, and under the same string hashes a set filled in that order can still lay them out
        otherwise: one that wrapped around its table, or collided): its items in an order that gives its order
        back, ("set", variable, number, items); met again, ("set", variable, number). None for any other."""
        known = self._sets.get(id(obj))
        if known is not None:
            if known[0] != self._current:
                self._var_names.add(known[0])
            return ("set",) + known
        if len(obj) > set_order.SEARCH_LIMIT:  # each try builds a set: a large one keeps the order pickle gives it
            return None
        items = list(obj)
        # only constants: the items go inside the reference, where no reference of theirs (a tensor's, another
        # variable's object) is made, so a set of such objects keeps pickle's way and order
        if not all(type(x) in _PLAIN or type(x) in (tuple, frozenset) and plain_values.by_value(x) for x in items):
            return None
        if list(set(items)) == items:
            return None
        found = set_order.insertion_order(items, set_order.table_size(obj))
        if found is None:
            return None
        order, table = found
        self._sets[id(obj)] = known = (self._current, len(self._sets))
        self._keep.append(obj)  # its id stays its own until the save ends
        return ("set",) + known + (order,) + ((table,) if table is not None else ())

    def _path(self, obj):
        """A class or function defined inside a saved notebook class (`Outer.Inner`): the same object,
        reached from that variable after a restore, not a copy of its own."""
        if not isinstance(obj, (type, types.FunctionType)) or not defined_interactively(obj):
            return None
        owner, *attrs = getattr(obj, "__qualname__", "").split(".")
        if not attrs or owner not in self.saved_vars or not all(a.isidentifier() for a in attrs):
            return None
        found = self.var_values.get(owner)
        for attr in attrs:
            found = getattr(found, attr, None)
        return ("path", owner, attrs) if found is obj else None

    def reduce(self, obj, dill_pickler: bool):
        """reducer_override: notebook definitions by value, small arrays onto aligned memory, and every
        other object's __reduce_ex__ called once per save (kept for the dill retry and the digest)."""
        t = type(obj)
        if np is not None and t is np.ndarray and not obj.dtype.hasobject:
            return self._small_array(obj)
        extras = self._extras.pop(id(obj), None)
        if extras is not None:  # the tensor inside goes by reference() again, now as its table row
            return tensor_extras, (obj,) + extras
        if isinstance(obj, type):
            if byvalue.is_enum_class(obj) and defined_interactively(obj):
                return byvalue.reduce_enum(obj)
            if byvalue.is_namedtuple_class(obj) and defined_interactively(obj):
                return byvalue.reduce_namedtuple(obj)
            if not defined_interactively(obj):
                self.modules_named.add(obj.__module__)
                return NotImplemented
            if dill_pickler:
                return NotImplemented
            return byvalue.loads, (self._by_value(obj),)
        if isinstance(obj, types.FunctionType):
            rv = torch_modules.scheduler_step(obj)
            if rv is not None:
                return rv
            if not defined_interactively(obj):
                self.modules_named.add(obj.__module__)
                if dill_pickler or "<locals>" not in obj.__qualname__:
                    return NotImplemented
                # a library's nested function (torch's parametrizations.weight_norm hooks one onto the module):
                # the standard pickler cannot name it, and its whole variable went to dill, whose pickle shares
                # no object with another variable's (`h = m.register_forward_hook(...)` removed nothing)
            elif dill_pickler:
                return NotImplemented
            cells = self._cell_numbers(obj)
            return byvalue.load_function, (self._by_value(obj), obj.__qualname__) + ((cells,) if cells else ())
        if byvalue.is_cached_function(obj) and defined_interactively(obj.__wrapped__):
            return byvalue.reduce_cached(obj)
        if t is functools.cached_property:
            return byvalue.reduce_cached_property(obj)
        if t.__module__ == "typing":
            rv = byvalue.reduce_type_variable(obj)
            if rv is not None:
                return rv
        owner = module_objects.owner_of(obj)
        if owner is not None:  # `random.random`: the module's own generator, not a copy of it
            return module_objects.bound_method, owner + (obj.__name__,)
        named = module_objects.process_object(obj)
        if named is not None:  # os.environ: the restoring process's own, never a copy written over it
            return module_objects.module_attribute, named
        if t in copyreg.dispatch_table or isinstance(obj, (types.ModuleType, types.BuiltinFunctionType)):
            return NotImplemented
        cached = self._reductions.get(id(obj))
        if cached is None:
            rv = module_objects.reduce_logger(obj) or self._reduce_masked(obj) or self._reduce_subclass(obj) or \
                torch_modules.reduction(obj) or weak_containers.reduction(obj) or reconstruct.reduce_exception(obj) or \
                obj.__reduce_ex__(PROTOCOL)
            if not isinstance(rv, str):
                rv = _state_set_directly(t, _without_lazy_dict(t, tuple(rv)))
                rv = rv[:3] + tuple(None if items is None else list(items) for items in rv[3:5]) + rv[5:]
            self._reductions[id(obj)] = (obj, rv)
        else:
            rv = cached[1]
        if not isinstance(rv, str) and rv[0] in _NEWOBJ:
            self._check_new(rv)
        torch = _torch()
        if torch is not None and isinstance(obj, torch.optim.Optimizer) and not isinstance(rv, str):
            rv = self._optimizer_state(obj, rv)
            self._reductions[id(obj)] = (obj, rv)  # what verify's digest walks too
        if isinstance(rv, str):
            if getattr(obj, "__module__", None) == "__main__":
                raise TypeError(f"{type(obj).__qualname__} object {rv!r} can only be saved as a reference to "
                                f"__main__.{rv}, which a fresh kernel does not have")
            return NotImplemented
        return rv[:3] + tuple(None if items is None else iter(items) for items in rv[3:5]) + rv[5:]

    def _optimizer_state(self, opt, rv: tuple) -> tuple:
        """torch's Optimizer.__getstate__ leaves out its hooks (register_step_post_hook and the others) and
        __setstate__ resets what is missing to empty: the state gets those the optimizer has. __setstate__
        also adds `differentiable: False` to defaults that lack it (SparseAdam, LBFGS): the state has it
        already, so that verify finds the restored optimizer equal to the live one. And it leaves out what
        the optimizer's __init__ set beyond its state: LBFGS's `_params` (a restored LBFGS failed at its next
        step), a notebook optimizer's own attributes; the state holds them."""
        if len(rv) < 3 or not isinstance(rv[2], dict):
            return rv
        state = {k: v for k, v in rv[2].items() if k not in OPTIMIZER_HOOKS}
        state.update((k, v) for k, v in vars(opt).items() if k not in state and k not in OPTIMIZER_HOOKS)
        defaults = state.get("defaults")
        if isinstance(defaults, dict) and "differentiable" not in defaults:
            state["defaults"] = {**defaults, "differentiable": False}
        if self._with_hooks:
            for attr in OPTIMIZER_HOOKS:
                hooks = getattr(opt, attr, None)
                if hooks:
                    # the dict itself, keys and all: a handle (`h = opt.register_step_post_hook(fn)`) holds it
                    # too, and after a restore h.remove() must still remove the hook from the optimizer's dict
                    state[attr] = hooks
                    self._hooked.extend(f"{type(opt).__name__}.{attr.lstrip('_')}:{_hook_name(h)}"
                                        for h in hooks.values())
        return rv[:2] + (state,) + rv[3:]

    def _tensor_extras(self, t, key: str) -> tuple | None:
        """What a tensor's table row does not hold: a gradient that is no strided tensor (sparse) and its
        gradient hooks. None when it has neither."""
        grad = _grad(t) if "grad" not in self.tensors[key] else None
        # the dicts themselves, as for an optimizer's hooks: a handle of p.register_hook(fn) holds the same one
        hooks = [(getattr(t, attr, None) or {}) if self._with_hooks else {}
                 for attr in ("_backward_hooks", "_post_accumulate_grad_hooks")]
        if grad is None and not any(hooks):
            return None
        self._hooked.extend(f"{'Parameter' if isinstance(t, _torch().nn.Parameter) else 'tensor'}"
                            f"{list(t.shape)}:{_hook_name(h)}" for d in hooks for h in d.values())
        return (grad,) + tuple(d or None for d in hooks)

    @staticmethod
    def _reduce_masked(obj):
        """A masked array's own reduction pickles its data (and mask) as bytes: a copy, no longer a view of
        the array it masks, and written again at every save. Its data as a plain view (and its mask, an
        array in its __dict__) go through the array table instead, like any array."""
        if np is None or type(obj) is not np.ma.MaskedArray or obj.dtype.hasobject or \
                obj._baseclass is not np.ndarray:
            return None
        return masked_view, (obj.view(np.ndarray), dict(obj.__dict__))

    @staticmethod
    def _reduce_subclass(obj):
        """An array of a numpy subclass that keeps ndarray's own pickling (np.recarray, np.matrix) would be
        pickled as its bytes: a copy, no longer a view of the array it was made from (`s.view(np.recarray)`),
        on unaligned memory. Its data as a plain view goes the way of any array, and the class and instance
        attributes are put back on it."""
        t = type(obj)
        if np is None or not isinstance(obj, np.ndarray) or t in (np.ndarray, np.memmap) or \
                isinstance(obj, np.ma.MaskedArray) or obj.dtype.hasobject or \
                any(getattr(t, m) is not getattr(np.ndarray, m) for m in _NDARRAY_PICKLING):
            return None
        return subclass_view, (obj.view(np.ndarray), t, dict(getattr(obj, "__dict__", {})))

    def _by_value(self, obj) -> bytes:
        """dill's by-value pickle of a notebook function or class, inside the standard pickle of the
        variable. It goes through this capture's hooks like the rest: what its defaults, closure or class
        attributes hold is refused when it is a live resource (dill would re-open a file, mode 'w'
        truncating it), and refers to other variables, tensors and arrays instead of copying them."""
        if defined_interactively(obj):  # a library's function has its source file
            self.sources.update(byvalue.source_files(obj))
        buf = io.BytesIO()
        pickler = DillPickler(buf, protocol=PROTOCOL)
        pickler.capture = self
        self._nested += 1
        try:
            pickler.dump(obj)
        finally:
            self._nested -= 1
        return byvalue.refuse_main_references(obj, buf.getvalue())

    def _cell_numbers(self, fn) -> tuple:
        """The numbers of a notebook function's closure cells in this save: each function goes into a pickle of
        its own, so two closures of one call (`add`, `get` over one `total`) came back each with a cell of its
        own, and `add(10)` no longer moved what `get()` reads. The restore gives cells of one number one cell."""
        numbers = []
        for cell in fn.__closure__ or ():
            if id(cell) not in self._cells:
                self._cells[id(cell)] = len(self._cells)
                self._keep.append(cell)  # its id stays its own until the save ends
            numbers.append(self._cells[id(cell)])
        return tuple(numbers)

    def _small_array(self, arr):
        """A small array is pickled inline as a view of its root's memory (numpy's own unpickling would
        copy each array, compacted, into the pickle's buffer: unaligned, and no longer a view)."""
        if not arr.size:
            return array_from_layout, (b"", arr.dtype, tuple(arr.shape), arr.dtype, tuple(arr.shape), 0,
                                       tuple(np.empty(arr.shape, arr.dtype).strides), writeable(arr))
        root = _root_of(arr)
        owner = _bytearray_of(root)
        if owner is not None:  # pickled with its bytearray, through the memo: still a view of it after a restore
            start = np.frombuffer(owner, dtype=np.uint8).ctypes.data
            return view_of_bytearray, (owner, arr.dtype, tuple(arr.shape), arr.ctypes.data - start,
                                       tuple(arr.strides), writeable(arr))
        held = self._small_roots.get(id(root))
        if held is None:
            held = self._small_roots[id(root)] = _SmallRoot(root)
            self._keep.append(held)
        return view_of, (held, arr.dtype, tuple(arr.shape), arr.ctypes.data - held.carrier.ctypes.data,
                         tuple(arr.strides), writeable(arr))

    def reduction(self, obj):
        """The reduction this save's pickler used for `obj`, if it went through reduce()."""
        cached = self._reductions.get(id(obj))
        return None if cached is None else cached[1]

    def _use(self, skey: str) -> None:
        self._var_storages.setdefault(skey, len(self._var_storages))  # a dict: a list's `in` was quadratic

    # -- torch --------------------------------------------------------------------------------------
    def _tensor(self, t, torch) -> str | None:
        if (type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided or t.is_quantized
                or t.is_nested or t.device.type == "meta" or t.is_conj() or t.is_neg()):
            # torch's own reduction handles these (a lazily conjugated or negated view keeps its bit
            # there, which a table row does not record); their storages still come back here
            return None
        key = self._tensor_keys.get(id(t))
        if key is not None:  # met again (another variable, or dill's second try at this one): its grad too
            record = self.tensors[key]
            self._use(record["storage"])
            if "grad" in record:
                self._use(self.tensors[record["grad"]]["storage"])
            return key
        dtype = str(t.dtype)[6:]
        skey = self._storage(t.untyped_storage(), t, TORCH_DTYPES.get(dtype))
        key = f"t{len(self._tensor_keys)}"
        self._tensor_keys[id(t)] = key
        self._keep.append(t)
        self._viewed[("tensor", key)] = t
        record = {"storage": skey, "offset": t.storage_offset(), "shape": list(t.shape),
                  "stride": list(t.stride()), "dtype": dtype,
                  "requires_grad": bool(t.requires_grad),
                  "parameter": isinstance(t, torch.nn.Parameter)}
        if t.requires_grad and not t.is_leaf:
            record["non_leaf"] = True  # comes back as a leaf that requires grad, as torch.save does
        self.tensors[key] = record
        if _grad(t) is not None:  # a non-leaf's retained one too: the restored leaf holds it
            grad = self._tensor(t.grad, torch)
            if grad is not None:
                record["grad"] = grad
        return key

    def _storage(self, ust, t, st_dtype) -> str:
        ident = (str(ust.device), ust.data_ptr(), ust.nbytes())
        skey = self._storage_keys.get(ident)
        if skey is None:
            skey = f"s{len(self.storages)}"
            record = self._torch_storage(skey, ident, ust, t, st_dtype)
            if getattr(ust, "filename", None):  # torch.from_file(shared=True): the restore cannot map it again
                record["file"] = ust.filename
            self._storage_keys[ident] = skey
            self.storages[skey] = record
            if ident[0] == "cpu":
                self._torch_memory.add(ident[1], ident[2])
            self._seen[skey] = []
        if t is not None and not t.is_inference():  # an inference tensor has no version counter: its
            self._seen[skey].append((t, t._version))  # storage is hashed again at every save instead
        self._use(skey)
        return skey

    def _torch_storage(self, skey, ident, ust, t, st_dtype) -> dict:
        device, _ptr, nbytes = ident
        dtype, shape = _layout(nbytes, t, st_dtype)
        record = {"kind": "torch", "nbytes": nbytes, "device": device, "dtype": dtype, "shape": shape}
        if self.dry:  # the recorded algorithm tells mix64 from the older sum64, on a device only (a key
            # moved by one, see checkpoint._fingerprints, must not make a CPU storage's xxh3 a mix64)
            algorithm = self.algorithms.get(skey) if on_device(ust) else None
            queued = self._device_fingerprints.get(ident) if algorithm == DEVICE_ALGORITHM else None
            record["fingerprint"] = queued or storage_fingerprint(ust, dtype, shape, algorithm)
            return record
        previous = _written.get((self.store.root,) + ident)
        if previous:
            pending_names.resolve_record(previous)
        written = self._written_since(ident, ust)
        if written and previous:  # the scan forgot those writes: a stage cut short must not reuse the old blob
            _written.pop((self.store.root,) + ident, None)
            previous = None
        if (previous and t is not None and self.store.has_blob(previous["blob"], "safetensors")
                and previous["layout"] == (dtype, shape)
                and any(tid == id(t) and version == t._version for tid, version in previous["seen"])
                and (not written if written is not None else self._same_bytes(ident, ust, dtype, shape,
                                                                              previous["fingerprint"]))):
            record.update({k: previous[k] for k in ("blob", "name", "fingerprint")})
            self._account(previous["blob"], previous["blob_bytes"], False)
            if nbytes < PACK_LIMIT and ust.device.type == "cpu":  # in a pack: repacked if that is mostly dead
                self._reused_packs.setdefault(previous["blob"], []).append(
                    (skey, dtype, shape, memory_view(ust.data_ptr(), nbytes), ust))
            return record
        data = cuda_io.source_for(ust) if nbytes >= PACK_LIMIT else None  # via pinned buffers
        if data is None:
            cpu = ust if ust.device.type == "cpu" else ust.cpu()
            data = memory_view(cpu.data_ptr(), nbytes)
        fingerprint = storage_fingerprint(ust, dtype, shape) if on_device(ust) else None
        if nbytes >= PACK_LIMIT:
            digest, size, new = self.store.put_tensors([("t", dtype, shape, data)], self._progress_bytes,
                                                       position=ident)
            self._account(digest, size, new)
            record.update(blob=digest, name="t", blob_bytes=size,
                          fingerprint=fingerprint or {"algorithm": "xxh3-128", "value": digest})
        else:
            value = cpu_fingerprint(dtype, shape, data)
            record.update(name=value[:32], fingerprint=fingerprint or {"algorithm": "xxh3-128", "value": value})
            self._pack_or_reuse(record, (skey, dtype, shape, data, cpu))
            self._progress_bytes(nbytes)  # counted when staged: the pack is written at the end, in one go
        return record

    def _written_since(self, ident: tuple, ust) -> set | None:
        """Kernel undo, a CPU storage of 1 MiB or more: whether a page of it was written since the last
        look (dirty_pages.py), so that an unchanged one costs no hash after every cell; None where the
        kernel cannot say, and for a pause's save (which fingerprints every storage at the same version).
        A storage stays tracked even when a cell rewrites it (a training step): the first write of each
        page in a cell then costs a fault (about 1 µs) in that cell, instead of a hash after every cell."""
        if not self.reuse_digests or self.dry or ust.device.type != "cpu" or ust.nbytes() < PACK_LIMIT:
            return None
        _, address, nbytes = ident
        ranges = TRACKER.written_ranges(ident, address, nbytes, keep=True)
        # Its first and last pages may hold other objects too (the heap packs allocations together), whose
        # writes are reported as well: where only those were written, its own bytes there decide.
        own_from, own_to = -(-address // PAGE) * PAGE, (address + nbytes) // PAGE * PAGE
        edges = (bytes(memory_view(address, own_from - address)) if own_from > address else b"",
                 bytes(memory_view(own_to, address + nbytes - own_to)) if address + nbytes > own_to else b"")
        before = _edges.get(ident)
        if len(_edges) > 65536:  # freed storages' leftovers: forgetting one costs a copy, never a wrong answer
            _edges.clear()
        _edges[ident] = edges
        if ranges is None:
            TRACKER.track(ident, address, nbytes)  # before the hash: a write meanwhile shows next time
            return None
        if any(first < own_to and last > own_from for first, last in ranges) or (ranges and edges != before):
            return {0}
        return set()

    def _same_bytes(self, ident, ust, dtype, shape, fingerprint: dict) -> bool:
        """The same tensor at the same version is a hint, not a proof: fused optimizers (AdamW(fused=True)),
        writes through .data, .numpy() or DLPack change the bytes without bumping the version. So the bytes
        are fingerprinted again (on the GPU for CUDA, queued for all of them at once by prefetch_device). A
        storage kernel undo staged a moment ago, which its writer has not named yet, has no fingerprint to
        compare with: it is staged again (a copy), since its version says nothing about such writes."""
        if pending_names.is_pending(fingerprint["value"]):
            return False
        now = self._device_fingerprints.get(ident) if fingerprint["algorithm"] == DEVICE_ALGORITHM else None
        return (now or storage_fingerprint(ust, dtype, shape, fingerprint["algorithm"])) == fingerprint

    def prefetch_device(self, root: str) -> None:
        """Before a save or a verify of every variable: queue the GPU fingerprints of the device storages the
        last save into this store (in this process) wrote and that are still alive, so that the walk waits for
        the GPU once, not once per parameter, and the GPU hashes while Python walks the objects."""
        for (saved_in, *ident), previous in list(_written.items()):
            ust = previous["storage"]()
            if (saved_in == root and ust is not None and previous["fingerprint"]["algorithm"] == DEVICE_ALGORITHM
                    and (str(ust.device), ust.data_ptr(), ust.nbytes()) == tuple(ident)):
                self._device_fingerprints.add(tuple(ident), ust)

    # -- numpy --------------------------------------------------------------------------------------
    def _array(self, arr, memmap: bool = False) -> str | None:
        if arr.dtype.hasobject and not memmap:
            return None
        # a structured, byte-swapped or annotated dtype (h5py's enum and string dtypes carry `metadata`, which
        # the table's dtype.str would drop) is pickled inline, unless verify asks whether it copies a memmap
        if not memmap and (arr.dtype.fields is not None or not arr.dtype.isnative or arr.dtype.metadata is not None) \
                and not (self.copies_of and self._copy_of(_carrier(_root_of(arr)))):
            return None
        key = self._array_keys.get(id(arr))
        if key is not None:
            self._use(self.arrays[key]["buffer"])
            return key
        root = _root_of(arr)
        if _bytearray_of(root) is not None:
            return None  # inline, with its bytearray: see _small_array
        if root.nbytes < SMALL_ARRAY and not memmap and not (self.copies_of and self._copy_of(_carrier(root))) \
                and not self._on_torch_memory(root):
            return None  # small and not a view of anything large: inline
        carrier = _carrier(root)
        key = f"a{len(self._array_keys)}"
        self._array_keys[id(arr)] = key
        self._keep.extend((arr, root, carrier))
        self._viewed[("array", key)] = arr
        skey = self._buffer(carrier)
        record = {"buffer": skey, "offset": arr.ctypes.data - carrier.ctypes.data,
                  "shape": list(arr.shape), "strides": list(arr.strides), "dtype": arr.dtype.str}
        if arr.dtype.fields is not None:  # a structured memmap: '|V16' alone would lose its fields
            record["dtype_fields"] = dtype_to_json(arr.dtype)
        if not writeable(arr):
            record["writeable"] = False
        if memmap and isinstance(root, np.memmap) and isinstance(root.filename, str):
            record["memmap"] = _memmap_source(root)
        elif self.copies_of.get(self.storages[skey]["fingerprint"]["value"]):
            record["memmap"] = self.copies_of[self.storages[skey]["fingerprint"]["value"]]
        self.arrays[key] = record
        return key

    def _buffer(self, root) -> str:
        ident = ("numpy", root.ctypes.data, root.nbytes)
        skey = self._storage_keys.get(ident)
        if skey is not None:
            self._use(skey)
            return skey
        skey = f"s{len(self.storages)}"
        dtype, shape = _numpy_layout(root)
        data = memory_view(root.ctypes.data, root.nbytes)
        record = {"kind": "numpy", "nbytes": root.nbytes, "dtype": dtype, "shape": shape,
                  "numpy_dtype": root.dtype.str, "numpy_shape": list(root.shape)}
        if root.dtype.fields is not None:
            record["numpy_dtype_fields"] = dtype_to_json(root.dtype)
        # no version counter in numpy: the hash decides what changed
        if root.nbytes >= CHUNKED:
            pieces = [data[i:i + CHUNK] for i in range(0, root.nbytes, CHUNK)]
            digests = self._chunk_digests(ident, pieces)
            record["chunks"] = [[digest, len(p)] for digest, p in zip(digests, pieces)]
            record["fingerprint"] = {"algorithm": CHUNKS_ALGORITHM, "value": _chunks_fingerprint(record["chunks"])}
            if not self.dry:
                self._write_chunks(record, pieces, ident)
        else:
            record["fingerprint"] = {"algorithm": "xxh3-128", "value": self._buffer_digest(ident, dtype, shape, data)}
            if not self.dry:
                self._write_buffer(skey, record, data, root, ident)
        self._storage_keys[ident] = skey
        self.storages[skey] = record
        self._use(skey)
        return skey

    def _on_torch_memory(self, root) -> bool:
        """Whether an array's memory is (or holds) a CPU tensor's (`t.numpy()`, `torch.from_numpy(a)`, also of
        a slice `a[2:4]`): then it goes in the array table, where link_shared_memory can tie the two together."""
        # Only tensors this save holds count: an array from a tensor no variable keeps (`torch.randn(3).numpy()`)
        # comes back inline, and verify then has to find it inline again, as it was saved.
        return bool(self._torch_memory) and self._torch_memory.overlap(root.ctypes.data, root.nbytes)

    def link_shared_memory(self) -> None:
        """After every variable: numpy buffers and CPU torch storages over one memory are restored so
        (shared_memory.py)."""
        spans = {"numpy": {}, "cpu": {}}
        for (kind, address, nbytes), skey in self._storage_keys.items():
            if kind in spans:
                spans[kind][skey] = (address, nbytes)
        if spans["numpy"] and spans["cpu"]:
            for skey, link in shared_memory.links(spans["numpy"], spans["cpu"]).items():
                self.storages[skey]["view_of"] = link

    def _copy_of(self, carrier) -> dict | None:
        """The checkpoint's memmap whose bytes a small in-memory buffer holds (see copies_of)."""
        dtype, shape = _numpy_layout(carrier)
        return self.copies_of.get(cpu_fingerprint(dtype, shape, memory_view(carrier.ctypes.data, carrier.nbytes)))

    def _chunk_digests(self, ident: tuple, pieces: list) -> list[str]:
        """Every chunk's digest, hashed at memory speed on two threads. After a cell, kernel undo hashes
        only the chunks with a page written since its last checkpoint, where the kernel can say
        (dirty_pages.py); a pause's save and verify hash every chunk."""
        if not self.reuse_digests:
            self.hashed += sum(len(p) for p in pieces)
            return list(_hash_pool.map(_chunk_digest, pieces))
        _, address, nbytes = ident
        known = _chunks_known.pop(ident, None)  # popped: a save cut short leaves nothing stale behind
        written = TRACKER.written(ident, address, nbytes, CHUNK) if known else None
        if written is None:
            TRACKER.track(ident, address, nbytes)  # before hashing: a write meanwhile shows next time
            digests = list(_hash_pool.map(_chunk_digest, pieces))
            changed = range(len(pieces))
        else:
            digests, changed = list(known), sorted(written)
            for index, digest in zip(changed, _hash_pool.map(_chunk_digest, [pieces[i] for i in changed])):
                digests[index] = digest
        self.hashed += sum(len(pieces[i]) for i in changed)
        if TRACKER.tracking(ident):
            _chunks_known[ident] = digests
        return digests

    def _buffer_digest(self, ident: tuple, dtype: str, shape: list, data) -> str:
        """A numpy buffer's digest. After a cell, kernel undo keeps that of a buffer of 1 MiB or more that no
        write reached since its last look (dirty_pages.py), as _chunk_digests does per chunk of a larger one:
        a namespace of many such arrays was hashed whole after every cell (800 arrays of 4 MB: 160 ms a cell)."""
        tracked = self.reuse_digests and len(data) >= PACK_LIMIT
        if tracked:
            _, address, nbytes = ident
            known = _buffers_known.pop(ident, None)  # popped: a save cut short leaves nothing stale behind
            written = TRACKER.written(ident, address, nbytes, nbytes) if known else None
            if written == set() and known[0] == (dtype, shape):
                _buffers_known[ident] = known
                return known[1]
            if written is None:
                TRACKER.track(ident, address, nbytes)  # before hashing: a write meanwhile shows next time
        value = cpu_fingerprint(dtype, shape, data)
        self.hashed += len(data)
        if tracked and TRACKER.tracking(ident):
            if len(_buffers_known) > 65536:  # freed arrays' leftovers: forgetting one costs a hash, never a wrong name
                _buffers_known.clear()
            _buffers_known[ident] = ((dtype, shape), value)
        return value

    def _write_buffer(self, skey, record, data, root, ident) -> None:
        dtype, shape, value = record["dtype"], record["shape"], record["fingerprint"]["value"]
        if root.nbytes >= PACK_LIMIT:
            if self.store.has_blob(value, "safetensors"):
                size = root.nbytes + len_header(dtype, shape)
                self._account(value, size, False)
                record.update(blob=value, name="t")
            else:
                digest, size, new = self.store.put_tensors([("t", dtype, shape, data)], self._progress_bytes,
                                                           position=ident, digest=value)
                self._account(digest, size, new)
                record.update(blob=digest, name="t")
                if digest != value:  # another thread wrote it after the hash: the copy is what was named
                    record["fingerprint"]["value"] = digest
                    _buffers_known.pop(ident, None)
        else:
            record["name"] = value[:32]
            self._pack_or_reuse(record, (skey, dtype, shape, data, root))
            self._progress_bytes(root.nbytes)  # as for a small torch storage

    def _pack_or_reuse(self, record: dict, entry: tuple) -> None:
        """A small storage whose bytes a pack holds (packed.py) refers to that pack, as an unchanged torch
        storage does (_torch_storage): only new bytes go into this save's packs. Packing every small storage
        again rewrote the packs of unchanged arrays whenever their company changed (a training step of a
        small model beside 40 MB of small arrays wrote 30-40 MB at every save). Otherwise it waits for
        flush_pack, as does one whose pack turns out mostly dead there."""
        known = packed.find(self.store.root, record["name"])
        present = None
        if known is not None:
            present = self._packs_present.get(known[0])
            if present is None:  # one look per pack and save, not one per storage
                present = self._packs_present[known[0]] = self.store.has_blob(known[0], "safetensors")
        if not present:  # never packed, or collected since: packed again
            self._pack.append(entry)
            return
        record.update(blob=known[0], blob_bytes=known[1])
        self._account(known[0], known[1], False)
        self._reused_packs.setdefault(known[0], []).append(entry)

    def _repack_mostly_dead_packs(self) -> None:
        """An earlier pack of which this checkpoint needs less than half: its entries go into this save's
        packs instead. Referring to it kept the whole pack alive for one entry, so that each save that changed
        some small arrays left its dead bytes behind for as long as any checkpoint needed the rest (a store
        of 39 MiB of small arrays held 137 MiB after every older checkpoint was deleted). The live part of
        what the checkpoint refers to stays above half, at the cost of rewriting what a pack still holds."""
        live: dict[str, dict[str, int]] = {}
        for record in self.storages.values():
            if record.get("blob") in self._reused_packs:
                live.setdefault(record["blob"], {})[record["name"]] = record["nbytes"]
        for blob, entries in self._reused_packs.items():
            if 2 * sum(live.get(blob, {}).values()) >= self.blobs.get(blob, 0):
                continue
            self._pack.extend(entries)
            for skey, *_ in entries:  # flush_pack names their new pack
                self.storages[skey].pop("blob", None)
            if not any(r.get("blob") == blob for r in self.storages.values()):
                self.blobs.pop(blob, None)  # nothing of this checkpoint refers to it any more
        self._reused_packs.clear()

    def _write_chunks(self, record, pieces, ident) -> None:
        """Write the chunks no earlier checkpoint (nor this one) has; account for all of them."""
        for index, ((digest, n), piece) in enumerate(zip(record["chunks"], pieces)):
            stored = self.store.has_blob(digest, "safetensors")
            if stored or self.store.blob_path(digest, "safetensors") in self.store.staged:
                self._account(digest, n + len_header("U8", [n]), False)
                continue
            written, size, new = self.store.put_tensors([("t", "U8", [n], piece)], self._progress_bytes,
                                                        position=ident + (index,), digest=digest)
            self._account(written, size, new)
            if written != digest:  # another thread wrote the chunk after it was hashed: name what was written
                record["chunks"][index][0] = written
                record["fingerprint"]["value"] = _chunks_fingerprint(record["chunks"])
                _chunks_known.pop(ident, None)

    # -- finishing ----------------------------------------------------------------------------------
    def flush_pack(self) -> None:
        """Write the small storages that no pack holds yet (_packed_before) as pack blobs, each named by its
        content so that it dedups. A storage's pack is chosen by its name (the hash of its bytes, crc32
        spreads it), out of as many packs (a power of two, at most 256) as keep each near PACK_TARGET: the
        same bytes make the same packs (a kernel that packs everything again, its first save since a start
        without a restore, finds them written)."""
        self._repack_mostly_dead_packs()
        if not self._pack:
            return
        entries = {}
        for i, (skey, dtype, shape, data, keep) in enumerate(self._pack):
            record = self.storages[skey]
            if record.get("device", "cpu") == "cpu":
                # Packed from a copy, named by the copy's hash: a thread (a training loop) may have written the
                # storage since it was hashed, and a pack entry named by the older bytes would be taken for
                # them by every later save (packed.py). A CUDA storage's bytes are a copy already.
                data = memoryview(bytes(data))
                value = cpu_fingerprint(dtype, shape, data)
                if value != record["fingerprint"]["value"]:
                    record.update(name=value[:32], fingerprint={"algorithm": "xxh3-128", "value": value})
                self._pack[i] = (skey, dtype, shape, data, keep)
            name = record["name"]
            entries.setdefault(name, (name, dtype, shape, data))
        total, packs = sum(e[3].nbytes for e in entries.values()), 1
        while packs < 256 and total > packs * PACK_TARGET:
            packs *= 2
        groups: dict[int, list] = {}
        for name in sorted(entries):
            groups.setdefault(zlib.crc32(name.encode()) % packs, []).append(entries[name])
        blob_of = {}
        for group in groups.values():
            digest, size, new = self.store.put_tensors(group)
            self._account(digest, size, new)
            for e in group:
                blob_of[e[0]] = (digest, size)
                packed.note(self.store.root, e[0], digest, size)
        for skey, *_ in self._pack:
            digest, size = blob_of[self.storages[skey]["name"]]
            self.storages[skey].update(blob=digest, blob_bytes=size)
        self._pack.clear()

    def remember(self) -> None:
        """After a committed save: note which tensors (by id) at which versions each torch storage had.
        A weak reference to a tensor would make torch.utils.swap_tensors refuse it (module.to() with
        swap_module_params_on_conversion, load_state_dict with swapping): the storage is referred to
        instead, for how long it lives. An id reused by another tensor costs a fingerprint, never a wrong
        blob: the bytes are proven (_same_bytes) and the layout compared before a blob is reused."""
        for ident, skey in self._storage_keys.items():
            record = self.storages[skey]
            if record["kind"] != "torch" or not self._seen.get(skey):
                continue
            _written[(self.store.root,) + ident] = {
                "blob": record["blob"], "name": record["name"], "fingerprint": record["fingerprint"],
                "blob_bytes": self.blobs[record["blob"]], "layout": (record["dtype"], record["shape"]),
                "storage": weakref.ref(self._seen[skey][0][0].untyped_storage()),
                "seen": [(id(t), version) for t, version in self._seen[skey]]}
        for key in [k for k, v in _written.items() if v["storage"]() is None]:
            del _written[key]

    def _account(self, digest: str, size: int, new: bool) -> None:
        self.blobs[digest] = size
        if new:
            self.bytes_written += size

    def _progress_bytes(self, n: int) -> None:
        if self.progress:
            self.progress(bytes_done=n)


def _without_lazy_dict(t: type, rv: tuple) -> tuple:
    """io.BytesIO, io.StringIO and functools.partial make their __dict__ the first time anyone reads it
    (`vars(buf)`, a debugger, IPython's `?`), and their state then ends in {} where it ended in None: verify
    called an unchanged buffer "changed". An empty one is no attribute at all: None, as before it was made."""
    if t.__module__ in ("_io", "functools") and len(rv) > 2 and isinstance(rv[2], tuple) and rv[2] \
            and isinstance(rv[2][-1], dict) and not rv[2][-1]:
        return rv[:2] + (rv[2][:-1] + (None,),) + rv[3:]
    return rv


def _state_set_directly(t: type, rv: tuple) -> tuple:
    """A class with a __getattr__ (a proxy: `return getattr(self.inner, name)`) and no __setstate__: unpickling
    looks for __setstate__ on the object before its attributes are set, so __getattr__ ran, read self.inner,
    which ran __getattr__ again: a RecursionError lost the variable at restore, after a save that said nothing.
    Its state goes in through set_plain_state (pickle's sixth element), which looks nothing up on the object."""
    if len(rv) < 3 or rv[2] is None or len(rv) > 5 and rv[5] is not None or rv[0] is not copyreg.__newobj__:
        return rv
    if getattr(t, "__setstate__", None) is not None or not any("__getattr__" in vars(c) for c in t.__mro__[:-1]):
        return rv
    state = rv[2]
    if not (isinstance(state, dict) or isinstance(state, tuple) and len(state) == 2):
        return rv
    return rv[:5] + (None,) * (5 - len(rv)) + (set_plain_state,)


def set_plain_state(obj, state) -> None:
    """What pickle does with a default state ({attributes} or ({attributes}, {slots})), minus the look-up of
    __setstate__ on the object."""
    slots = None
    if isinstance(state, tuple):
        state, slots = state
    if state:
        attributes = object.__getattribute__(obj, "__dict__")
        for key, value in state.items():
            attributes[sys.intern(key) if type(key) is str else key] = value
    for key, value in (slots or {}).items():
        setattr(obj, key, value)  # as pickle does: through the class's own __setattr__


def _hook_name(hook) -> str:
    return getattr(hook, "__qualname__", None) or type(hook).__qualname__


def _chunk_digest(piece: memoryview) -> str:
    return cpu_fingerprint("U8", [len(piece)], piece)


_hash_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gkews-hash")  # xxhash lets go of the GIL


class _SmallRoot:
    """The memory small arrays view, pickled once per save: arrays built on it (`x` and `x[2:5]`, in
    one variable or in several) view one aligned copy after a restore, as they viewed one root before."""

    def __init__(self, root):
        self.root, self.carrier = root, _carrier(root)

    def __reduce__(self):
        c = self.carrier
        return small_root, (c.tobytes(), c.dtype, tuple(c.shape))


def _root_of(arr):
    """The outermost array whose memory `arr` views, through `.base`: also through the wrapper object
    that `as_strided` and `sliding_window_view` put between a view and its array, when the view lies
    inside that array's memory."""
    root = arr
    while True:
        base = root.base
        if not isinstance(base, np.ndarray):
            inner = getattr(base, "base", None)
            if not (isinstance(inner, np.ndarray) and hasattr(base, "__array_interface__")):
                return root
            low, high = byte_bounds(root)
            inner_low, inner_high = byte_bounds(inner)
            if not inner_low <= low <= high <= inner_high:
                return root
            base = inner
        root = base


_NDARRAY_PICKLING = ("__reduce__", "__reduce_ex__", "__setstate__")


def _bytearray_of(root):
    """The bytearray or array.array whose memory an outermost array is (`np.frombuffer(buf)`), or None."""
    base = root.base
    return base.obj if isinstance(base, memoryview) and type(base.obj) in (bytearray, array.array) else None


def _carrier(root):
    """A C-contiguous array over exactly the memory `root` spans: what is stored as the buffer.

    A C-ordered root is its own carrier; a Fortran-ordered one is carried by its transpose; anything
    else (negative or zero strides, as_strided) by the bytes from its lowest to its highest address."""
    if root.flags.c_contiguous:
        return root
    if root.flags.f_contiguous:
        return root.T
    if 0 in root.shape:
        return np.empty(0, np.uint8)
    low, high = _strided_span(root.shape, root.strides)
    start = root.ctypes.data + low
    return np.frombuffer(memory_view(start, high - low + root.itemsize), dtype=np.uint8)


def _strided_span(shape, strides) -> tuple[int, int]:
    """The lowest and highest byte offsets of an element start, from the first element's (strides in
    bytes; a negative one reaches below it)."""
    return (sum(min(0, (n - 1) * st) for n, st in zip(shape, strides)),
            sum(max(0, (n - 1) * st) for n, st in zip(shape, strides)))


def _nbytes(obj) -> int:
    return obj.nbytes if hasattr(obj, "ctypes") else obj.numel() * obj.element_size()


def _extent(obj) -> tuple[int, int]:
    """The bytes [first, last + 1) of its storage a tensor or array reaches (its strides may skip some)."""
    if hasattr(obj, "ctypes"):  # numpy: strides in bytes, from its carrier's start
        carrier = _carrier(_root_of(obj))
        start, size, steps = obj.ctypes.data - carrier.ctypes.data, obj.itemsize, obj.strides
    else:
        size = obj.element_size()
        start, steps = obj.storage_offset() * size, [st * size for st in obj.stride()]
    if 0 in obj.shape:
        return start, start
    low, high = _strided_span(obj.shape, steps)
    return start + low, start + high + size


def _covers(extents: list, nbytes: int) -> bool:
    reach = 0
    for low, high in sorted(extents):
        if low > reach:
            return False
        reach = max(reach, high)
    return reach >= nbytes


def _view_fingerprint(obj, algorithm: str | None) -> dict:
    """A view's own bytes, in C order, fingerprinted where they are (on the GPU for CUDA)."""
    if hasattr(obj, "ctypes"):
        data = np.ascontiguousarray(obj)
        return {"algorithm": "xxh3-128",
                "value": cpu_fingerprint(data.dtype.str, data.shape, memory_view(data.ctypes.data, data.nbytes))}
    import torch
    copy = obj.detach().clone(memory_format=torch.contiguous_format)
    return storage_fingerprint(copy.untyped_storage(), str(copy.dtype), list(copy.shape), algorithm)


def _numpy_layout(root) -> tuple[str, list]:
    """How a numpy buffer is described in safetensors: by its dtype where safetensors has it, else bytes."""
    dtype = NUMPY_DTYPES.get(f"{root.dtype.kind}{root.dtype.itemsize}")
    return (dtype, list(root.shape)) if dtype else ("U8", [root.nbytes])


def _memmap_source(root) -> dict:
    """Where an np.memmap's data lives in its file, and the digest of that region (a restore maps the file
    again only when the region still holds it). Only the region is read, never the whole file. When the
    file no longer holds what the mapping shows (deleted, replaced by a rename, truncated), the data is
    only in memory: the record says why, and the array comes back as an in-memory copy of the saved bytes.
    Copy-on-write ('c') mappings may differ from their file by design; their file region is recorded."""
    from .hashing import file_blocks, new_hasher
    path = os.path.abspath(root.filename)
    source = {"path": path, "mode": root.mode, "file_offset": root.offset, "region": root.nbytes}
    mapped = np.frombuffer(memory_view(root.ctypes.data, root.nbytes), dtype=np.uint8)
    hasher, done = new_hasher(), 0
    try:
        with open(path, "rb") as f:
            f.seek(root.offset)
            for block in file_blocks(f, root.nbytes):
                here = mapped[done:done + len(block)]
                if root.mode != "c" and not np.array_equal(np.frombuffer(block, np.uint8), here):
                    return {**source, "detached": "its file no longer holds the mapped data (replaced?)"}
                hasher.update(block)
                done += len(block)
    except OSError as exc:
        return {**source, "detached": f"its file cannot be read ({exc.strerror or exc})"}
    if done < root.nbytes:
        return {**source, "detached": "its file is shorter than the mapping now"}
    return {**source, "digest": hasher.hexdigest()}


def len_header(dtype, shape) -> int:
    from .safetensors_io import build_header
    return len(build_header([("t", dtype, shape, 0)]))


def _layout(nbytes: int, t, st_dtype) -> tuple[str, list]:
    """How a storage is described in safetensors: as its tensor when that tensor covers it exactly."""
    if st_dtype and t is not None:
        item = t.element_size()
        if t.storage_offset() == 0 and t.is_contiguous() and t.numel() * item == nbytes:
            return st_dtype, list(t.shape)
        if nbytes % item == 0:
            return st_dtype, [nbytes // item]
    return "U8", [nbytes]


def _kind(value) -> str:
    torch = _torch()
    if torch is not None:
        if isinstance(value, torch.Tensor):
            return "tensor"
        if isinstance(value, torch.nn.Module):
            return "torch-module"
        if isinstance(value, torch.optim.Optimizer):
            return "optimizer"
    if np is not None and isinstance(value, np.ndarray):
        return "ndarray"
    if isinstance(value, type):
        return "class"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return "function"
    return "object"


def _describe(value) -> dict:
    """What the listing shows of a variable (dtype, shape, device); nothing for a value that cannot say,
    and only what the manifest (JSON) can hold."""
    try:
        description = _description(value)
        json.dumps(description)
        return description
    except Exception:  # a strided nested tensor has no single shape
        return {}


def _size(shape) -> list:
    """A shape for the manifest: a jagged nested tensor's ragged dimension is a SymInt (`j1`), no int."""
    return [n if isinstance(n, int) else str(n) for n in shape]


def _description(value) -> dict:
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype)[6:], "shape": _size(value.shape), "device": str(value.device)}
    if torch is not None and isinstance(value, torch.nn.Module):
        params = list(value.parameters())
        return {"parameters": sum(p.numel() for p in params),
                "device": str(params[0].device) if params else "cpu"}
    if np is not None and isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "shape": list(value.shape)}
    return {}
