"""Bringing a checkpoint back into a namespace.

Every blob a variable needs is read and checked against its hash before that variable's pickle is
touched; a damaged blob fails only the variables that use it, by name. Tensors go back to the device
they were saved from when it exists here, otherwise to the CPU with a warning.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
import sys
import time
import types
from concurrent.futures import Future, ThreadPoolExecutor

import dill

from . import byvalue, cuda_io, module_sources, packed, pandas_cow, resources, set_order, torch_modules
from . import settings as process_settings
from .alignment import address, aligned_copy, is_aligned, private_memory
from .capture import NAMED_NANS
from .dtype_json import array_dtype
from .errors import CheckpointError, CorruptBlob
from .fingerprint import cpu_fingerprint
from .identity import TOKEN
from .interrupts import held_off
from .safetensors_io import read_blob
from .shared_memory import tensor_memory

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

    def find_class(self, module, name):
        found = _REBUILT.get((module, name)) or super().find_class(module, name)
        refuse_outside_call(module, name, found)
        return found


class FastUnpickler(_Hooks, pickle.Unpickler):
    pass


class DillUnpickler(_Hooks, dill.Unpickler):
    pass


def refuse_outside_call(module: str, name: str, found) -> None:
    """A pickle naming what opens, writes or deletes files (resources.outside_call): refused where it names it,
    before anything is called (a checkpoint of this version never holds one; an older or a hand-made one may)."""
    if resources.outside_call(module, name, found):
        raise pickle.UnpicklingError(f"its pickle names {resources.outside_call_reason(module, name)}; re-run the "
                                     f"cell that made it")


# a notebook class is rebuilt without running its notebook hooks again (byvalue.create_type)
_REBUILT = {("dill._dill", "_create_type"): byvalue.create_type, ("types", "new_class"): byvalue.new_class}


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
        self._memos: dict[str, dict] = {}
        self._sets: dict[tuple, set] = {}  # ("set", variable, number) references -> the set restored
        self._cells: dict[int, object] = {}  # closure cells of notebook functions, by number (byvalue.CELLS)
        self._mapped: dict = {}
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

    def _blob_of(self, record: dict):
        """The (buffer, entries) holding a storage: its blob checked by its hash, or, for an entry of a pack
        whose hash fails, the entry checked by its own (the hash of its bytes names it): a flipped byte in one
        small tensor lost every variable with a tensor in that pack, a whole model of small layers with it."""
        try:
            return self.blob(record["blob"])
        except CorruptBlob as exc:
            if exc.salvage is None or record["name"] == "t":
                raise
            buf, entries = exc.salvage
            found = entries.get(record["name"])
            if found is not None:
                dtype, shape, begin, end = found
                if cpu_fingerprint(dtype, shape, memoryview(buf)[begin:end])[:32] == record["name"]:
                    return buf, entries
            raise CorruptBlob(f"{exc}; the entry of this variable's tensor {record['name'][:12]} in it is damaged "
                              f"(the pack's other entries check by their own hashes)") from None

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
                buf = private_memory(record["nbytes"])
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
            storages = [self.manifest["storages"][k] for k in record.get("storages", []) if k not in streamed
                        and "view_of" not in self.manifest["storages"][k]]  # built on another's memory
            stored = [s for s in storages if "chunks" not in s]
            self.prefetch([s["blob"] for s in stored])
            for storage in stored:  # every blob (or pack entry) checked by its hash before anything is unpickled
                self._blob_of(storage)
            for skey in streamed:  # read, hashed and copied to the device through pinned buffers
                self._storage(skey)
            for skey in record.get("storages", []):
                if "chunks" in self.manifest["storages"][skey]:
                    self._assemble(skey)
            data = self.pickle_bytes(record["pickle"])
            unpickler = self._unpickler(record.get("pickler", "pickle"), data)
            token = byvalue.LOADER.set(lambda nested: self._unpickler("dill", nested).load())
            cells = byvalue.CELLS.set(self._cells)
            try:
                value = unpickler.load()
            finally:
                byvalue.CELLS.reset(cells)
                byvalue.LOADER.reset(token)
            if record.get("shared"):  # later variables refer to objects inside this one
                memo = unpickler.memo
                self._memos[name] = memo.copy() if hasattr(memo, "copy") else dict(memo)
        finally:
            self._loading.discard(name)
        self.values[name] = value
        return value

    def _unpickler(self, kind: str, data: bytes):
        unpickler = UNPICKLERS[kind](io.BytesIO(data))
        unpickler.restorer = self
        return unpickler

    def resolve(self, pid):
        kind = pid[0]
        if kind == "var":
            return self.variable(pid[1])
        if kind == "path":  # a class or function defined inside a notebook class
            found = self.variable(pid[1])
            for attr in pid[2]:
                found = getattr(found, attr)
            return found
        if kind == "set":  # capture._set_reference: filled in the order that iterates as the saved one did
            if len(pid) > 3:  # its items in order, and the size of its table when it was sized at once
                self._sets[pid[1], pid[2]] = set_order.build(pid[3], pid[4] if len(pid) > 4 else None)
            elif (pid[1], pid[2]) not in self._sets:
                self.variable(pid[1])
            return self._sets[pid[1], pid[2]]
        if kind == "memo":
            self.variable(pid[1])
            return self._memos[pid[1]][pid[2]]
        if kind == "tensor":
            tensor = self._tensor(pid[1])
            if len(pid) > 2:  # its Python attributes
                tensor.__dict__.update(pid[2])
            return tensor
        if kind == "array":
            return self._array(pid[1])
        if kind == "constant" and tuple(pid[1:]) in NAMED_NANS:
            return getattr(importlib.import_module(pid[1]), pid[2])
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
        buf, entries = self._blob_of(record)
        if record["name"] not in entries:
            raise CorruptBlob(f"blob {record['blob'][:12]} lacks tensor {record['name']!r}")
        _dtype, _shape, begin, end = entries[record["name"]]
        if end - begin != record["nbytes"]:
            raise CorruptBlob(f"blob {record['blob'][:12]}: tensor {record['name']!r} has {end - begin} bytes, "
                              f"the manifest expects {record['nbytes']}")
        view = memoryview(buf)[begin:end]
        if record["name"] != "t":  # a pack's entry: a save of these bytes refers to this pack (packed.py),
            # with the pack's size as its manifest gives it (the file's, header and all: read back checks it)
            packed.note(self.store.root, record["name"], record["blob"], self.manifest["blobs"][record["blob"]])
        region = (record["blob"], record["name"])
        if region in self._regions or not is_aligned(address(view)):
            # a packed blob puts storages at any offset, and equal contents are stored once: each
            # storage gets memory of its own, on a 64-byte boundary
            view = aligned_copy(view)
        self._regions.add(region)
        return record, view, 0, end - begin

    def _storage(self, skey: str):
        if skey in self._storages:
            return self._storages[skey]
        import torch
        if self.manifest["storages"][skey].get("file"):
            self.warnings.append(f"a tensor mapped from {self.manifest['storages'][skey]['file']} (torch.from_file) "
                                 "restored as an in-memory copy: writes to it no longer reach the file")
        if self._streamed(skey):
            record = self.manifest["storages"][skey]
            ust = self._storages[skey] = cuda_io.load_storage(self.store, record, self._target(record["device"], torch))
            return ust
        link = self.manifest["storages"][skey].get("view_of")
        if link is not None:  # torch.from_numpy: the tensor's memory is the array's (shared_memory.py)
            root = self._numpy_root(link["storage"])
            n = self.manifest["storages"][skey]["nbytes"]
            ust = self._storages[skey] = torch.frombuffer(root, dtype=torch.uint8, offset=link["offset"],
                                                          count=n).untyped_storage()
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
        # an automatic checkpoint's encoded blob is decoded on the host, then copied to the device
        return cuda_io.streams(record, self._target(record["device"], torch)) and \
            self.store.has_blob(record["blob"], "safetensors")

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
        source = record.get("memmap")
        arr = self._file_backed(record, source) if source else None
        if arr is None:
            root = self._numpy_root(record["buffer"])
            arr = np.ndarray(tuple(record["shape"]), dtype=array_dtype(record, "dtype"), buffer=root,
                             offset=record["offset"], strides=tuple(record["strides"]))
            if record.get("writeable") is False:
                arr.flags.writeable = False
        self._arrays[key] = arr
        return arr

    def _map_file(self, source, carrier):
        """The file mapped again, or None (with the reason among the warnings) for an in-memory copy."""
        path = source["path"]
        why = source.get("detached") or _file_differs(source)
        if why is None:
            mode = {"w+": "r+"}.get(source["mode"], source["mode"])  # never create or truncate the file
            try:  # the memmap's own array (C-ordered, as stored); every view is made of it
                return np.memmap(path, dtype=array_dtype(carrier, "numpy_dtype"), mode=mode,
                                 offset=source["file_offset"], shape=tuple(carrier["numpy_shape"]))
            except (OSError, ValueError) as exc:
                why = f"the file cannot be mapped in mode {mode!r} ({getattr(exc, 'strerror', None) or exc})"
        self.warnings.append(f"np.memmap of {path} restored as an in-memory copy: {why}")
        return None

    def _numpy_root(self, skey: str):
        """The stored buffer as the C-contiguous array it was saved from, on memory of its own."""
        if skey not in self._storages:
            srec, link = self.manifest["storages"][skey], self.manifest["storages"][skey].get("view_of")
            if link is not None and "numpy_shape" in srec:  # t.numpy(): the tensor's memory (shared_memory.py)
                self._storages[skey] = tensor_memory(self._storage(link["storage"]), link["offset"],
                                                     array_dtype(srec, "numpy_dtype"), srec["numpy_shape"])
                return self._storages[skey]
            srec, buf, begin, end = self._raw(skey)
            view = memoryview(buf)[begin:end]
            if not is_aligned(address(view)):
                view = aligned_copy(view)
            if "numpy_shape" in srec:
                root = np.ndarray(tuple(srec["numpy_shape"]), dtype=array_dtype(srec, "numpy_dtype"), buffer=view)
            else:  # written before numpy_shape was recorded
                root = np.frombuffer(view, dtype=np.uint8)
            self._storages[skey] = root
        return self._storages[skey]

    def _file_backed(self, record, source):
        """An np.memmap mapped from its file again when the file holds what it held at save time; views of
        one memmap share one mapping, as they did."""
        skey = record["buffer"]
        if skey not in self._mapped:
            self._mapped[skey] = self._map_file(source, self.manifest["storages"][skey])
            if self._mapped[skey] is not None and source["mode"] == "c":
                # copy-on-write: its memory held what the checkpoint saved, the file only what it started from
                self._mapped[skey][...] = self._numpy_root(skey).reshape(self._mapped[skey].shape)
        base = self._mapped[skey]
        if base is None:
            return None
        arr = np.ndarray.__new__(np.memmap, tuple(record["shape"]), dtype=array_dtype(record, "dtype"), buffer=base,
                                 offset=record["offset"], strides=tuple(record["strides"]))
        arr._mmap, arr.filename, arr.mode = base._mmap, base.filename, base.mode
        arr.offset = source["file_offset"] + record["offset"]
        return arr


def _file_differs(source) -> str | None:
    """Why the memmap's file no longer holds what the checkpoint saw, or None when it does. Records
    with a "region" hash only the mapped bytes; older ones hashed the whole file."""
    from .hashing import file_blocks, new_hasher
    hasher, done = new_hasher(), 0
    region = source.get("region")
    try:
        with open(source["path"], "rb") as f:
            if region is not None:
                f.seek(source["file_offset"])
            for block in file_blocks(f, region):
                hasher.update(block)
                done += len(block)
            size = f.tell()
    except OSError as exc:
        return f"the file cannot be read ({exc.strerror or exc})"
    if region is not None and done < region:
        return "the file is shorter than the mapping now"
    if hasher.hexdigest() != source["digest"] or (region is None and size != source["size"]):
        return "the file changed since the checkpoint"
    return None


def _rebase_notebook_classes(namespace: dict, restored: list, warnings: list) -> None:
    """A class the notebook defined is pickled by value, and the notebook classes it derives from inside
    it, by value too: restored, its bases would be copies of the base classes restored beside it, so that
    isinstance(obj, Base) turned False. Each such base is replaced by the restored class of that name."""
    names = set(restored)
    for name in restored:
        cls = namespace.get(name)
        if not isinstance(cls, type) or cls.__module__ != "__main__":
            continue
        bases = tuple(_restored_twin(base, namespace, names) for base in cls.__bases__)
        if bases != cls.__bases__:
            try:
                cls.__bases__ = bases
            except TypeError as exc:  # layouts that differ (a base redefined with other __slots__, say)
                warnings.append(f"{name}: its base classes are copies of {', '.join(b.__qualname__ for b in bases)}, "
                                f"not the restored classes ({exc}); isinstance against those is False")


def _restored_twin(base: type, namespace: dict, names: set) -> type:
    twin = namespace.get(base.__qualname__)
    if (base.__module__ == "__main__" and base.__qualname__ in names and isinstance(twin, type)
            and twin is not base and twin.__module__ == "__main__"):
        return twin
    return base


def _redefined(old, new, saved_id: int | None = None) -> bool:
    """A class or function the kernel defined again since the checkpoint, differently. In the process
    that saved it (saved_id: the id it had then), the same object is never a redefinition: the state it
    holds moved on (a closure's counter, `Run.started += 1`, a wrapper's `.calls`); a class or def
    statement makes another object."""
    from .compare import value_digest
    if old is new or not isinstance(old, (type, types.FunctionType)) or type(old) is not type(new):
        return False
    if saved_id is not None and id(old) == saved_id:
        return False
    try:
        return value_digest(old) != value_digest(new)
    except Exception:
        return True


def _warn_detached(manifest: dict, restored: list, restorer: Restorer, namespace: dict) -> None:
    """A subset restore of a variable that shares tensors with (or refers to) one left out gives it
    restored copies of those, not the kernel's live ones; a variable left out that refers to a restored
    one still holds the kernel's earlier object. Say which, and how to keep them bound."""
    variables = manifest["variables"]
    chosen = [n for n in restored if n in variables]
    memory = _memories(manifest)
    for name in chosen:
        mine = memory(variables[name])
        partners = sorted(other for other, record in variables.items() if other not in chosen and (
            other in restorer.values or mine & memory(record)))
        holders = sorted(other for other, record in variables.items() if other not in chosen and
                         other not in partners and other in namespace and name in record.get("refers_to", ()))
        together = f"restore them together ({_restore_line(chosen + partners + holders)}) to keep them bound"
        if partners:
            restorer.warnings.append(
                f"{name}: it shares tensors or objects with {', '.join(partners)}, which this restore left as "
                f"they are: {name} now refers to restored copies, not to the kernel's "
                f"{'variable' if len(partners) == 1 else 'variables'}; {together}")
        if holders:
            restorer.warnings.append(
                f"{name}: {', '.join(holders)} {'refers' if len(holders) == 1 else 'refer'} to it and this restore "
                f"left {'it' if len(holders) == 1 else 'them'} as {'it is' if len(holders) == 1 else 'they are'}: "
                f"{'it still holds' if len(holders) == 1 else 'they still hold'} the kernel's earlier {name}, "
                f"not the restored one; {together}")


