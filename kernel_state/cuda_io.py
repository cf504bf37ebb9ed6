"""Tensor bytes between a device and the checkpoint files, through a small ring of pinned host buffers.

Save: the device copies the next chunk into a free buffer on a side stream while the disk writes the
chunks already copied (several writes in flight) and this thread hashes the current one, so the disk
never waits for the GPU. Restore: reads run ahead into the free buffers while each chunk that has been
read is hashed and copied to the device on a side stream. Either way the host memory used is the ring
(GKEWS_DEVICE_STAGING_MB, default 256 MiB), whatever the tensors' size: a 10 GiB tensor goes through
in chunks.

The device is a small interface, so the same pipeline runs on the CPU in tests:
- CudaDevice: torch.cuda side streams, pinned memory, CUDA events;
- HostDevice: CPU memory stands in for device memory, copies run in a worker thread.
`BACKENDS` maps a device type to its implementation; tests register a HostDevice for "cpu".
"""
from __future__ import annotations

import ctypes
import errno
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .alignment import private_memory
from . import config
from .errors import CorruptBlob
from .hashing import digest_file, new_hasher
from .safetensors_io import ALIGN, CHUNK as WRITE_PIECE, _io_pool, _pwrite_all, _pread_into, read_header

STREAM_MIN = 1 << 20      # as capture.PACK_LIMIT: smaller storages share the checkpoint's pack blob
MAX_BUFFER = 64 << 20     # one ring buffer: large enough that per-copy overheads vanish
MAX_BUFFERS = 8

_read_pool = ThreadPoolExecutor(max_workers=MAX_BUFFERS, thread_name_prefix="gkews-devread")


def aligned_host_memory(nbytes: int) -> tuple[int, object]:
    """(address, owner) of nbytes of page-aligned memory that is not pinned (mmap: 4096-aligned)."""
    owner = private_memory(nbytes)
    return ctypes.addressof(ctypes.c_char.from_buffer(owner)), owner


class HostBuffer:
    """One ring buffer: its address, size, a byte view, and whatever keeps the memory alive."""

    def __init__(self, address: int, nbytes: int, owner, tensor=None):
        self.address, self.nbytes, self.owner, self.tensor = address, nbytes, owner, tensor
        self.view = memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")


# -- devices ------------------------------------------------------------------------------------------
class CudaDevice:
    """torch.cuda: pinned host buffers, copies on one side stream per GPU, completion by CUDA events."""

    kind = "cuda"

    def __init__(self):
        import torch
        self.torch = torch
        self._streams: dict = {}

    def _stream(self, device):
        index = device.index if device.index is not None else self.torch.cuda.current_device()
        stream = self._streams.get(index)
        if stream is None:
            stream = self._streams[index] = self.torch.cuda.Stream(device=index)
        return stream

    def _bytes(self, storage):
        t = self.torch.empty(0, dtype=self.torch.uint8, device=storage.device)
        return t.set_(storage, 0, (storage.nbytes(),), (1,))

    def alloc_host(self, nbytes: int) -> HostBuffer:
        # Exactly nbytes: torch's pinned allocator rounds each request up to a power of two (ring_shape
        # asks for one), so nbytes + padding would pin twice the staging budget. cudaHostAlloc gives pages.
        torch = self.torch
        t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        if t.data_ptr() % ALIGN:  # not from cudaHostAlloc (a host-register allocator): align it ourselves
            t = torch.empty(nbytes + ALIGN, dtype=torch.uint8, pin_memory=True)
            shift = (-t.data_ptr()) % ALIGN  # page-aligned, so the disk can read and write it directly
            t = t[shift:shift + nbytes]
        return HostBuffer(t.data_ptr(), nbytes, t, tensor=t)

    def empty_cache(self) -> None:
        """Hand freed pinned blocks back to the driver (torch caches them for the life of the process)."""
        empty = getattr(self.torch._C, "_host_emptyCache", None)
        if empty is not None and self.torch.cuda.is_initialized():
            empty()

    def begin(self, storage) -> None:
        """Order the side stream after the work already queued on the storage's current stream."""
        self._stream(storage.device).wait_stream(self.torch.cuda.current_stream(storage.device))

    def to_host(self, storage, offset: int, nbytes: int, buf: HostBuffer):
        stream = self._stream(storage.device)
        with self.torch.cuda.stream(stream):
            buf.tensor[:nbytes].copy_(self._bytes(storage)[offset:offset + nbytes], non_blocking=True)
            event = self.torch.cuda.Event()
            event.record(stream)
        return event

    def to_device(self, buf: HostBuffer, nbytes: int, storage, offset: int):
        stream = self._stream(storage.device)
        with self.torch.cuda.stream(stream):
            self._bytes(storage)[offset:offset + nbytes].copy_(buf.tensor[:nbytes], non_blocking=True)
            event = self.torch.cuda.Event()
            event.record(stream)
        return event

    def wait(self, event) -> None:
        event.synchronize()

    def empty(self, nbytes: int, target: str):
        storage = self.torch.empty(nbytes, dtype=self.torch.uint8, device=target).untyped_storage()
        self.begin(storage)  # the allocator may hand out memory that queued work still reads
        return storage

    def finish(self, storage) -> None:
        """After the copies into a storage: later work on the current stream sees them."""
        self.torch.cuda.current_stream(storage.device).wait_stream(self._stream(storage.device))


