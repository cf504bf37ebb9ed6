"""Capturing variables: one pickle per variable, every tensor and large array as safetensors data.

Each variable is pickled on its own, so one that cannot be pickled is skipped with its reason and costs
nothing else. Three kinds of object never enter a pickle; the pickle holds a reference instead:
- torch tensors (and Parameters): a row in the checkpoint's tensor table (storage, offset, shape,
  stride, dtype, requires_grad); storages go to safetensors blobs, so views and tied weights share one;
- numpy arrays of 64 KiB or more: a row in the array table, as an offset and strides into the
  outermost array that owns the memory, so a view stays a view of its base;
- a value that is itself another saved variable: ("var", name), so that an optimizer, a model and a
  class keep their identity across variables.
Functions and classes defined in the notebook go by value through dill; everything else through the
standard pickler, falling back to dill for what only dill can handle.
"""
from __future__ import annotations

import io
import pickle
import sys
import threading
import types
import weakref

import dill

from . import cuda_io
from .errors import CheckpointWriteError
from .fingerprint import cpu_fingerprint, memory_view, storage_fingerprint
from .hashing import digest_bytes

try:
    import numpy as np
except ImportError:  # numpy is a dependency, but kernel_state must not die without it
    np = None

SMALL_ARRAY = 64 << 10   # numpy arrays below this (and not views of larger ones) are pickled inline
PACK_LIMIT = 1 << 20     # storages below this share one blob per checkpoint
CHUNKED = 32 << 20       # numpy buffers from this size on are stored as chunks, each a blob of its own,
CHUNK = 8 << 20          # so that an in-place change to a slice rewrites one chunk, not the whole array
CHUNKS_ALGORITHM = "xxh3-128-chunks"
PROTOCOL = 5
_PLAIN = (int, float, str, bytes, bool, type(None), complex)

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


def _torch():
    return sys.modules.get("torch")  # no tensors can exist unless the user imported torch


def defined_interactively(obj) -> bool:
    return getattr(obj, "__module__", None) in ("__main__", None)


def type_name(value) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ in ("builtins", "__main__") else f"{t.__module__}.{t.__qualname__}"


class _Hooks:
    capture: "Capture"

    def persistent_id(self, obj):
        return self.capture.reference(obj)


class FastPickler(_Hooks, pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, (types.FunctionType, type)) and defined_interactively(obj):
            return dill.loads, (dill.dumps(obj, protocol=PROTOCOL),)
        return NotImplemented


class DillPickler(_Hooks, dill.Pickler):
    pass


PICKLERS = {"pickle": FastPickler, "dill": DillPickler}


class VariableSkipped(Exception):
    pass


