"""Fingerprints of tensor data, computed where the data lives.

CPU bytes: xxh3-128 of the single-tensor safetensors file that would hold them, so the fingerprint of a
tensor stored in its own blob is that blob's name. CUDA storages: `mix64`, computed by torch integer ops on
the GPU itself (no copy to the host), so that after a Pod snapshot restore the weights are proven
bit-identical where they sit.

mix64 reads the bytes as little-endian 64-bit words w_i (the last one zero-padded) and sums, modulo 2^64,
fmix64(w_i XOR (i * P)) over every position i, plus fmix64(nbytes XOR L). fmix64 is MurmurHash3's 64-bit
finalizer (a bijection that mixes every bit into every other); P is odd, so each position has its own key.
Any change of any element changes its term (fmix64 is a bijection), and several changes cancel only by
chance, about 2^-64, whatever their distance: a swap or a rotation moves values to positions with other
keys. Sums modulo 2^64 are exact and associative: the value is the same on any device and in any order.

`sum64`, the algorithm of earlier versions, is kept to verify the checkpoints that recorded it; it cannot
see a swap or a rotation by a multiple of 65521 words.
"""
from __future__ import annotations

import ctypes
import functools

from .fingerprint_triton import block_sums_for
from .hashing import new_hasher
from .safetensors_io import build_header

DEVICE_ALGORITHM = "mix64"
LEGACY_DEVICE_ALGORITHM = "sum64"
_WORD = 8
_CHUNK_WORDS = 1 << 23  # 64 MiB of int64 per temporary buffer
_U64 = (1 << 64) - 1


def _signed(x: int) -> int:
    """A 64-bit constant as the int64 torch computes with (the same bits)."""
    x &= _U64
    return x - (1 << 64) if x >> 63 else x


POSITION_KEY = 0x9E3779B97F4A7C15  # odd: i -> i * P is a bijection modulo 2^64
LENGTH_KEY = 0x243F6A8885A308D3
_FMIX = ((33, 0xFF51AFD7ED558CCD), (33, 0xC4CEB9FE1A85EC53), (33, None))


def fmix64(x: int) -> int:
    """MurmurHash3's finalizer on a Python int: the reference the torch version must equal."""
    x &= _U64
    for shift, mul in _FMIX:
        x ^= x >> shift
        if mul is not None:
            x = (x * mul) & _U64
    return x


def mix64_terms(words, positions):
    """fmix64(w XOR i * P) per word, as int64 tensors on the words' device: the summands of mix64."""
    import torch

    v = positions.to(torch.int64) * _signed(POSITION_KEY)
    v.bitwise_xor_(words)
    t = torch.empty_like(v)
    for shift, mul in _FMIX:
        torch.bitwise_right_shift(v, shift, out=t)
        t.bitwise_and_((1 << (64 - shift)) - 1)  # torch shifts int64 arithmetically: keep it logical
        v.bitwise_xor_(t)
        if mul is not None:
            v.mul_(_signed(mul))  # wraps modulo 2^64
    return v


# On CUDA the summands come from one fused kernel (torch's jiterator compiles it with NVRTC on first use):
# mix64_terms takes about 30 passes over memory, this one reads the words and positions once. It is used
# only after it gave the same summands as mix64_terms for a test vector on that device; otherwise (no
# NVRTC, a build without the jiterator) mix64_terms stays in use. The value is the same either way.
_FUSED_SOURCE = """
template <typename T> T gkews_mix64_terms(T word, T position) {
  unsigned long long x = (unsigned long long)word ^ ((unsigned long long)position * 0x%016xull);
  x ^= x >> 33; x *= 0x%016xull;
  x ^= x >> 33; x *= 0x%016xull;
  x ^= x >> 33;
  return (T)x;
}
""" % (POSITION_KEY, _FMIX[0][1], _FMIX[1][1])
_fused: dict = {}  # device type -> the checked kernel, or None where it cannot be used


def kernel_name(device) -> str:
    """Which mix64 kernel runs on this device (the benchmarks print it)."""
    if block_sums_for(device) is not None:
        return "one-pass Triton kernel"
    return "fused jiterator kernel" if fused_terms(device) else "unfused torch ops"


def fused_terms(device):
    """The fused summand kernel for this device, once it proved equal to mix64_terms; None otherwise."""
    if device.type != "cuda":
        return None
    if device.type not in _fused:
        _fused[device.type] = _checked(_compile_fused, device)
    return _fused[device.type]


def _compile_fused():
    import torch
    return torch.cuda.jiterator._create_jit_fn(_FUSED_SOURCE)


def _checked(make, device):
    """make()'s kernel when its summands equal mix64_terms' on a vector with every bit pattern; else None."""
    import torch
    try:
        kernel = make()
        gen = torch.Generator(device="cpu").manual_seed(64)
        words = torch.randint(-(1 << 63), (1 << 63) - 1, (4099,), dtype=torch.int64, generator=gen)
        words[:4] = torch.tensor([0, -1, -(1 << 63), (1 << 63) - 1])
        positions = torch.arange(1 << 40, (1 << 40) + words.numel(), dtype=torch.int64)
        want = mix64_terms(words, positions)
        got = kernel(words.to(device), positions.to(device))
        return kernel if got.dtype == torch.int64 and torch.equal(got.cpu(), want) else None
    except Exception:  # no NVRTC, no jiterator in this build, a compile error: the unfused ops work anyway
        return None


