"""Bringing a checkpoint back into a namespace.

Every blob a variable needs is read and checked against its hash before that variable's pickle is
touched; a damaged blob fails only the variables that use it, by name. Tensors go back to the device
they were saved from when it exists here, otherwise to the CPU with a warning.
"""
from __future__ import annotations

import importlib
import io
import mmap
import pickle
import time
from concurrent.futures import Future, ThreadPoolExecutor

import dill

from . import cuda_io
from .errors import CheckpointError, CorruptBlob
from .safetensors_io import read_blob

try:
    import numpy as np
except ImportError:
    np = None


_prefetch_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gkews-read")


class DependencyFailed(CheckpointError):
    pass


class _Hooks:
    restorer: "Restorer"

    def persistent_load(self, pid):
        return self.restorer.resolve(pid)


class FastUnpickler(_Hooks, pickle.Unpickler):
    pass


class DillUnpickler(_Hooks, dill.Unpickler):
    pass


UNPICKLERS = {"pickle": FastUnpickler, "dill": DillUnpickler}


class Restorer:
    def __init__(self, store, manifest: dict, device: str | None = None):
        self.store, self.manifest, self.device = store, manifest, device
        self.values: dict = {}
        self.failed: dict[str, str] = {}
        self.warnings: list[str] = []
        self._blobs: dict = {}
        self._storages: dict = {}
        self._tensors: dict = {}
        self._arrays: dict = {}
        self._regions: set = set()
        self._assembled: dict = {}
        self._loading: set[str] = set()
        self._cuda_warned = False

    # -- blobs --------------------------------------------------------------------------------------
    def prefetch(self, digests) -> None:
        """Start reading blobs in the background, two at a time, so one file's hashing overlaps the next's I/O."""
        for digest in digests:
            if digest not in self._blobs:
                self._blobs[digest] = _prefetch_pool.submit(
                    read_blob, self.store.blob_path(digest, "safetensors"), digest)

    def blob(self, digest: str):
        self.prefetch([digest])
        cached = self._blobs[digest]
        if isinstance(cached, Future):
            try:
                cached = cached.result()
            except CorruptBlob as exc:
                cached = exc
            except OSError as exc:
                cached = CorruptBlob(f"blob {digest[:12]} cannot be read: {exc}")
            self._blobs[digest] = cached
        if isinstance(cached, Exception):
            raise cached
        return cached

    def _assemble(self, skey: str):
        """A chunked storage: every chunk read (two at a time) straight into one buffer, each checked
        against its hash; the buffer is dropped if any chunk is damaged."""
        cached = self._assembled.get(skey)
        if cached is None:
            record = self.manifest["storages"][skey]
            chunks = record["chunks"]
            if sum(n for _digest, n in chunks) != record["nbytes"]:
                cached = CorruptBlob(f"storage {skey}: its chunks do not add up to {record['nbytes']} bytes")
            else:
                buf = mmap.mmap(-1, max(record["nbytes"], 1))
                view = memoryview(buf)
                starts = [sum(n for _d, n in chunks[:i]) for i in range(len(chunks))]

                def read(i):
                    digest, n = chunks[i]
                    try:
                        read_blob(self.store.blob_path(digest, "safetensors"), digest, view[starts[i]:starts[i] + n])
                    except OSError as exc:
                        raise CorruptBlob(f"blob {digest[:12]} cannot be read: {exc}") from None
                try:
                    list(_prefetch_pool.map(read, range(len(chunks))))
                    cached = buf
                except CorruptBlob as exc:
                    cached = exc
                finally:
                    view.release()
            self._assembled[skey] = cached
        if isinstance(cached, Exception):
            raise cached
        return cached

    def pickle_bytes(self, digest: str) -> bytes:
        from .hashing import digest_bytes
        path = self.store.blob_path(digest, "pkl")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CorruptBlob(f"blob {digest[:12]} is missing from the checkpoint store ({path})") from None
        if digest_bytes(data) != digest:
            raise CorruptBlob(f"blob {digest[:12]} does not match its hash: the file {path} was modified or damaged")
        return data

    # -- variables ----------------------------------------------------------------------------------
    def variable(self, name: str):
        if name in self.values:
            return self.values[name]
        if name in self.failed:
            raise DependencyFailed(f"it refers to variable {name!r}, which could not be restored")
        if name in self._loading:
            raise DependencyFailed(f"variable {name!r} refers back to itself through other variables")
        record = self.manifest["variables"][name]
        self._loading.add(name)
        try:
            streamed = [k for k in record.get("storages", []) if self._streamed(k)]
            storages = [self.manifest["storages"][k] for k in record.get("storages", []) if k not in streamed]
            digests = [s["blob"] for s in storages if "chunks" not in s]
            self.prefetch(digests)
            for digest in digests:  # every blob checked against its hash before anything is unpickled
                self.blob(digest)
            for skey in streamed:  # read, hashed and copied to the device through pinned buffers
                self._storage(skey)
            for skey in record.get("storages", []):
                if "chunks" in self.manifest["storages"][skey]:
                    self._assemble(skey)
            data = self.pickle_bytes(record["pickle"])
            unpickler = UNPICKLERS[record.get("pickler", "pickle")](io.BytesIO(data))
            unpickler.restorer = self
            value = unpickler.load()
        finally:
            self._loading.discard(name)
        self.values[name] = value
        return value

    def resolve(self, pid):
        kind = pid[0]
        if kind == "var":
            return self.variable(pid[1])
        if kind == "tensor":
            return self._tensor(pid[1])
        if kind == "array":
            return self._array(pid[1])
        if kind == "storage":
            import torch
            ust = self._storage(pid[1])
            if pid[2] is None:
                return ust
            return torch.storage.TypedStorage(wrap_storage=ust, dtype=getattr(torch, pid[2]), _internal=True)
        raise pickle.UnpicklingError(f"unknown reference {kind!r} in the checkpoint")

    # -- storages, tensors, arrays ------------------------------------------------------------------
    def _raw(self, skey: str):
        record = self.manifest["storages"][skey]
        if "chunks" in record:
            return record, self._assemble(skey), 0, record["nbytes"]
        buf, entries = self.blob(record["blob"])
        if record["name"] not in entries:
            raise CorruptBlob(f"blob {record['blob'][:12]} lacks tensor {record['name']!r}")
        _dtype, _shape, begin, end = entries[record["name"]]
        if end - begin != record["nbytes"]:
            raise CorruptBlob(f"blob {record['blob'][:12]}: tensor {record['name']!r} has {end - begin} bytes, "
                              f"the manifest expects {record['nbytes']}")
        region = (record["blob"], record["name"])
        if region in self._regions:
            # equal contents were stored once; distinct storages must not share memory again
            buf, begin, end = bytearray(memoryview(buf)[begin:end]), 0, end - begin
        self._regions.add(region)
        return record, buf, begin, end

    def _storage(self, skey: str):
        if skey in self._storages:
            return self._storages[skey]
        import torch
        if self._streamed(skey):
            record = self.manifest["storages"][skey]
            ust = self._storages[skey] = cuda_io.load_storage(self.store, record, self._target(record["device"], torch))
            return ust
        record, buf, begin, end = self._raw(skey)
        if end > begin:
            ust = torch.frombuffer(buf, dtype=torch.uint8, offset=begin, count=end - begin).untyped_storage()
        else:
            ust = torch.UntypedStorage(0)
        target = self._target(record["device"], torch)
        if target != "cpu":
            ust = ust.to(device=target) if hasattr(ust, "to") else ust.cuda(torch.device(target).index)
        self._storages[skey] = ust
        return ust

    def _streamed(self, skey: str) -> bool:
        record = self.manifest["storages"][skey]
        if record.get("kind") != "torch":
            return False
        import torch
        return cuda_io.streams(record, self._target(record["device"], torch))

    def _target(self, saved: str, torch) -> str:
        if self.device == "cpu" or saved == "cpu":
            return "cpu"
        if self.device and self.device.startswith("cuda"):
            return self.device if ":" in self.device else "cuda:0" if saved == "cpu" else saved
        kind = saved.split(":")[0]
        if kind == "cuda" and torch.cuda.is_available():
            index = int(saved.split(":")[1]) if ":" in saved else 0
            if index < torch.cuda.device_count():
                return saved
            self.warnings.append(f"tensors saved on {saved} go to cuda:0: this machine has "
                                 f"{torch.cuda.device_count()} GPU(s)")
            return "cuda:0"
        if not self._cuda_warned:
            self._cuda_warned = True
            self.warnings.append(f"tensors saved on {saved} were restored to the CPU: no {kind} device is "
                                 f"available in this kernel")
        return "cpu"

    def _tensor(self, key: str):
        if key in self._tensors:
            return self._tensors[key]
        import torch
        record = self.manifest["tensors"][key]
        ust = self._storage(record["storage"])
        t = torch.empty(0, dtype=getattr(torch, record["dtype"]), device=ust.device)
        t.set_(ust, record["offset"], record["shape"], record["stride"])
        if record["parameter"]:
            t = torch.nn.Parameter(t, requires_grad=record["requires_grad"])
        elif record["requires_grad"]:
            t.requires_grad_(True)
        self._tensors[key] = t
        if "grad" in record:
            t.grad = self._tensor(record["grad"])
        return t

    def _array(self, key: str):
        if key in self._arrays:
            return self._arrays[key]
        record = self.manifest["arrays"][key]
        skey = record["buffer"]
        if skey not in self._storages:
            _srec, buf, begin, end = self._raw(skey)
            self._storages[skey] = np.frombuffer(buf, dtype=np.uint8, count=end - begin, offset=begin)
        raw = self._storages[skey]
        arr = np.ndarray(tuple(record["shape"]), dtype=np.dtype(record["dtype"]), buffer=raw,
                         offset=record["offset"], strides=tuple(record["strides"]))
        self._arrays[key] = arr
        return arr


