"""Reading and writing blobs in the safetensors format.

The format, in one paragraph: 8 bytes little-endian header length N; N bytes of JSON mapping each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (plus an optional "__metadata__" of
string to string); then the raw little-endian, C-order bytes of the tensors, with no holes. We pad the
JSON with spaces so the data starts on a 4096-byte boundary (page-aligned when mapped); the safetensors
library reads the files as they are. A blob is named by the xxh3-128 of all its bytes, and a reader
checks that hash, and every offset in the header, before it hands out a single byte.
"""
from __future__ import annotations

import json
import mmap
import os
import queue
import struct
from concurrent.futures import ThreadPoolExecutor

from .alignment import private_memory
from .errors import CorruptBlob
from .fsutil import remove_quietly, temp_path
from .hashing import new_hasher

ALIGN = 4096
CHUNK = 8 << 20  # bytes per write or read call
IN_FLIGHT = 4  # concurrent chunk writes: one at a time leaves a virtio disk mostly idle
SMALL_WRITE = 64 << 10  # tensors below this are copied into one buffer and written together
MAX_HEADER = 100 << 20

ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}

# Background threads do the disk I/O while the caller copies and hashes the next chunk.
_io_pool = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="gkews-io")


def _round_up(n: int, to: int = ALIGN) -> int:
    return (n + to - 1) // to * to


def _pwrite_all(fd: int, buf, offset: int) -> None:
    view = memoryview(buf)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def build_header(entries, metadata: dict | None = None) -> bytes:
    """entries: [(name, dtype, shape, nbytes)] in data order. Returns 8-byte length + padded JSON."""
    header, offset = {}, 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt", "writer": "kernel_state", **(metadata or {})}
    text = json.dumps(header, separators=(",", ":")).encode()
    padded = _round_up(8 + len(text)) - 8
    return struct.pack("<Q", padded) + text + b" " * (padded - len(text))


def write_blob(entries, tmp_dir: str, progress=None) -> tuple[str, str, int]:
    """Write one safetensors file to a temp path; the caller fsyncs it before trusting it.

    entries: [(name, dtype, shape, memoryview of the bytes)]. Returns (temp path, digest, size).
    Each chunk is copied into a reused buffer, hashed there, and written from there by background threads,
    several chunks at once, while this thread copies and hashes the next. The copy is what makes the name
    true: a thread of the notebook (a training loop, a data loader) may write the memory during the save,
    and bytes hashed and then written from live memory again differed, so the blob failed its hash at every
    restore. (It costs a memcpy per chunk, overlapped with the writes; O_DIRECT through an aligned buffer
    measured slower here.) On error nothing is left behind.
    """
    header = build_header([(n, d, s, mv.nbytes) for n, d, s, mv in entries])
    tmp = temp_path(tmp_dir, ".safetensors")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    hasher = new_hasher()
    pending: list = []  # (future, bytes, the buffer to give back or None)

    def settle(future, n: int, buffer) -> None:
        future.result()
        if buffer is not None:
            _buffers.put(buffer)
        if progress:
            progress(n)

    def write(piece, offset: int, buffer=None) -> None:
        pending.append((_io_pool.submit(_pwrite_all, fd, piece, offset), len(piece), buffer))
        while len(pending) > IN_FLIGHT:
            settle(*pending.pop(0))

    # small tensors (a pack of 20,000 embeddings) are gathered into one write: a write call each cost more
    # than the bytes; the batch is a copy, hashed when it is written
    batch, batch_at = bytearray(), 0
    try:
        _pwrite_all(fd, header, 0)
        hasher.update(header)
        offset = len(header)
        for _name, _dtype, _shape, mv in entries:
            device = hasattr(mv, "write_to")
            if batch and (device or mv.nbytes >= SMALL_WRITE or len(batch) + mv.nbytes > CHUNK):
                hasher.update(batch)
                write(batch, batch_at)  # the batch is contiguous: ended before anything not added to it
                batch = bytearray()
            if device:  # device memory: it streams itself through pinned buffers (cuda_io), copies too
                offset = mv.write_to(fd, offset, hasher, progress)
                continue
            mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
            if len(mv) < SMALL_WRITE:
                if not batch:
                    batch_at = offset
                batch += mv
                offset += len(mv)
                continue
            for start in range(0, len(mv), CHUNK):
                buffer = _buffer()
                piece = buffer[:min(CHUNK, len(mv) - start)]
                piece[:] = mv[start:start + CHUNK]
                hasher.update(piece)
                write(piece, offset, buffer)
                offset += len(piece)
        if batch:
            hasher.update(batch)
            write(batch, batch_at)
        while pending:
            settle(*pending.pop(0))
        start_writeback(fd)
    except BaseException:
        for future, _n, buffer in pending:  # no write may outlive the descriptor it uses
            future.exception()
            if buffer is not None:
                _buffers.put(buffer)
        os.close(fd)
        remove_quietly(tmp)
        raise
    os.close(fd)
    return tmp, hasher.hexdigest(), offset


# The chunk buffers of write_blob, reused from one write to the next (a fresh one costs a page fault per
# page, as much as the copy): at most IN_FLIGHT + 1 per writing thread, CHUNK bytes each.
_buffers: queue.SimpleQueue = queue.SimpleQueue()