class Capture:
    """Turns live objects into blobs and tables. With dry=True it writes nothing and only fingerprints,
    which is how verify() re-derives what a checkpoint would say about the live state."""

    def __init__(self, store=None, *, dry: bool = False, progress=None, algorithms: dict | None = None):
        self.store, self.dry, self.progress = store, dry, progress
        self.algorithms = algorithms or {}
        self.tensors: dict[str, dict] = {}
        self.arrays: dict[str, dict] = {}
        self.storages: dict[str, dict] = {}
        self.variables: dict[str, dict] = {}
        self.blobs: dict[str, int] = {}
        self.bytes_written = 0
        self.var_ids: dict[int, str] = {}
        self.saved_vars: set[str] = set()
        self._tensor_keys: dict[int, str] = {}
        self._array_keys: dict[int, str] = {}
        self._storage_keys: dict[tuple, str] = {}
        self._seen: dict[str, list] = {}
        self._keep: list = []
        self._pack: list = []
        self._current: str | None = None
        self._var_storages: list[str] = []

    # -- per variable -------------------------------------------------------------------------------
    def add_variable(self, name: str, value, picklers=("pickle", "dill")) -> dict:
        self._current = name
        errors = []
        for kind in picklers:
            self._var_storages = []
            buf = io.BytesIO()
            try:
                pickler = PICKLERS[kind](buf, protocol=PROTOCOL)
                pickler.capture = self
                pickler.dump(value)
            except CheckpointWriteError:
                raise
            except Exception as exc:  # anything a pickler raises means: this variable cannot be saved
                errors.append(exc)
                continue
            data = buf.getvalue()
            if self.dry:
                digest = digest_bytes(data)
            else:
                digest, size, new = self.store.put_bytes(data)
                self._account(digest, size, new)
            record = {"kind": _kind(value), "type": type_name(value), "pickler": kind, "pickle": digest,
                      "bytes": len(data) + sum(self.storages[s]["nbytes"] for s in self._var_storages),
                      "storages": list(self._var_storages)}
            record.update(_describe(value))
            self.variables[name] = record
            self.saved_vars.add(name)
            return record
        exc = errors[0]
        raise VariableSkipped(f"{type(exc).__name__}: {str(exc)[:300]}")

    # -- the pickler hook ---------------------------------------------------------------------------
    def reference(self, obj):
        if isinstance(obj, _PLAIN):
            return None
        name = self.var_ids.get(id(obj))
        if name is not None and name != self._current and name in self.saved_vars:
            return ("var", name)
        torch = _torch()
        if torch is not None:
            if isinstance(obj, torch.Tensor):
                key = self._tensor(obj, torch)
                return None if key is None else ("tensor", key)
            if isinstance(obj, torch.storage.TypedStorage):
                skey = self._storage(obj._untyped_storage, None, TORCH_DTYPES.get(str(obj.dtype)[6:]))
                return ("storage", skey, str(obj.dtype)[6:])
            if isinstance(obj, torch.UntypedStorage):
                return ("storage", self._storage(obj, None, None), None)
        if np is not None and type(obj) is np.ndarray:
            key = self._array(obj)
            return None if key is None else ("array", key)
        if isinstance(obj, threading.Thread) and obj.is_alive():
            # dill would save the Thread object, but never the running code: it would come back dead
            raise TypeError(f"cannot pickle a running thread ({obj.name}): its stack lives only in this process")
        return None

    def _use(self, skey: str) -> None:
        if skey not in self._var_storages:
            self._var_storages.append(skey)

    # -- torch --------------------------------------------------------------------------------------
    def _tensor(self, t, torch) -> str | None:
        if (type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided or t.is_quantized
                or t.is_nested or t.device.type == "meta"):
            return None  # torch's own reduction handles these; their storages still come back here
        key = self._tensor_keys.get(id(t))
        if key is not None:
            self._use(self.tensors[key]["storage"])
            return key
        dtype = str(t.dtype)[6:]
        skey = self._storage(t.untyped_storage(), t, TORCH_DTYPES.get(dtype))
        key = f"t{len(self._tensor_keys)}"
        self._tensor_keys[id(t)] = key
        self._keep.append(t)
        record = {"storage": skey, "offset": t.storage_offset(), "shape": list(t.shape),
                  "stride": list(t.stride()), "dtype": dtype,
                  "requires_grad": bool(t.requires_grad and t.is_leaf),
                  "parameter": isinstance(t, torch.nn.Parameter)}
        self.tensors[key] = record
        if t.is_leaf and t.grad is not None:
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
            self._storage_keys[ident] = skey
            self.storages[skey] = record
            self._seen[skey] = []
            if t is not None:
                self._seen[skey].append((t, t._version))
        elif t is not None:
            self._seen[skey].append((t, t._version))
        self._use(skey)
        return skey

    def _torch_storage(self, skey, ident, ust, t, st_dtype) -> dict:
        device, _ptr, nbytes = ident
        dtype, shape = _layout(nbytes, t, st_dtype)
        record = {"kind": "torch", "nbytes": nbytes, "device": device, "dtype": dtype, "shape": shape}
        if self.dry:
            record["fingerprint"] = storage_fingerprint(ust, dtype, shape, self.algorithms.get(skey))
            return record
        previous = _written.get((self.store.root,) + ident)
        if (previous and t is not None and self.store.has_blob(previous["blob"], "safetensors")
                and any(ref() is t and version == t._version for ref, version in previous["seen"])):
            record.update({k: previous[k] for k in ("blob", "name", "fingerprint")})
            self._account(previous["blob"], previous["blob_bytes"], False)
            return record
        data = cuda_io.source_for(ust) if nbytes >= PACK_LIMIT else None  # via pinned buffers
        if data is None:
            cpu = ust if ust.device.type == "cpu" else ust.cpu()
            data = memory_view(cpu.data_ptr(), nbytes)
        if ust.device.type == "cpu":
            fingerprint = None
        else:
            fingerprint = storage_fingerprint(ust, dtype, shape)
        if nbytes >= PACK_LIMIT:
            digest, size, new = self.store.put_tensors([("t", dtype, shape, data)], self._progress_bytes)
            self._account(digest, size, new)
            record.update(blob=digest, name="t", blob_bytes=size,
                          fingerprint=fingerprint or {"algorithm": "xxh3-128", "value": digest})
        else:
            value = cpu_fingerprint(dtype, shape, data)
            record.update(name=value[:32], fingerprint=fingerprint or {"algorithm": "xxh3-128", "value": value})
            self._pack.append((skey, dtype, shape, data, cpu))
        return record

    # -- numpy --------------------------------------------------------------------------------------
    def _array(self, arr) -> str | None:
        if arr.dtype.hasobject or arr.dtype.fields is not None or not arr.dtype.isnative:
            return None
        key = self._array_keys.get(id(arr))
        if key is not None:
            self._use(self.arrays[key]["buffer"])
            return key
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.nbytes < SMALL_ARRAY:  # small and not a view of anything large: inline is cheaper
            return None
        if not root.flags.c_contiguous:
            root = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
        key = f"a{len(self._array_keys)}"
        self._array_keys[id(arr)] = key
        self._keep.extend((arr, root))
        skey = self._buffer(root)
        self.arrays[key] = {"buffer": skey, "offset": arr.ctypes.data - root.ctypes.data,
                            "shape": list(arr.shape), "strides": list(arr.strides), "dtype": arr.dtype.str}
        return key

    def _buffer(self, root) -> str:
        ident = ("numpy", root.ctypes.data, root.nbytes)
        skey = self._storage_keys.get(ident)
        if skey is not None:
            self._use(skey)
            return skey
        skey = f"s{len(self.storages)}"
        dtype = NUMPY_DTYPES.get(f"{root.dtype.kind}{root.dtype.itemsize}")
        shape = list(root.shape) if dtype else [root.nbytes]
        dtype = dtype or "U8"
        data = memory_view(root.ctypes.data, root.nbytes)
        record = {"kind": "numpy", "nbytes": root.nbytes, "dtype": dtype, "shape": shape,
                  "numpy_dtype": root.dtype.str}
        # no version counter in numpy: the hash decides what changed
        if root.nbytes >= CHUNKED:
            pieces = [data[i:i + CHUNK] for i in range(0, root.nbytes, CHUNK)]
            record["chunks"] = [[cpu_fingerprint("U8", [len(p)], p), len(p)] for p in pieces]
            joined = ",".join(digest for digest, _n in record["chunks"]).encode()
            record["fingerprint"] = {"algorithm": CHUNKS_ALGORITHM, "value": digest_bytes(joined)}
            if not self.dry:
                self._write_chunks(record, pieces)
        else:
            record["fingerprint"] = {"algorithm": "xxh3-128", "value": cpu_fingerprint(dtype, shape, data)}
            if not self.dry:
                self._write_buffer(skey, record, data, root)
        self._storage_keys[ident] = skey
        self.storages[skey] = record
        self._use(skey)
        return skey

    def _write_buffer(self, skey, record, data, root) -> None:
        dtype, shape, value = record["dtype"], record["shape"], record["fingerprint"]["value"]
        if root.nbytes >= PACK_LIMIT:
            if self.store.has_blob(value, "safetensors"):
                size = root.nbytes + len_header(dtype, shape)
                self._account(value, size, False)
                record.update(blob=value, name="t")
            else:
                digest, size, new = self.store.put_tensors([("t", dtype, shape, data)], self._progress_bytes)
                self._account(digest, size, new)
                record.update(blob=digest, name="t")
        else:
            record["name"] = value[:32]
            self._pack.append((skey, dtype, shape, data, root))

    def _write_chunks(self, record, pieces) -> None:
        """Write the chunks no earlier checkpoint (nor this one) has; account for all of them."""
        for (digest, n), piece in zip(record["chunks"], pieces):
            stored = self.store.has_blob(digest, "safetensors")
            if stored or self.store.blob_path(digest, "safetensors") in self.store.staged:
                self._account(digest, n + len_header("U8", [n]), False)
                continue
            written, size, new = self.store.put_tensors([("t", "U8", [n], piece)], self._progress_bytes)
            self._account(written, size, new)

    # -- finishing ----------------------------------------------------------------------------------
    def flush_pack(self) -> None:
        """Write all small storages of this checkpoint as one blob, named by content so it dedups."""
        if not self._pack:
            return
        entries = {}
        for skey, dtype, shape, data, _keep in self._pack:
            name = self.storages[skey]["name"]
            entries.setdefault(name, (name, dtype, shape, data))
        digest, size, new = self.store.put_tensors(sorted(entries.values(), key=lambda e: e[0]))
        self._account(digest, size, new)
        for skey, *_ in self._pack:
            self.storages[skey].update(blob=digest, blob_bytes=size)
        self._pack.clear()

    def remember(self) -> None:
        """After a committed save: note which tensor objects and versions each torch storage had."""
        for ident, skey in self._storage_keys.items():
            record = self.storages[skey]
            if record["kind"] != "torch" or not self._seen.get(skey):
                continue
            _written[(self.store.root,) + ident] = {
                "blob": record["blob"], "name": record["name"], "fingerprint": record["fingerprint"],
                "blob_bytes": self.blobs[record["blob"]],
                "seen": [(weakref.ref(t), version) for t, version in self._seen[skey]]}
        for key in [k for k, v in _written.items() if all(ref() is None for ref, _ in v["seen"])]:
            del _written[key]

    def _account(self, digest: str, size: int, new: bool) -> None:
        self.blobs[digest] = size
        if new:
            self.bytes_written += size

    def _progress_bytes(self, n: int) -> None:
        if self.progress:
            self.progress(bytes_done=n)


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
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype)[6:], "shape": list(value.shape), "device": str(value.device)}
    if torch is not None and isinstance(value, torch.nn.Module):
        params = list(value.parameters())
        return {"parameters": sum(p.numel() for p in params),
                "device": str(params[0].device) if params else "cpu"}
    if np is not None and isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "shape": list(value.shape)}
    return {}
