"""Encoded blobs: an automatic checkpoint's tensor data, stored smaller (kernel undo).

The format, in one paragraph: `<X>.enc` holds exactly the tensor the plain blob `<X>.safetensors` would
hold (X is the xxh3-128 of that plain file, so everything that names the blob names it by X). It is a
safetensors file itself: one U8 tensor "encoded" and string `__metadata__` with "gkews_encoding"
(`xor-shuffle-zstd/1`), "dtype" and "shape" (JSON) of the plain tensor, "block" (raw bytes per block),
"frames" (JSON list of the compressed size of each block) and "base" (a blob's X, or ""). The plain data,
block by block: zstd-decompress the block's frame, undo the byte shuffle (a block whose length is a multiple
of 8 was stored transposed as rows of 8 bytes, so byte k of every 8 sits together: for any item size up to
8 that groups bytes of the same significance; other blocks are not shuffled), then, when
"base" is set, XOR with the same bytes of the base's tensor. A base never has a base itself, so a read
costs at most one other blob. The reader rebuilds the plain file's hash and compares it with X before
it hands out a byte.

Why: between two cells most of a changed tensor stays bit-identical (a slice of a big array, weights
after a few optimizer steps), and the XOR with the previous version is mostly zero bytes; the shuffle puts
the bytes that do change (low mantissa bits) together. Only the background writer of automatic
checkpoints writes them; a pause's checkpoint stays plain safetensors.
"""
from __future__ import annotations

import json
import mmap
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import zstandard

from .alignment import private_memory
from .errors import CorruptBlob
from .fsutil import remove_quietly, temp_path
from .hashing import new_hasher
from .priority import background_priority
from .safetensors_io import ITEMSIZE, _pwrite_all, build_header, read_header

ENCODING = "xor-shuffle-zstd/1"
BLOCK = 4 << 20        # raw bytes per frame: a multiple of every item size, and small enough to stream
SHUFFLE = 8            # bytes per row of the shuffle: groups bytes of equal significance for item sizes 1-8
# zstd's fastest level: measured here 0.07x of the raw size for the XOR of a weight matrix before and
# after an SGD step, at 700 MB/s on one core
LEVEL = 1
WORTH_IT = 0.9         # written encoded only when that saves at least a tenth of the bytes
MAX_ENCODED = 512 << 20  # larger tensors stay plain: the writer holds a blob's frames in memory

_pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="gkews-codec",
                           initializer=background_priority)  # only kernel undo's writer encodes
_decode_pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="gkews-decode")


def plain_header(dtype: str, shape) -> bytes:
    n = ITEMSIZE[dtype]
    for dim in shape:
        n *= dim
    return build_header([("t", dtype, shape, n)])


def encode(data: memoryview, base: memoryview | None = None) -> tuple[list, list]:
    """The frames of `data` (XORed with `base` when given, of the same length); returns (frames, sizes).
    Blocks are compressed on a few threads at once (zstd and numpy let go of the GIL)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    ref = None if base is None else np.frombuffer(base, dtype=np.uint8)

    def one(start: int) -> bytes:
        block = raw[start:start + BLOCK]
        work = block if ref is None else np.bitwise_xor(block, ref[start:start + BLOCK])
        if block.size % SHUFFLE == 0:
            work = np.ascontiguousarray(work.reshape(-1, SHUFFLE).T)
        return zstandard.ZstdCompressor(level=LEVEL).compress(work)
    frames = list(_pool.map(one, range(0, raw.size, BLOCK)))
    return frames, [len(f) for f in frames]


def write(tmp_dir: str, dtype: str, shape, data: memoryview, base_digest: str | None = None,
          base: memoryview | None = None) -> tuple[str, int] | None:
    """Write `data` encoded to a temp file; returns (temp path, size), or None when plain is as good."""
    if data.nbytes > MAX_ENCODED or (base is not None and base.nbytes != data.nbytes):
        return None
    frames, sizes = encode(data, base)
    total = sum(sizes)
    if total > WORTH_IT * data.nbytes:
        return None
    metadata = {"gkews_encoding": ENCODING, "dtype": dtype, "shape": json.dumps(list(shape)),
                "block": str(BLOCK), "frames": json.dumps(sizes), "base": base_digest or ""}
    header = build_header([("encoded", "U8", [total], total)], metadata)
    tmp = temp_path(tmp_dir, ".enc")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _pwrite_all(fd, header, 0)
        offset = len(header)
        for frame in frames:
            _pwrite_all(fd, frame, offset)
            offset += len(frame)
    except BaseException:
        os.close(fd)
        remove_quietly(tmp)
        raise
    os.close(fd)
    return tmp, offset


def metadata(path: str) -> dict:
    """The encoded blob's metadata, checked; raises CorruptBlob."""
    what = f"blob {os.path.basename(path)[:12]}"
    fd = os.open(path, os.O_RDONLY)
    try:
        entries, start = read_header(fd, os.fstat(fd).st_size, what)  # validates offsets and sizes
        meta = json.loads(os.pread(fd, start - 8, 8)).get("__metadata__") or {}
    finally:
        os.close(fd)
    try:
        if meta.get("gkews_encoding") != ENCODING or set(entries) != {"encoded"}:
            raise ValueError(meta.get("gkews_encoding"))
        shape = json.loads(meta["shape"])
        sizes = json.loads(meta["frames"])
        block = int(meta["block"])
        dtype = meta["dtype"]
        if dtype not in ITEMSIZE or block <= 0 or block % 8 or sum(sizes) != entries["encoded"][3] - \
                entries["encoded"][2] or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(meta)
    except (KeyError, TypeError, ValueError):
        raise CorruptBlob(f"{what}: not an encoded blob this version can read "
                          f"(encoding {meta.get('gkews_encoding')!r})") from None
    if not all(isinstance(n, int) and n > 0 for n in sizes):
        raise CorruptBlob(f"{what}: its frame sizes are malformed")
    return {"dtype": dtype, "shape": shape, "block": block, "frames": sizes, "base": meta.get("base") or None,
            "start": start + entries["encoded"][2]}


