"""Reading and writing blobs in the safetensors format.

The format, in one paragraph: 8 bytes little-endian header length N; N bytes of JSON mapping each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (plus an optional "__metadata__" of
string to string); then the raw little-endian, C-order bytes of the tensors, with no holes. We pad the
JSON with spaces so the data starts on a 4096-byte boundary, which lets us write and read it with
O_DIRECT straight between the disk and page-aligned memory; the safetensors library reads the files as
they are. A blob is named by the xxh3-128 of all its bytes, and a reader checks that hash, and every
offset in the header, before it hands out a single byte.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

from .errors import CorruptBlob
from .fsutil import remove_quietly, temp_path
from .hashing import new_hasher

ALIGN = 4096
CHUNK = 8 << 20
IN_FLIGHT = 4  # concurrent chunk writes or reads: one at a time leaves a virtio disk mostly idle
MAX_HEADER = 100 << 20

ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}

# Background threads do the disk I/O while the caller copies and hashes the next chunk.
_io_pool = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="gkews-io")
_direct_supported: dict[str, bool] = {}
_direct_lock = threading.Lock()


def _round_up(n: int, to: int = ALIGN) -> int:
    return (n + to - 1) // to * to


def _open_for_write(path: str) -> tuple[int, bool]:
    """Open with O_DIRECT where the filesystem allows it (tmpfs and some overlays do not)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    directory = os.path.dirname(path)
    if _direct_supported.get(directory, True) and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o600), True
        except OSError:
            with _direct_lock:
                _direct_supported[directory] = False
    return os.open(path, flags, 0o600), False


def _pwrite_all(fd: int, buf, offset: int) -> None:
    view = memoryview(buf)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def build_header(entries) -> bytes:
    """entries: [(name, dtype, shape, nbytes)] in data order. Returns 8-byte length + padded JSON."""
    header, offset = {}, 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt", "writer": "kernel_state"}
    text = json.dumps(header, separators=(",", ":")).encode()
    padded = _round_up(8 + len(text)) - 8
    return struct.pack("<Q", padded) + text + b" " * (padded - len(text))


class _StagedWriter:
    """Copies pieces into page-aligned buffers and writes full ones in the background, several at once."""

    def __init__(self, fd: int, direct: bool, hasher, progress=None):
        self.fd, self.direct, self.hasher, self.progress = fd, direct, hasher, progress
        self.buffers = [mmap.mmap(-1, CHUNK) for _ in range(IN_FLIGHT)]
        self.pending = [None] * IN_FLIGHT
        self.current, self.fill, self.file_offset = 0, 0, 0

    def add(self, piece: memoryview) -> None:
        piece = piece.cast("B") if piece.format != "B" or piece.ndim != 1 else piece
        while piece:
            buf = self.buffers[self.current]
            n = min(len(piece), CHUNK - self.fill)
            buf[self.fill:self.fill + n] = piece[:n]
            self.fill += n
            piece = piece[n:]
            if self.fill == CHUNK:
                self._flush()

    def _flush(self) -> None:
        if not self.fill:
            return
        buf = self.buffers[self.current]
        view = memoryview(buf)[: self.fill]
        self.hasher.update(view)
        size = _round_up(self.fill) if self.direct else self.fill
        if size > self.fill:
            buf[self.fill:size] = bytes(size - self.fill)
        self.pending[self.current] = _io_pool.submit(_pwrite_all, self.fd, memoryview(buf)[:size], self.file_offset)
        self.file_offset += self.fill
        if self.progress:
            self.progress(self.fill)
        self.current = (self.current + 1) % IN_FLIGHT
        self.fill = 0
        waiting = self.pending[self.current]
        if waiting is not None:
            waiting.result()
            self.pending[self.current] = None

    def finish(self) -> int:
        self._flush()
        for fut in self.pending:
            if fut is not None:
                fut.result()
        return self.file_offset

    def close(self) -> None:
        for fut in self.pending:
            if fut is not None:
                try:
                    fut.result()
                except OSError:
                    pass
        for buf in self.buffers:
            try:
                buf.close()
            except BufferError:  # a failed write still holds a view; the memory goes with it
                pass


def write_blob(entries, tmp_dir: str, progress=None) -> tuple[str, str, int]:
    """Write one safetensors file to a temp path.

    entries: [(name, dtype, shape, memoryview of the bytes)]. Returns (temp path, digest, size).
    The file is fsynced; the caller renames it to its content address. On error nothing is left behind.
    """
    header = build_header([(n, d, s, mv.nbytes) for n, d, s, mv in entries])
    tmp = temp_path(tmp_dir, ".safetensors")
    fd, direct = _open_for_write(tmp)
    hasher = new_hasher()
    writer = _StagedWriter(fd, direct, hasher, progress)
    try:
        writer.add(memoryview(header))
        for _name, _dtype, _shape, mv in entries:
            writer.add(mv)
        size = writer.finish()
        if direct:
            os.ftruncate(fd, size)
        os.fsync(fd)
    except BaseException:
        writer.close()
        os.close(fd)
        remove_quietly(tmp)
        raise
    writer.close()
    os.close(fd)
    return tmp, hasher.hexdigest(), size


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


def read_blob(path: str, digest: str) -> tuple[mmap.mmap, dict]:
    """Read a blob into page-aligned memory after checking its hash and header.

    Returns (buffer, {name: (dtype, shape, begin, end)}); offsets are relative to the buffer.
    """
    what = f"blob {digest[:12]}"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CorruptBlob(f"{what} is missing from the checkpoint store ({path})") from None
    try:
        size = os.fstat(fd).st_size
        entries, start = read_header(fd, size, what)
        hasher = new_hasher()
        hasher.update(os.pread(fd, start, 0))
        length = size - start
        buf = mmap.mmap(-1, max(_round_up(length), ALIGN))
        reader, futures = fd, {}
        if start % ALIGN == 0 and hasattr(os, "O_DIRECT"):
            try:
                reader = os.open(path, os.O_RDONLY | os.O_DIRECT)
            except OSError:
                reader = fd
        try:
            view = memoryview(buf)
            chunks = [(o, min(CHUNK, _round_up(length) - o)) for o in range(0, length, CHUNK)]
            for i, (offset, n) in enumerate(chunks):
                for j in range(i, min(i + IN_FLIGHT, len(chunks))):  # keep IN_FLIGHT reads queued
                    if j not in futures:
                        o, m = chunks[j]
                        futures[j] = _io_pool.submit(_pread_into, reader, view[o:o + m], start + o)
                futures.pop(i).result()
                hasher.update(view[offset:min(offset + n, length)])
        finally:
            for future in futures.values():  # no read may outlive the descriptor it uses
                future.exception()
            if reader != fd:
                os.close(reader)
    finally:
        os.close(fd)
    if hasher.hexdigest() != digest:
        raise CorruptBlob(f"{what} does not match its hash: the file {path} was modified or damaged")
    return buf, {name: (d, s, b, e) for name, (d, s, b, e) in entries.items()}