def mix64(untyped_storage) -> str:
    """The mix64 fingerprint of a torch storage, computed on its own device (16 hex digits)."""
    return _mix64_value(int(_mix64_sum(untyped_storage)), untyped_storage.nbytes())


def _mix64_sum(untyped_storage):
    """The sum of a storage's mix64 terms as a 0-d int64 tensor on its device, queued there, not waited for."""
    import torch

    nbytes = untyped_storage.nbytes()
    device = untyped_storage.device
    raw = torch.empty(0, dtype=torch.uint8, device=device)
    raw.set_(untyped_storage, 0, (nbytes,), (1,))
    whole = nbytes // _WORD
    words = raw[:whole * _WORD].view(torch.int64)
    total = torch.zeros((), dtype=torch.int64, device=device)
    one_pass = block_sums_for(device)
    if one_pass is not None and whole:
        total += one_pass(words, 0)
    else:
        terms = fused_terms(device) or mix64_terms
        for start in range(0, whole, _CHUNK_WORDS):
            chunk = words[start:start + _CHUNK_WORDS]
            positions = torch.arange(start, start + chunk.numel(), dtype=torch.int64, device=device)
            total += terms(chunk, positions).sum()
    if nbytes % _WORD:  # the last partial word, zero-padded (the length term tells padding from zeros)
        tail = torch.zeros(_WORD, dtype=torch.uint8, device=device)
        tail[:nbytes % _WORD] = raw[whole * _WORD:]
        total += mix64_terms(tail.view(torch.int64), torch.tensor([whole], device=device)).sum()
    return total


def _mix64_value(total: int, nbytes: int) -> str:
    return f"{(total + fmix64(nbytes ^ LENGTH_KEY)) & _U64:016x}"


class Mix64Batch:
    """mix64 of many storages with one wait per device instead of one per storage: each add() queues its
    kernels on the device, and the first get() reads every sum back at once. A save of a model of many
    layers otherwise waits for the GPU once per parameter, with the GPU idle while Python queues the next."""

    def __init__(self):
        self._queued: dict = {}  # key -> (0-d sum on the device, nbytes)
        self._values: dict = {}  # key -> the fingerprint

    def add(self, key, untyped_storage) -> None:
        self._queued[key] = (_mix64_sum(untyped_storage), untyped_storage.nbytes())

    def get(self, key):
        """The fingerprint ({"algorithm", "value"}) queued under key, or None."""
        if self._queued:
            self._read_back()
        return self._values.get(key)

    def _read_back(self) -> None:
        import torch

        by_device: dict = {}
        for key, (total, nbytes) in self._queued.items():
            by_device.setdefault(total.device, []).append((key, total, nbytes))
        for entries in by_device.values():
            sums = torch.stack([total for _, total, _ in entries]).tolist()  # the one wait
            for (key, _, nbytes), total in zip(entries, sums):
                self._values[key] = {"algorithm": DEVICE_ALGORITHM, "value": _mix64_value(total, nbytes)}
        self._queued.clear()


def cpu_fingerprint(dtype: str, shape, data: memoryview) -> str:
    hasher = new_hasher()
    hasher.update(_header(dtype, tuple(shape), data.nbytes))
    hasher.update(data)
    return hasher.hexdigest()


@functools.lru_cache(maxsize=4096)  # many small tensors share a layout: one JSON header each, not per tensor
def _header(dtype: str, shape: tuple, nbytes: int) -> bytes:
    return build_header([("t", dtype, shape, nbytes)])


def memory_view(address: int, nbytes: int) -> memoryview:
    """A byte view of memory we own through a live object (a CPU storage or an ndarray)."""
    if nbytes == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")


def device_checksum(untyped_storage) -> str:
    """sum64 (earlier versions): sum(w) and sum(w * (i mod 65521 + 1)) over the data as int32 words, in
    wrapping int64 arithmetic. Only to verify checkpoints that recorded it."""
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
    for start in range(0, words.numel(), 1 << 24):
        w = words[start:start + (1 << 24)].to(torch.int64)
        weights = torch.arange(start, start + w.numel(), dtype=torch.int64, device=raw.device) % 65521 + 1
        s1 += w.sum()
        s2 += (w * weights).sum()
    return f"{int(s1) & _U64:016x}{int(s2) & _U64:016x}"


def on_device(untyped_storage) -> bool:
    """Whether a storage is fingerprinted where it lives (mix64) rather than as the blob it is saved as."""
    return untyped_storage.device.type != "cpu"


_DEVICE_ALGORITHMS = {DEVICE_ALGORITHM: mix64, LEGACY_DEVICE_ALGORITHM: device_checksum}


def storage_fingerprint(untyped_storage, dtype: str, shape, algorithm: str | None = None) -> dict:
    """Fingerprint of a torch storage, on its own device unless a recorded algorithm says otherwise."""
    if algorithm is None:
        algorithm = DEVICE_ALGORITHM if on_device(untyped_storage) else "xxh3-128"
    if algorithm in _DEVICE_ALGORITHMS:
        return {"algorithm": algorithm, "value": _DEVICE_ALGORITHMS[algorithm](untyped_storage)}
    cpu = untyped_storage if untyped_storage.device.type == "cpu" else untyped_storage.cpu()
    mv = memory_view(cpu.data_ptr(), cpu.nbytes())
    return {"algorithm": "xxh3-128", "value": cpu_fingerprint(dtype, shape, mv)}