def _buffer() -> memoryview:
    try:
        return _buffers.get_nowait()
    except queue.Empty:
        return memoryview(private_memory(CHUNK))


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing the file's dirty pages now, without waiting: the later fsync
    then finds most of the work done, and many files' writeback overlaps instead of queueing."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def read_header(fd: int, file_size: int, what: str) -> tuple[dict, int]:
    """Parse and validate the header; returns ({name: (dtype, shape, begin, end)}, data start)."""
    if file_size < 8:
        raise CorruptBlob(f"{what}: {file_size} bytes, too short for a safetensors header")
    (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    if n > MAX_HEADER or 8 + n > file_size:
        raise CorruptBlob(f"{what}: header length {n} does not fit a file of {file_size} bytes")
    try:
        raw = json.loads(os.pread(fd, n, 8))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptBlob(f"{what}: header is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CorruptBlob(f"{what}: header is not a JSON object")
    raw.pop("__metadata__", None)
    entries, spans = {}, []
    for name, info in raw.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            count = 1
            for dim in shape:
                if not isinstance(dim, int) or dim < 0:
                    raise ValueError(dim)
                count *= dim
            if dtype not in ITEMSIZE or not (isinstance(begin, int) and isinstance(end, int)):
                raise ValueError(dtype)
            if end - begin != count * ITEMSIZE[dtype] or begin < 0:
                raise ValueError((begin, end))
        except (KeyError, TypeError, ValueError):
            raise CorruptBlob(f"{what}: header entry {name!r} is malformed") from None
        entries[name] = (dtype, tuple(shape), begin, end)
        spans.append((begin, end))
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            raise CorruptBlob(f"{what}: tensor data has a hole or an overlap at byte {begin}")
        position = end
    if 8 + n + position != file_size:
        raise CorruptBlob(f"{what}: header describes {8 + n + position} bytes, the file has {file_size}")
    return entries, 8 + n


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    total = 0
    while total < len(view):
        got = os.preadv(fd, [view[total:]], offset + total)
        if got == 0:
            break
        total += got
    return total


def read_blob(path: str, digest: str, into: memoryview | None = None, _depth: int = 0) -> tuple[mmap.mmap | None, dict]:
    """Read a blob into page-aligned memory after checking its header and its hash.

    Returns (buffer, {name: (dtype, shape, begin, end)}); offsets are relative to the buffer. Plain
    sequential reads let the kernel's readahead keep the disk busy while this thread hashes (measured
    here: faster cold than O_DIRECT); restore reads two blobs at a time. With `into` (a view exactly the
    size of the blob's data) the data goes there instead and the buffer returned is None; the caller
    must drop what it read when this raises. Where only `<digest>.enc` exists, it is decoded
    (encoded_blob.py) and the same is returned.
    """
    what = f"blob {digest[:12]}"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        encoded = path[:-len(".safetensors")] + ".enc" if path.endswith(".safetensors") else None
        if encoded and os.path.exists(encoded):  # an automatic checkpoint's blob, stored smaller
            from . import encoded_blob
            return encoded_blob.read(encoded, digest, into, _base_reader(os.path.dirname(path), _depth))
        raise CorruptBlob(f"{what} is missing from the checkpoint store ({path})") from None
    try:
        size = os.fstat(fd).st_size
        entries, start = read_header(fd, size, what)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        hasher = new_hasher()
        hasher.update(os.pread(fd, start, 0))
        length = size - start
        if into is None:
            buf = private_memory(length)
            view = memoryview(buf)
        elif len(into) != length:
            raise CorruptBlob(f"{what} holds {length} bytes of data, the manifest expects {len(into)}")
        else:
            buf, view = None, into
        for offset in range(0, length, CHUNK):
            n = min(CHUNK, length - offset)
            if _pread_into(fd, view[offset:offset + n], start + offset) != n:
                raise CorruptBlob(f"{what} ended early: the file {path} is truncated")
            hasher.update(view[offset:offset + n])
        del view
    finally:
        os.close(fd)
    if hasher.hexdigest() != digest:
        damaged = CorruptBlob(f"{what} does not match its hash: the file {path} was modified or damaged")
        if buf is not None:
            damaged.salvage = (buf, dict(entries))
        raise damaged
    return buf, dict(entries)


def read_base(blob_dir: str, digest: str) -> memoryview:
    """The tensor bytes of a blob used as an encoded blob's base; one that has a base itself, or holds
    more than one tensor, is refused (CorruptBlob)."""
    buf, entries = read_blob(os.path.join(blob_dir, f"{digest}.safetensors"), digest, None, 1)
    if set(entries) != {"t"}:
        raise CorruptBlob(f"blob {digest[:12]} holds {len(entries)} tensors: it cannot be a base")
    _dtype, _shape, begin, end = entries["t"]
    return memoryview(buf)[begin:end]


def _base_reader(blob_dir: str, depth: int):
    def base(digest: str) -> memoryview:
        if depth:
            raise CorruptBlob(f"blob {digest[:12]} is the base of a blob that is itself a base's delta")
        return read_base(blob_dir, digest)
    return base
