"""The device fingerprint (mix64): any change of any element is seen, at every distance.

mix64 runs the same torch integer ops on the CPU and on CUDA; these tests run it on the CPU (test_cuda.py
runs it on the GPU). The exhaustive checks use the documented definition, fingerprint = sum of one term per
64-bit word plus a length term, which test_mix64_is_the_documented_sum ties to the real function.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernel_state.fingerprint import LENGTH_KEY, POSITION_KEY, Mix64Batch, device_checksum, fmix64, mix64, mix64_terms

torch = pytest.importorskip("torch", reason="the torch extra is installed by make test")

U64 = (1 << 64) - 1
DISTANCES = 1 << 17
N = DISTANCES + 20_000  # float32 elements (even: whole 64-bit words); every distance up to 2^17 fits


def fp(t: torch.Tensor) -> str:
    return mix64(t.contiguous().untyped_storage())


def terms(words: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The summands of mix64 for these (position, 64-bit word) pairs, as uint64."""
    out = mix64_terms(torch.from_numpy(np.ascontiguousarray(words).view(np.int64)),
                      torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)))
    return out.numpy().view(np.uint64)


def test_mix64_is_the_documented_sum():
    """Python integers, no torch: sum of fmix64(w_i ^ i*P) over the zero-padded words, plus the length."""
    rng = np.random.default_rng(1)
    for nbytes in (0, 1, 7, 8, 9, 4004, 1 << 16):
        data = rng.integers(0, 256, nbytes, dtype=np.uint8)
        padded = np.concatenate([data, np.zeros(-nbytes % 8, dtype=np.uint8)]).view(np.uint64)
        want = sum(fmix64(int(w) ^ ((i * POSITION_KEY) & U64)) for i, w in enumerate(padded.tolist()))
        want = (want + fmix64(nbytes ^ LENGTH_KEY)) & U64
        assert fp(torch.from_numpy(data.copy())) == f"{want:016x}"


def test_mix64_is_the_same_in_chunks(monkeypatch):
    """The chunked loop (large storages) gives the same value as one pass: positions carry across chunks."""
    import kernel_state.fingerprint as f
    t = torch.randn(100_003)
    whole = fp(t)
    monkeypatch.setattr(f, "_CHUNK_WORDS", 1000)
    assert fp(t) == whole


def test_a_fused_kernel_is_used_only_when_it_gives_the_same_summands(monkeypatch):
    """On CUDA the summands come from a fused kernel, checked first against mix64_terms (the GPU run of
    test_cuda.py uses the real one); here stand-ins take its place."""
    import kernel_state.fingerprint as f
    cpu = torch.device("cpu")
    assert f._checked(lambda: f.mix64_terms, cpu) is f.mix64_terms
    assert f._checked(lambda: (lambda w, p: f.mix64_terms(w, p + 1)), cpu) is None  # other summands
    assert f._checked(lambda: (lambda w, p: f.mix64_terms(w, p).to(torch.float64)), cpu) is None
    assert f._checked(lambda: 1 / 0, cpu) is None  # it could not be compiled
    assert f.fused_terms(cpu) is None

    t = torch.randn(100_003)
    unfused, calls = fp(t), []
    monkeypatch.setattr(f, "_CHUNK_WORDS", 1000)
    monkeypatch.setattr(f, "fused_terms", lambda device: lambda w, p: calls.append(1) or f.mix64_terms(w, p))
    assert fp(t) == unfused and len(calls) == 51  # every chunk through it, and the same value