def base_of(path: str) -> str | None:
    """The blob an encoded blob is XORed with (garbage collection keeps it), or None."""
    try:
        return metadata(path)["base"]
    except (OSError, CorruptBlob):
        return None


def read(path: str, digest: str, into: memoryview | None, read_base) -> tuple[mmap.mmap | None, dict]:
    """Decode `<digest>.enc` into page-aligned memory (or `into`), checking the plain hash; as read_blob.

    read_base(digest) returns a view of the base's tensor bytes."""
    what = f"blob {digest[:12]}"
    meta = metadata(path)
    dtype, shape, block = meta["dtype"], meta["shape"], meta["block"]
    header = plain_header(dtype, shape)
    length = ITEMSIZE[dtype]
    for dim in shape:
        length *= dim
    if (length + block - 1) // block != len(meta["frames"]):
        raise CorruptBlob(f"{what}: {len(meta['frames'])} frames for {length} bytes")
    if into is None:
        buf = private_memory(length)
        view = memoryview(buf)[:length]
    elif len(into) != length:
        raise CorruptBlob(f"{what} holds {length} bytes of data, the manifest expects {len(into)}")
    else:
        buf, view = None, into
    out = np.frombuffer(view, dtype=np.uint8) if length else np.empty(0, np.uint8)
    ref = None
    if meta["base"]:
        ref = np.frombuffer(read_base(meta["base"]), dtype=np.uint8)
        if ref.size != length:
            raise CorruptBlob(f"{what}: its base {meta['base'][:12]} holds {ref.size} bytes, not {length}")
    with open(path, "rb") as f:
        f.seek(meta["start"])
        frames = [f.read(size) for size in meta["frames"]]

    def one(i: int) -> None:
        start = i * block
        target = out[start:start + block]
        try:
            raw = zstandard.ZstdDecompressor().decompress(frames[i], max_output_size=target.size)
        except zstandard.ZstdError as exc:
            raise CorruptBlob(f"{what}: frame {i} does not decompress ({exc})") from None
        if len(raw) != target.size:
            raise CorruptBlob(f"{what}: frame {i} holds {len(raw)} bytes, not {target.size}")
        plain = np.frombuffer(raw, dtype=np.uint8)
        if target.size % SHUFFLE == 0:
            np.copyto(target.reshape(-1, SHUFFLE).T, plain.reshape(SHUFFLE, -1))  # in the source's order: faster
        else:
            target[:] = plain
        if ref is not None:
            np.bitwise_xor(target, ref[start:start + block], out=target)
    list(_decode_pool.map(one, range(len(frames))))  # a restore: the user waits for it
    hasher = new_hasher()
    hasher.update(header)
    hasher.update(view)
    if hasher.hexdigest() != digest:
        raise CorruptBlob(f"{what} does not match its hash: the file {path} was modified or damaged")
    return buf, {"t": (dtype, tuple(shape), 0, length)}
