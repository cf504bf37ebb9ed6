"""mix64 on CUDA in one pass over memory: a Triton kernel that mixes each word and sums a block of them.

The jiterator kernel of fingerprint.py writes every summand before torch sums them, and needs a tensor of
positions beside the words (four passes over memory); the unfused ops take about thirty. This one reads each
word once and writes one int64 per block of words, which torch then sums. All arithmetic is int64, which
wraps modulo 2^64 like the uint64 of the definition: a right shift is made logical by masking the sign
bits off, as in fingerprint.mix64_terms. It is used only after it gave mix64_terms' sum for test vectors on
that device (a Triton or compiler that computes otherwise is never trusted); without Triton, or when the
check fails, fingerprint.py falls back to its own kernels. The value is the same either way.
"""
from __future__ import annotations

BLOCK = 2048  # words per program: 16 KiB read, one int64 written
_kernel = None
_checked: dict = {}  # device type -> the checked block-sum function, or None where it cannot be used


def _compile():
    import triton
    import triton.language as tl

    @triton.jit
    def mix64_block_sums(words, sums, n, start, pkey, m1, m2, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(words + offs, mask=mask, other=0)
        x = x ^ ((offs + start) * pkey)  # 2147483647 below: the 31 bits an unsigned shift by 33 keeps
        x = x ^ ((x >> 33) & 2147483647)
        x = x * m1
        x = x ^ ((x >> 33) & 2147483647)
        x = x * m2
        x = x ^ ((x >> 33) & 2147483647)
        x = tl.where(mask, x, 0)
        tl.store(sums + pid, tl.sum(x, axis=0))
    return mix64_block_sums


def _block_sums(words, start: int):
    """Sum over i of fmix64(words[i] XOR ((start + i) * P)), modulo 2^64, as a 0-d int64 tensor on the
    words' device (words: contiguous int64, non-empty)."""
    import torch

    from .fingerprint import _FMIX, POSITION_KEY, _signed

    n = words.numel()
    blocks = -(-n // BLOCK)
    sums = torch.empty(blocks, dtype=torch.int64, device=words.device)
    with torch.cuda.device(words.device):
        _kernel[(blocks,)](words, sums, n, start, _signed(POSITION_KEY), _signed(_FMIX[0][1]),
                           _signed(_FMIX[1][1]), BLOCK=BLOCK)
    return sums.sum()


def block_sums_for(device):
    """The one-pass sum for this device once it proved equal to mix64_terms' sums; None otherwise."""
    global _kernel
    if device.type != "cuda":
        return None
    if device.type not in _checked:
        try:
            if _kernel is None:
                _kernel = _compile()
            _checked[device.type] = _block_sums if agrees(_block_sums, device) else None
        except Exception:  # no Triton, no compiler for this GPU, a launch error: the other kernels work anyway
            _checked[device.type] = None
    return _checked[device.type]


def agrees(block_sums, device) -> bool:
    """Whether block_sums(words, start) gives equal mix64_terms' on vectors with every bit pattern, several blocks and a
    partial one, at position 0 and far from it."""
    import torch

    from .fingerprint import mix64_terms

    gen = torch.Generator(device="cpu").manual_seed(64)
    for n, start in ((4099, 0), (3 * BLOCK + 5, 1 << 40), (1, 7)):
        words = torch.randint(-(1 << 63), (1 << 63) - 1, (n,), dtype=torch.int64, generator=gen)
        words[:4] = torch.tensor([0, -1, -(1 << 63), (1 << 63) - 1])[:n]
        want = mix64_terms(words, torch.arange(start, start + n, dtype=torch.int64)).sum()
        if int(block_sums(words.to(device), start)) != int(want):
            return False
    return True