def _warn_orphaned(manifest: dict, restored: list, failed: dict, restorer: Restorer) -> None:
    """A variable that shares tensors with one that could not be restored (an optimizer whose model's data
    is damaged) came back over tensors no other variable holds: say which, and how to bind them again."""
    variables = manifest["variables"]
    for name in restored:
        mine = set(variables.get(name, {}).get("storages", []))
        lost = sorted(other for other in failed if mine & set(variables.get(other, {}).get("storages", [])))
        if lost:
            restorer.warnings.append(
                f"{name}: it shares tensors with {', '.join(lost)}, which could not be restored: {name} now holds "
                f"tensors no other variable holds (an optimizer would step the parameters of no model); restore "
                f"{', '.join(lost)} and {name} together from a checkpoint that has them "
                f"({_restore_line(lost + [name])} --checkpoint ID)")


def _restore_line(names) -> str:
    """The magic that restores these names (the API's names=[...] is the same list)."""
    return f"%gkews_checkpoint restore {' '.join(sorted(names))}"


def _memories(manifest: dict):
    """A variable's storages by the memory they are over: a tensor made over an array (torch.from_numpy(arr))
    has a storage of its own in the table, restored over the array's memory (view_of); a restore of the
    array alone leaves such a tensor over the kernel's earlier one."""
    storages = manifest["storages"]

    def root(skey: str) -> str:
        seen = set()
        while skey in storages and isinstance(storages[skey].get("view_of"), dict) and skey not in seen:
            seen.add(skey)
            skey = storages[skey]["view_of"]["storage"]
        return skey
    return lambda record: {root(k) for k in record.get("storages", [])}


