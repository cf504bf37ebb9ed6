"""Dirty-page tracking for kernel undo: which chunks of a large array a cell wrote, and when not to trust it."""
from __future__ import annotations

import ctypes
import mmap
import platform

import numpy as np
import pytest

from kernel_state.dirty_pages import PAGE, DirtyPages

CHUNK = 1 << 20
N = 8 * CHUNK  # eight chunks
_linux = tuple(int(x) for x in platform.release().split(".")[:2] if x.isdigit()) if platform.system() == "Linux" else ()
supported = len(_linux) == 2 and _linux >= (6, 7)  # asynchronous write-protection and PAGEMAP_SCAN


def _buffer():
    """Eight chunks of private anonymous memory of their own, filled: what numpy allocates for a large
    array (mapped here directly, so no neighbour in the same pages can write)."""
    arr = np.frombuffer(mmap.mmap(-1, N, flags=mmap.MAP_PRIVATE), np.uint8)
    arr[:] = 1
    return arr


def _tracked(tracker: DirtyPages, arr):
    ident = ("numpy", arr.ctypes.data, arr.nbytes)
    assert tracker.track(ident, arr.ctypes.data, arr.nbytes), tracker.unavailable
    return ident


def _written(tracker, ident):
    return tracker.written(ident, ident[1], ident[2], CHUNK)


@pytest.fixture
def tracker():
    if not supported:
        t = DirtyPages()
        arr = np.ones(N, np.uint8)
        assert not t.track(("numpy", arr.ctypes.data, N), arr.ctypes.data, N)
        assert t.unavailable  # says why, and every chunk is hashed as before
        pytest.skip(f"Linux {platform.release()} has no asynchronous write-protection (6.7 or later)")
    return DirtyPages()


def test_it_names_the_chunks_a_cell_wrote_and_only_those(tracker):
    arr = _buffer()
    ident = _tracked(tracker, arr)
    assert _written(tracker, ident) == set()
    arr[3 * CHUNK + 5] = 7
    arr[6 * CHUNK - 1] = 7  # the last byte of chunk 5
    assert _written(tracker, ident) == {3, 5}
    assert _written(tracker, ident) == set()  # protected again by the scan
    np.copyto(arr[CHUNK:CHUNK + 10], 9)
    assert _written(tracker, ident) == {1}
    assert tracker.tracking(ident)


def test_a_write_by_the_kernel_itself_counts(tracker, tmp_path):
    arr = _buffer()
    ident = _tracked(tracker, arr)
    path = tmp_path / "data"
    path.write_bytes(b"x" * 3 * PAGE)
    with open(path, "rb") as f:  # read(2) into the array: no user-space store touches the pages
        f.readinto(memoryview(arr)[7 * CHUNK:7 * CHUNK + 3 * PAGE])
    assert _written(tracker, ident) == {7}


def test_discarded_pages_count_as_written(tracker):
    arr = _buffer()
    ident = _tracked(tracker, arr)
    start = arr.ctypes.data + 2 * CHUNK
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(PAGE), 4) == 0  # MADV_DONTNEED: zeros now
    assert arr[start - arr.ctypes.data] == 0
    assert _written(tracker, ident) == {2}


def test_a_buffer_a_cell_rewrote_in_large_part_is_hashed_from_then_on(tracker):
    """Each first write to a protected page costs a fault in the user's cell: with more than 5% of the
    pages written, hashing is cheaper, and the buffer is no longer protected."""
    arr = _buffer()
    ident = _tracked(tracker, arr)
    arr[:CHUNK // 32] += 1  # 0.4%: stays tracked
    assert _written(tracker, ident) == {0} and tracker.tracking(ident)
    arr[:CHUNK] += 1  # 12.5%
    assert _written(tracker, ident) == {0}
    assert not tracker.tracking(ident)
    assert _written(tracker, ident) is None  # not known: the caller hashes every chunk


def test_memory_mapped_again_at_the_same_address_is_not_trusted(tracker):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    address = libc.mmap(None, N, prot, flags, -1, 0)
    arr = np.frombuffer((ctypes.c_char * N).from_address(address), np.uint8)
    arr[:] = 1
    ident = ("numpy", address, N)
    assert tracker.track(ident, address, N)
    assert libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(N)) == 0
    again = libc.mmap(address, N, prot, flags | 0x10, -1, 0)  # MAP_FIXED: a new buffer, same place and size
    assert again == address
    assert _written(tracker, ident) is None
    libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(N))


def test_shared_memory_is_never_tracked(tracker):
    shared = mmap.mmap(-1, N)  # MAP_SHARED: another process may write it through its own page tables
    arr = np.frombuffer(shared, np.uint8)
    assert not tracker.track(("numpy", arr.ctypes.data, N), arr.ctypes.data, N)
    del arr
    shared.close()


def test_overlapping_ranges_never_steal_each_others_writes(tracker):
    """A scan protects what it reports; a page two tracked buffers share (the heap packs allocations
    together, a view overlaps its base) is reported to both, whichever scans first."""
    arr = _buffer()
    whole = _tracked(tracker, arr)
    part = arr[:4 * CHUNK]
    inner = _tracked(tracker, part)
    arr[5] = 3
    assert _written(tracker, inner) == {0}
    assert _written(tracker, whole) == {0}  # scanned for inner first: not lost
    assert _written(tracker, inner) == set() and _written(tracker, whole) == set()
    arr[4 * CHUNK - 1] = 4  # the last page of inner
    arr[6 * CHUNK] = 5  # only whole
    assert _written(tracker, whole) == {3, 6}
    assert _written(tracker, inner) == {3}


def test_neighbours_sharing_a_page_both_see_a_write_to_it(tracker):
    """Two buffers packed into one mapping, the boundary page shared (not page-aligned, as heap blocks)."""
    arr = _buffer()
    cut = 3 * CHUNK + 100
    a, b = arr[:cut], arr[cut:]
    ia = ("heap", a.ctypes.data, a.nbytes)
    ib = ("heap", b.ctypes.data, b.nbytes)
    assert tracker.track(ia, *ia[1:]) and tracker.track(ib, *ib[1:])  # b's protection keeps a's writes
    a[cut - 1] = 9  # a's last byte: in the page b starts in
    assert tracker.written(ib, ib[1], ib[2], CHUNK) == {0}  # b's first chunk holds that page too
    assert tracker.written(ia, ia[1], ia[2], CHUNK) == {3}
    b[0] = 7
    assert tracker.written(ia, ia[1], ia[2], CHUNK) == {3}
    assert tracker.written(ib, ib[1], ib[2], CHUNK) == {0}
    assert tracker.written(ia, ia[1], ia[2], CHUNK) == set() and tracker.written(ib, ib[1], ib[2], CHUNK) == set()


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("GKEWS_AUTO_DIRTY_PAGES", "0")
    tracker = DirtyPages()
    # said before any array is large enough to track (`auto status` showed it as on until then)
    assert tracker.status() == {"tracked": 0, "off": "turned off by GKEWS_AUTO_DIRTY_PAGES=0"}
    arr = np.ones(N, np.uint8)
    assert not tracker.track(("numpy", arr.ctypes.data, N), arr.ctypes.data, N)
    assert "GKEWS_AUTO_DIRTY_PAGES=0" in tracker.unavailable


def test_more_written_ranges_than_one_scan_returns(tracker):
    arr = _buffer()
    ident = _tracked(tracker, arr)
    arr[4 * CHUNK:7 * CHUNK:2 * PAGE] = 9  # every other page of three chunks: more ranges than one scan holds
    assert _written(tracker, ident) == {4, 5, 6}