def test_the_one_pass_kernel_is_used_only_when_its_sums_agree(monkeypatch):
    """On CUDA with Triton, mix64 takes one pass (kernel_state/fingerprint_triton.py), checked first against
    mix64_terms' sums (the GPU run of test_cuda.py uses the real one); here a stand-in takes its place."""
    import kernel_state.fingerprint as f
    import kernel_state.fingerprint_triton as ft
    cpu = torch.device("cpu")

    def reference(words, start):
        return f.mix64_terms(words, torch.arange(start, start + words.numel())).sum()
    assert ft.agrees(reference, cpu)
    assert not ft.agrees(lambda w, start: reference(w, start + 1), cpu)  # positions off by one
    assert not ft.agrees(lambda w, start: reference(w[1:], start + 1) if w.numel() > 1 else reference(w, start),
                         cpu)  # a word skipped
    assert ft.block_sums_for(cpu) is None and f.kernel_name(cpu) == "unfused torch ops"

    t = torch.randn(100_003)
    unfused, calls = fp(t), []
    monkeypatch.setattr(f, "block_sums_for", lambda device: lambda w, s: calls.append(w.numel()) or reference(w, s))
    assert fp(t) == unfused and calls == [100_003 // 2]  # the whole words in one call, the same value


def test_a_batch_gives_each_storage_its_own_fingerprint():
    """Mix64Batch queues many storages and reads their sums back at once (a save's one wait for the GPU):
    each value is that storage's mix64, whatever its length, and an unknown key has none."""
    parts = [torch.randn(100_003), torch.zeros(0), torch.arange(13, dtype=torch.uint8), torch.randn(64).half()]
    batch = Mix64Batch()
    for i, part in enumerate(parts):
        batch.add(i, part.untyped_storage())
    assert [batch.get(i) for i in range(len(parts))] == [
        {"algorithm": "mix64", "value": fp(part)} for part in parts]
    assert batch.get("other") is None


def test_one_bit_of_any_element_changes_the_fingerprint():
    t = torch.randn(4097)
    base = fp(t)
    raw = t.view(torch.int32)
    for index in (0, 1, 2047, 4095, 4096):
        for bit in (0, 15, 22, 31):  # mantissa, exponent, sign
            u = raw.clone()
            u[index] ^= (1 << bit) if bit < 31 else -(1 << 31)
            assert fp(u.view(torch.float32)) != base, (index, bit)


def test_trailing_zero_bytes_and_length_are_seen():
    assert fp(torch.zeros(3, dtype=torch.uint8)) != fp(torch.zeros(4, dtype=torch.uint8))
    assert fp(torch.zeros(8, dtype=torch.uint8)) != fp(torch.zeros(16, dtype=torch.uint8))


def test_the_old_sum64_blind_spots_are_seen_now():
    """Issue 11 problem 14: swapping two elements 65521 apart, or rotating by 65521, kept sum64 equal."""
    t = torch.randn(2 * 65521)  # float32: one int32 word each, as sum64 reads them
    swapped = t.clone()
    swapped[[0, 65521]] = t[[65521, 0]]
    rotated = torch.roll(t, 65521)
    for changed in (swapped, rotated):
        assert device_checksum(changed.untyped_storage()) == device_checksum(t.untyped_storage())  # the old bug
        assert fp(changed) != fp(t)


def test_swaps_at_every_distance_up_to_2_17_are_seen():
    """Swap float32 element a with a+d for every d in 1..2^17 (a = 0 and an odd a): the fingerprint changes.

    Vectorised with the terms of the two (or one) words a swap changes; spot-checked on real tensors."""
    rng = np.random.default_rng(2)
    elements = rng.permutation(np.arange(1, N + 1, dtype=np.uint32))  # all distinct: every swap is a change
    words = elements.view(np.uint64)
    d = np.arange(1, DISTANCES + 1)
    for a in (0, 12345):
        b = a + d
        wa, wb = np.full_like(d, a // 2), b // 2
        new_wa = elements.reshape(-1, 2)[wa]  # (D, 2): a copy of word wa per distance, as two halves
        new_wa[:, a % 2] = elements[b]
        new_wb = elements.reshape(-1, 2)[wb]
        new_wb[:, b % 2] = elements[a]
        same = wa == wb  # a and b in one word: that word holds both swapped elements
        new_wb[same] = new_wa[same]
        new_wb[same, b[same] % 2] = elements[a]
        before_a = terms(words[wa], wa)
        before_b = terms(words[wb], wb)
        after_a = terms(new_wa.view(np.uint64).ravel(), wa)
        after_b = terms(new_wb.view(np.uint64).ravel(), wb)
        with np.errstate(over="ignore"):
            delta = np.where(same, after_b - before_b, after_a + after_b - before_a - before_b)
        assert np.count_nonzero(delta == 0) == 0, d[delta == 0][:10]

    base = torch.from_numpy(elements.view(np.float32).copy())
    for dist in [1, 2, 3, 65521, 2 * 65521, 1 << 16, 1 << 17, *rng.integers(1, DISTANCES, 20)]:
        swapped = base.clone()
        swapped[[0, dist]] = base[[dist, 0]]
        assert fp(swapped) != fp(base), dist


def test_rotations_at_every_distance_up_to_2_17_are_seen():
    """Rotate a tensor by every d in 1..2^17 (float32 elements): the fingerprint changes.

    The tensor is zero except for three elements, so each rotation changes at most six words and all 2^17
    rotations are checked through those words' terms; dense rotations are spot-checked on real tensors."""
    rng = np.random.default_rng(3)
    positions = np.array([0, 40_001, 40_002])
    values = np.array([0x3F800001, 0xBF7FFFFF, 0x00000001], dtype=np.uint32)
    d = np.arange(0, DISTANCES + 1)  # d = 0 is the original

    def total(shift: np.ndarray) -> np.ndarray:
        """mix64 of the rotated sparse tensor minus mix64 of zeros, per shift (uint64, wrapping)."""
        q = (positions[None, :] + shift[:, None]) % N  # (D, 3) element positions
        word, half = q // 2, q % 2
        out = np.zeros(len(shift), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for j in range(3):
                # the word holding element j, with every element that shares it
                w = np.zeros((len(shift), 2), dtype=np.uint32)
                first = np.ones(len(shift), dtype=bool)
                for k in range(3):
                    here = word[:, k] == word[:, j]
                    w[here, half[here, k]] = values[k]
                    if k < j:
                        first &= ~here  # count a shared word once, at its first element
                wj = w.view(np.uint64).ravel()
                contrib = terms(wj, word[:, j]) - terms(np.zeros_like(wj), word[:, j])
                out += np.where(first, contrib, np.uint64(0))
        return out

    sums = total(d)
    assert np.count_nonzero(sums[1:] == sums[0]) == 0, d[1:][sums[1:] == sums[0]][:10]

    sparse = np.zeros(N, dtype=np.uint32)
    sparse[positions] = values
    zeros = int(fp(torch.zeros(N, dtype=torch.float32)), 16)
    for shift in (0, 1, 2, 65521, DISTANCES):  # the model above is the real function
        rotated = torch.from_numpy(np.roll(sparse, shift).view(np.float32).copy())
        assert int(fp(rotated), 16) == (zeros + int(sums[shift])) & U64

    dense = torch.randn(N)
    for shift in [1, 2, 65521, 2 * 65521, 1 << 16, 1 << 17, *rng.integers(1, DISTANCES, 20)]:
        assert fp(torch.roll(dense, int(shift))) != fp(dense), shift