_ABSENT = object()


def _import_fix(manifest: dict, module: str) -> str:
    """How to make a module the checkpoint needs importable: the folder the saving kernel imported it from
    (a helper module of the notebook's), else installing it."""
    folders = {manifest["modules"].get(alias, alias): folder
               for alias, folder in manifest.get("module_folders", {}).items()}
    top = module.split(".")[0]
    folder = folders.get(module) or next((f for m, f in folders.items() if m.split(".")[0] == top), None)
    gone = process_settings.missing_import_folders(manifest.get("settings"))
    try:
        cwd = os.getcwd()
    except OSError:  # a working directory deleted since: "" searches nothing
        cwd = None
    searched = {os.path.realpath(p or cwd) for p in sys.path if isinstance(p, str) and (p or cwd)}
    if folder and folder in searched:  # where this kernel looks already: the file is what is gone
        fix = f"it was imported from {folder}, which no longer has it: put {top} back there"
    elif folder:
        fix = f"it was imported from {folder}, not installed: put {folder} on sys.path (or start the kernel there)"
    elif gone:  # a helper module of a folder the notebook had added to sys.path
        fix = f"the saving kernel also imported from {', '.join(gone)}, which is not here: put {top} back there, " \
              f"or install {top},"
    else:
        fix = f"install {top}"
    return fix + " and restore again"