class HostDevice:
    """A stand-in device for tests and `bench_gpu.py --smoke`: CPU storages are the "device memory";
    copies run asynchronously in one worker thread, as a DMA engine would."""

    kind = "cpu"

    def __init__(self, trace=None):
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gkews-fakedma")
        self.trace = trace or (lambda *event: None)

    def alloc_host(self, nbytes: int) -> HostBuffer:
        address, owner = aligned_host_memory(nbytes)
        return HostBuffer(address, nbytes, owner)

    def begin(self, storage) -> None:
        """Nothing to order: the stand-in has no streams, its copies see all work already done."""

    def _copy(self, what, dst, src, nbytes, offset):
        def run():
            self.trace(what, "start", offset)
            ctypes.memmove(dst, src, nbytes)
            self.trace(what, "done", offset)
        return self._worker.submit(run)

    def to_host(self, storage, offset, nbytes, buf):
        return self._copy("d2h", buf.address, storage.data_ptr() + offset, nbytes, offset)

    def to_device(self, buf, nbytes, storage, offset):
        return self._copy("h2d", storage.data_ptr() + offset, buf.address, nbytes, offset)

    def wait(self, event) -> None:
        event.result()

    def empty(self, nbytes: int, target: str):
        import torch
        return torch.UntypedStorage(nbytes)  # torch's CPU allocator aligns to 64 bytes

    def finish(self, storage) -> None:
        pass


BACKENDS: dict = {"cuda": CudaDevice}
_devices: dict = {}
_rings: dict = {}
_lock = threading.Lock()
_ring_lock = threading.RLock()


def device_for(device_type: str):
    """The backend instance for a device type, or None when its tensors take the plain path."""
    backend = BACKENDS.get(device_type)
    if backend is None:
        return None
    if not isinstance(backend, type):
        return backend
    with _lock:
        if device_type not in _devices:
            _devices[device_type] = backend()
        return _devices[device_type]


