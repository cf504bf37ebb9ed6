"""The staging copies of kernel undo: exact bytes, the right name, warm memory reused within its bound."""
from __future__ import annotations

import numpy as np
import pytest

from kernel_state.hashing import new_hasher
from kernel_state.staging_pool import KEEP_FOR, MIN_POOLED, PIECE, StagingPool


@pytest.mark.parametrize("n", [1, 1000, MIN_POOLED - 1, MIN_POOLED, 2 * PIECE, 5 * PIECE + 12345, 37 * PIECE + 1])
def test_a_copy_holds_exactly_the_bytes_and_hashes_them_in_order(n):
    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    expected = new_hasher()
    expected.update(src)
    pool = StagingPool()
    hasher = new_hasher()
    out = pool.copy(memoryview(src), hasher)
    before = src.tobytes()
    assert out.nbytes == n and bytes(out) == before
    assert hasher.hexdigest() == expected.hexdigest()
    src += 1  # the user's next cell changes the source: the copy is private
    assert bytes(out) == before
    unhashed = pool.copy(memoryview(src))  # a torch storage's: named later by the writer
    assert bytes(unhashed) == src.tobytes()


def test_warm_buffers_are_reused_by_size_and_bounded(monkeypatch):
    monkeypatch.setenv("GKEWS_AUTO_STAGING_MB", "3")
    pool = StagingPool()
    first = [pool.copy(memoryview(np.full(PIECE * 2, i, np.uint8)), new_hasher()) for i in range(3)]
    pool.give(first)  # 6 MiB given, 3 MiB kept
    assert pool.bytes == 2 * PIECE
    again = pool.copy(memoryview(np.full(PIECE * 2, 7, np.uint8)), new_hasher())
    assert again.obj is first[0].obj or again.obj is first[1].obj or again.obj is first[2].obj
    assert pool.reused == 2 * PIECE and pool.bytes == 0 and bytes(again[:4]) == b"\x07" * 4
    other = pool.copy(memoryview(np.ones(PIECE * 3, np.uint8)), new_hasher())  # no buffer of that size
    assert all(other.obj is not b.obj for b in first)
    pool.give([again])
    pool.clear()
    assert pool.bytes == 0


def test_a_size_no_snapshot_takes_again_goes_back_to_the_system():
    pool = StagingPool()
    pool.give([pool.copy(memoryview(np.ones(3 * PIECE, np.uint8)))])  # a one-off array's buffer
    for i in range(KEEP_FOR + 1):  # twenty-one snapshots of a tensor of another size
        pool.give([pool.copy(memoryview(np.full(2 * PIECE, i, np.uint8)))])
    assert pool.bytes == 2 * PIECE  # the warm one stays, the one-off went