def restore_namespace(namespace: dict, store, manifest: dict, *, names=None, device=None,
                      random_state: bool = True, remove=(), settings: bool = True) -> dict:
    """Put the checkpoint's variables (or `names`) into `namespace`, and take `remove` out of it; report what
    came back and what did not.

    A restore brings back the checkpoint's state, class and function definitions included: one the
    kernel has redefined since is replaced by the saved one, and the report says so. Each value is put in
    place as it is loaded (what unpickles a later one may call a notebook function that reads an earlier
    one as a global: a module alias, a helper); an interrupt before the end puts back what the namespace
    held, so that a restore changes it whole or not at all (interrupts.py)."""
    started = time.perf_counter()
    same_process = manifest["identity"].get("token") == TOKEN
    byvalue.register_sources(manifest.get("sources"))  # the cells of the definitions saved by value
    restorer = Restorer(store, manifest, device)
    folders = process_settings.extend_sys_path(manifest.get("settings"))  # before anything imports from them
    wanted = list(names) if names else None
    full = bool(manifest.get("settings")) and not wanted and settings  # sets back what the next cell computes with
    cwd_before = os.getcwd()
    imported_before = set(sys.modules)
    cwd_set, cwd_note = process_settings.enter_working_directory(manifest["settings"]) if full else (None, None)
    restored, failed = [], {}
    before: dict = {}  # each name the restore sets: what the namespace held (_ABSENT: nothing)

    def put(name, value):
        before.setdefault(name, namespace.get(name, _ABSENT))
        namespace[name] = value
    try:
        for alias, module in manifest["modules"].items():
            if wanted and alias not in wanted:
                continue
            try:
                put(alias, importlib.import_module(module))
                restored.append(alias)
            except ImportError as exc:
                failed[alias] = f"module {module} cannot be imported here ({exc}); {_import_fix(manifest, module)}"
            except (Exception, SystemExit) as exc:  # its import runs code: an error there fails this name alone
                failed[alias] = f"module {module} failed as it was imported here ({type(exc).__name__}: {exc})"
        for name in manifest["variables"]:
            if wanted and name not in wanted:
                continue
            try:
                value = restorer.variable(name)
                saved_id = manifest["variables"][name].get("object_id") if same_process else None
                if name in namespace and _redefined(namespace[name], value, saved_id):
                    restorer.warnings.append(
                        f"{name}: this kernel redefined it since the checkpoint; the checkpoint's definition is "
                        f"restored (re-run its cell to use the new one)")
                put(name, value)
                restored.append(name)
            except (Exception, SystemExit) as exc:  # each variable fails alone, with its reason (an exit() in its
                # __setstate__ too: it rolled the whole restore back, or ended a kernel restored at its start)
                restorer.failed[name] = reason = f"{type(exc).__name__}: {exc}" if not isinstance(
                    exc, CheckpointError) else str(exc)
                if isinstance(exc, ModuleNotFoundError) and exc.name:  # a class of a helper module not found
                    reason = restorer.failed[name] = f"{reason}; {_import_fix(manifest, exc.name)}"
                failed[name] = reason
        with held_off():
            for name in remove:
                before.setdefault(name, namespace.get(name, _ABSENT))
                namespace.pop(name, None)
    except BaseException:  # an interrupt (or worse) part way: the namespace (and the folder) as they were
        with held_off():
            for name, old in before.items():
                if old is _ABSENT:
                    namespace.pop(name, None)
                else:
                    namespace[name] = old
            if cwd_set:
                with contextlib.suppress(OSError):
                    os.chdir(cwd_before)
        raise
    _rebase_notebook_classes(namespace, restored, restorer.warnings)
    torch_modules.reserve_handle_ids(manifest.get("hook_ids"))  # the hook dicts it restored kept their keys
    try:  # frames that shared memory lazily must copy on their first write again, not write through
        pandas_cow.relink([namespace[n] for n in restored if n in namespace])
    except Exception as exc:  # a pandas whose internals differ: said, never a failed restore
        restorer.warnings.append(f"pandas frames that shared memory may now write through to each other "
                                 f"(their Copy-on-Write tracking could not be restored: {exc}); .copy() them")
    if wanted:
        _warn_detached(manifest, restored, restorer, namespace)
    _warn_orphaned(manifest, restored, failed, restorer)
    generators = []
    saved_random = manifest.get("random_state")
    if saved_random and random_state and not wanted:
        from . import randomstate
        try:
            states = pickle.loads(restorer.pickle_bytes(saved_random["pickle"]))
            generators, notes = randomstate.apply(states)
            restorer.warnings.extend(notes)
        except Exception as exc:
            restorer.warnings.append(f"the random state was not restored: {exc}")
    if manifest.get("named") and not wanted:  # it came back whole, and looked like the notebook's whole state
        restorer.warnings.append(
            f"checkpoint {manifest['id']} holds only the variables its save named ({', '.join(manifest['variables'])}"
            f"): the notebook's other variables are as they were; an earlier checkpoint may hold them "
            f"(%gkews_checkpoint list marks the saves of some variables, restore --checkpoint ID brings one back)")
    if manifest.get("excluded") and not wanted:
        one = len(manifest["excluded"]) == 1
        restorer.warnings.append(
            f"checkpoint {manifest['id']} was saved with --exclude {' '.join(manifest['excluded'])}: "
            f"{'that variable is as it was' if one else 'those variables are as they were'}; an earlier checkpoint "
            f"may hold {'it' if one else 'them'} (%gkews_checkpoint list marks the saves of some variables, "
            f"restore --checkpoint ID brings one back)")
    # in the kernel that saved, a module it had imported before runs the code it had then: not news
    edited = module_sources.changed(manifest.get("module_sources") or {},
                                    set(sys.modules) - imported_before if same_process else sys.modules)
    if edited:
        restorer.warnings.append(
            f"{', '.join(edited)} changed since checkpoint {manifest['id']} was saved: what was restored of "
            f"{'its' if len(edited) == 1 else 'their'} classes and functions runs the code as it is now")
    put_back = [f"import folder {folder} on sys.path" for folder in folders]
    if full:
        done, notes = process_settings.apply(manifest["settings"], manifest["identity"].get("token") == TOKEN)
        put_back += done + ([cwd_set] if cwd_set else [])
        restorer.warnings.extend(notes + ([cwd_note] if cwd_note else []))
    skipped = {n: s for n, s in manifest["skipped"].items() if not wanted or n in wanted}
    return {"checkpoint": manifest["id"], "created": manifest.get("created"), "restored": restored,
            "failed": failed, "skipped_at_save": skipped, "warnings": restorer.warnings,
            "random_state": generators, "settings": put_back,
            "seconds": round(time.perf_counter() - started, 4)}