def ring_shape(staging: int) -> tuple[int, int]:
    """(buffer size, buffer count) for a staging budget: at least 4 buffers, each a power of two of at
    least 4 KiB (a pinned allocation is rounded up to one: any other size would pin more than asked)."""
    size = max(ALIGN, 1 << (min(MAX_BUFFER, staging // 4).bit_length() - 1))
    return size, max(4, min(MAX_BUFFERS, staging // size))


def ring(device) -> list[HostBuffer]:
    """The device's ring, made on first use and kept (pinning memory is slow). Callers hold _ring_lock:
    one transfer at a time uses it."""
    size, count = ring_shape(config.staging_bytes())
    key = (id(device), size, count)
    buffers = _rings.get(key)
    if buffers is None:
        release()
        buffers = _rings[key] = [device.alloc_host(size) for _ in range(count)]
    return buffers


def release() -> None:
    """Give the pinned buffers back (the next save or restore makes them again)."""
    _rings.clear()
    for device in list(_devices.values()):
        if hasattr(device, "empty_cache"):
            device.empty_cache()


# -- save ---------------------------------------------------------------------------------------------
class DeviceSource:
    """A device storage as an entry of safetensors_io.write_blob: it writes its own bytes."""

    def __init__(self, storage, device):
        self.storage, self.device, self.nbytes = storage, device, storage.nbytes()

    def write_to(self, fd: int, offset: int, hasher, progress=None) -> int:
        return stream_to_file(self.device, self.storage, fd, offset, hasher, progress)

    def host_copy(self) -> memoryview:
        """The bytes in fresh host memory (kernel undo stages a changed tensor before the next cell)."""
        return copy_to_host(self.device, self.storage)


def source_for(storage):
    """A DeviceSource when this storage streams through the ring, else None (plain path)."""
    device = device_for(storage.device.type)
    if device is None:
        return None
    return DeviceSource(storage, device)


def _direct_fd(fd: int, flags: int) -> int:
    """A second descriptor of the same file that bypasses the page cache, or -1 where none can be had."""
    if not hasattr(os, "O_DIRECT"):
        return -1
    try:
        return os.open(f"/proc/self/fd/{fd}", flags | os.O_DIRECT)
    except OSError:
        return -1


def _aligned(address: int, offset: int, nbytes: int) -> bool:
    return address % ALIGN == 0 and offset % ALIGN == 0 and nbytes % ALIGN == 0


def write_piece(fd: int, direct: int, view, address: int, offset: int) -> None:
    """Write through the page cache, or around it where `direct` is open and the piece is aligned: then
    all of its whole blocks in one request (the block layer splits it and keeps the disk's queue full),
    the partial block at the end of a tensor through the page cache."""
    whole = len(view) // ALIGN * ALIGN
    if direct >= 0 and whole and _aligned(address, offset, whole):
        try:
            _pwrite_all(direct, view[:whole], offset)
            view, offset = view[whole:], offset + whole
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: this file system wants other alignment
                raise
    if len(view):
        _pwrite_all(fd, view, offset)


def stream_to_file(device, storage, fd: int, offset: int, hasher, progress=None) -> int:
    """Copy the storage to the file at `offset` through the ring; returns the offset after it."""
    with _ring_lock:
        return _stream_to_file(device, storage, fd, offset, hasher, progress)


def _stream_to_file(device, storage, fd, offset, hasher, progress):
    buffers = ring(device)
    size, count, nbytes = buffers[0].nbytes, len(buffers), storage.nbytes()
    spans = [(start, min(size, nbytes - start)) for start in range(0, nbytes, size)]
    copies: dict[int, object] = {}      # chunk -> its device-to-host copy
    writes: list[list] = [[] for _ in buffers]  # per buffer: the disk writes still reading it
    direct = _direct_fd(fd, os.O_WRONLY) if config.direct_io() in ("write", "both") else -1

    def drain(b: int) -> None:
        for future, n in writes[b]:
            future.result()
            if progress:
                progress(n)
        writes[b] = []

    def copy(i: int) -> None:
        b = i % count
        drain(b)  # the buffer is free once the disk has taken its bytes
        copies[i] = device.to_host(storage, spans[i][0], spans[i][1], buffers[b])

    try:
        device.begin(storage)
        if spans:
            copy(0)
        for i, (start, n) in enumerate(spans):
            buf = buffers[i % count]
            device.wait(copies.pop(i))
            step = n if direct >= 0 else WRITE_PIECE  # page-cache writes go in parallel pieces
            for p in range(0, n, step):
                piece = buf.view[p:min(n, p + step)]
                writes[i % count].append((_io_pool.submit(
                    write_piece, fd, direct, piece, buf.address + p, offset + start + p), len(piece)))
            if i + 1 < len(spans):
                copy(i + 1)  # the GPU fills the next buffer while the disk and the hasher work on this one
            hasher.update(buf.view[:n])
        for b in range(count):
            drain(b)
    except BaseException:
        for event in copies.values():  # nothing may still write into the ring or through the descriptor
            device.wait(event)
        for pending in writes:
            for future, _n in pending:
                future.exception()
        raise
    finally:
        if direct >= 0:
            os.close(direct)
    return offset + nbytes


def copy_to_host(device, storage) -> memoryview:
    """The storage's bytes in fresh page-aligned host memory, through the ring: the device copies the
    next chunks into pinned buffers while this thread moves the finished one out (a pageable copy of
    device memory would go at a fraction of the speed)."""
    with _ring_lock:
        buffers = ring(device)
        size, count, nbytes = buffers[0].nbytes, len(buffers), storage.nbytes()
        owner = private_memory(nbytes)
        out = memoryview(owner)[:nbytes]
        spans = [(start, min(size, nbytes - start)) for start in range(0, nbytes, size)]
        copies: dict[int, object] = {}
        try:
            device.begin(storage)
            for i in range(min(count, len(spans))):
                copies[i] = device.to_host(storage, spans[i][0], spans[i][1], buffers[i])
            for i, (start, n) in enumerate(spans):
                device.wait(copies.pop(i))
                out[start:start + n] = buffers[i % count].view[:n]
                if i + count < len(spans):  # that buffer is free again
                    nxt = spans[i + count]
                    copies[i + count] = device.to_host(storage, nxt[0], nxt[1], buffers[i % count])
        except BaseException:
            for event in copies.values():  # nothing may still write into the ring
                device.wait(event)
            raise
        return out


# -- restore ------------------------------------------------------------------------------------------
def streams(record: dict, target: str) -> bool:
    """Whether a stored torch storage comes back to `target` through the ring: a large storage alone in
    its blob, going to a device that has a backend."""
    return (record.get("kind") == "torch" and "chunks" not in record and record.get("name") == "t"
            and record["nbytes"] >= STREAM_MIN and device_for(target.split(":")[0]) is not None)


def load_storage(store, record: dict, target: str):
    """The storage `record` describes, on `target`, checked against its blob's hash."""
    device = device_for(target.split(":")[0])
    path = store.blob_path(record["blob"], "safetensors")
    try:
        if config.cuda_loader() == "safetensors":
            return _load_with_safetensors(path, record, target)
        return stream_from_file(device, path, record["blob"], record["nbytes"], target)
    except FileNotFoundError:
        raise CorruptBlob(f"blob {record['blob'][:12]} is missing from the checkpoint store ({path})") from None
    except OSError as exc:
        raise CorruptBlob(f"blob {record['blob'][:12]} cannot be read: {exc}") from None


def _open_blob(path: str, digest: str, nbytes: int):
    """Open a single-tensor blob, check its header; returns (fd, data start, hasher over the header)."""
    what = f"blob {digest[:12]}"
    fd = os.open(path, os.O_RDONLY)
    try:
        entries, start = read_header(fd, os.fstat(fd).st_size, what)
        if list(entries) != ["t"] or entries["t"][3] - entries["t"][2] != nbytes:
            raise CorruptBlob(f"{what} does not hold the one tensor of {nbytes} bytes the manifest expects")
        hasher = new_hasher()
        hasher.update(os.pread(fd, start, 0))
    except BaseException:
        os.close(fd)
        raise
    return fd, start, hasher


def _read_chunk(fd: int, direct: int, buf: HostBuffer, position: int, n: int) -> int:
    if direct >= 0 and position % ALIGN == 0:
        try:  # O_DIRECT reads whole blocks: the file's last one comes back short
            view, total = buf.view[:min(buf.nbytes, -(-n // ALIGN) * ALIGN)], 0
            while total < n:
                got = os.preadv(direct, [view[total:]], position + total)
                if got == 0:
                    break
                total += got
            return min(total, n)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
    return _pread_into(fd, buf.view[:n], position)


def stream_from_file(device, path: str, digest: str, nbytes: int, target: str):
    """Read a single-tensor blob into a new storage on the device: reads run ahead into the ring while
    each chunk read is hashed and copied to the device; the storage is dropped unless the hash matches."""
    with _ring_lock:
        return _stream_from_file(device, path, digest, nbytes, target)


def _stream_from_file(device, path, digest, nbytes, target):
    what = f"blob {digest[:12]}"
    fd, start, hasher = _open_blob(path, digest, nbytes)
    direct = _direct_fd(fd, os.O_RDONLY) if config.direct_io() in ("read", "both") else -1
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    buffers = ring(device)
    size, count = buffers[0].nbytes, len(buffers)
    spans = [(offset, min(size, nbytes - offset)) for offset in range(0, nbytes, size)]
    reads: dict[int, object] = {}
    copies: list = [None] * count  # per buffer: the host-to-device copy still reading it
    storage = None
    try:
        storage = device.empty(nbytes, target)

        def read(i: int) -> None:
            b = i % count
            if copies[b] is not None:
                device.wait(copies[b])
                copies[b] = None
            offset, n = spans[i]
            reads[i] = _read_pool.submit(_read_chunk, fd, direct, buffers[b], start + offset, n)

        for i in range(min(count - 1, len(spans))):  # one buffer is always free for the device's copy
            read(i)
        for i, (offset, n) in enumerate(spans):
            b = i % count
            if reads.pop(i).result() != n:
                raise CorruptBlob(f"{what} ended early: the file {path} is truncated")
            copies[b] = device.to_device(buffers[b], n, storage, offset)
            if i + count - 1 < len(spans):
                read(i + count - 1)
            hasher.update(buffers[b].view[:n])
        for b in range(count):
            if copies[b] is not None:
                device.wait(copies[b])
                copies[b] = None
        if hasher.hexdigest() != digest:
            raise CorruptBlob(f"{what} does not match its hash: the file {path} was modified or damaged")
        device.finish(storage)
        return storage
    finally:
        for future in reads.values():  # nothing may still read into the ring or through the descriptor
            future.exception()
        for event in copies:
            if event is not None:
                device.wait(event)
        if direct >= 0:
            os.close(direct)
        os.close(fd)


def _load_with_safetensors(path: str, record: dict, target: str):
    """safetensors' own CUDA loader; the file's hash is computed beside it (the reads share the page
    cache) and the tensor is dropped unless it matches."""
    from safetensors import safe_open

    digest = record["blob"]
    hashed = _read_pool.submit(digest_file, path, WRITE_PIECE)
    try:
        with safe_open(path, framework="pt", device=target) as f:
            storage = f.get_tensor("t").untyped_storage()
        failure = None
    except Exception as exc:  # the library's own errors: a damaged header, a short file
        storage, failure = None, exc
    if hashed.result() != digest:
        raise CorruptBlob(f"blob {digest[:12]} does not match its hash: the file {path} was modified or damaged")
    if failure is not None:
        raise CorruptBlob(f"blob {digest[:12]} cannot be loaded by safetensors: {failure}")
    if storage.nbytes() != record["nbytes"]:
        raise CorruptBlob(f"blob {digest[:12]} holds {storage.nbytes()} bytes, the manifest expects {record['nbytes']}")
    return storage