def restore_namespace(namespace: dict, store, manifest: dict, *, names=None, device=None) -> dict:
    """Put the checkpoint's variables (or `names`) into `namespace`; report what came back and what did not."""
    started = time.perf_counter()
    restorer = Restorer(store, manifest, device)
    wanted = list(names) if names else None
    restored, failed = [], {}
    for alias, module in manifest["modules"].items():
        if wanted and alias not in wanted:
            continue
        try:
            namespace[alias] = importlib.import_module(module)
            restored.append(alias)
        except ImportError as exc:
            failed[alias] = f"module {module} cannot be imported here ({exc}); install it and restore again"
    for name in manifest["variables"]:
        if wanted and name not in wanted:
            continue
        try:
            namespace[name] = restorer.variable(name)
            restored.append(name)
        except Exception as exc:  # each variable fails alone, with its reason
            restorer.failed[name] = reason = f"{type(exc).__name__}: {exc}" if not isinstance(
                exc, CheckpointError) else str(exc)
            failed[name] = reason
    skipped = {n: s for n, s in manifest["skipped"].items() if not wanted or n in wanted}
    if wanted:
        known = set(manifest["variables"]) | set(manifest["modules"]) | set(manifest["skipped"])
        for name in wanted:
            if name not in known:
                failed[name] = f"checkpoint {manifest['id']} has no variable {name!r}"
    return {"checkpoint": manifest["id"], "created": manifest.get("created"), "restored": restored,
            "failed": failed, "skipped_at_save": skipped, "warnings": restorer.warnings,
            "seconds": round(time.perf_counter() - started, 4)}
