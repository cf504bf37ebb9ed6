"""Fingerprints of tensor data, computed where the data lives.

CPU bytes: xxh3-128 of the single-tensor safetensors file that would hold them, so the fingerprint of a
tensor stored in its own blob is that blob's name. CUDA storages: an order-independent 64-bit checksum
pair computed by integer kernels on the GPU itself (no copy to the host), so that after a Pod snapshot
restore the weights are proven bit-identical where they sit.
"""
from __future__ import annotations

import ctypes

from .hashing import new_hasher
from .safetensors_io import build_header

DEVICE_ALGORITHM = "sum64"
_MODULUS = 65521
_CHUNK_WORDS = 1 << 24


def cpu_fingerprint(dtype: str, shape, data: memoryview) -> str:
    hasher = new_hasher()
    hasher.update(build_header([("t", dtype, shape, data.nbytes)]))
    hasher.update(data)
    return hasher.hexdigest()


def memory_view(address: int, nbytes: int) -> memoryview:
    """A byte view of memory we own through a live object (a CPU storage or an ndarray)."""
    if nbytes == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")


def device_checksum(untyped_storage) -> str:
    """sum(w) and sum(w * (i mod 65521 + 1)) over the data as int32 words, in wrapping int64 arithmetic.

    Integer sums are exact and associative, so the result is the same on any device and in any order.
    """
    import torch

    nbytes = untyped_storage.nbytes()
    raw = torch.empty(0, dtype=torch.uint8, device=untyped_storage.device)
    raw.set_(untyped_storage, 0, (nbytes,), (1,))
    pad = (-nbytes) % 4
    if pad:
        raw = torch.cat([raw, torch.zeros(pad, dtype=torch.uint8, device=raw.device)])
    words = raw.view(torch.int32)
    s1 = torch.zeros((), dtype=torch.int64, device=raw.device)
    s2 = torch.zeros((), dtype=torch.int64, device=raw.device)
    for start in range(0, words.numel(), _CHUNK_WORDS):
        w = words[start:start + _CHUNK_WORDS].to(torch.int64)
        weights = torch.arange(start, start + w.numel(), dtype=torch.int64, device=raw.device) % _MODULUS + 1
        s1 += w.sum()
        s2 += (w * weights).sum()
    return f"{int(s1) & (2**64 - 1):016x}{int(s2) & (2**64 - 1):016x}"


def storage_fingerprint(untyped_storage, dtype: str, shape, algorithm: str | None = None) -> dict:
    """Fingerprint of a torch storage, on its own device unless a recorded algorithm says otherwise."""
    if algorithm is None:
        algorithm = "xxh3-128" if untyped_storage.device.type == "cpu" else DEVICE_ALGORITHM
    if algorithm == DEVICE_ALGORITHM:
        return {"algorithm": algorithm, "value": device_checksum(untyped_storage)}
    cpu = untyped_storage if untyped_storage.device.type == "cpu" else untyped_storage.cpu()
    mv = memory_view(cpu.data_ptr(), cpu.nbytes())
    return {"algorithm": "xxh3-128", "value": cpu_fingerprint(dtype, shape, mv)}
