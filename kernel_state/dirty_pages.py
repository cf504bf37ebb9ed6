"""Which chunks of a large numpy buffer were written since the last automatic checkpoint.

numpy keeps no version counter, so without help, finding what a cell changed in a 200 MB array means
hashing all of it after every cell. Linux (6.7 on) can say instead: userfaultfd write-protection in
asynchronous mode (UFFD_FEATURE_WP_ASYNC) lets the first write to a protected page through at once,
marking the page written, and PAGEMAP_SCAN (an ioctl on /proc/self/pagemap) lists the written pages
and protects them again in the same step. Kernel undo then hashes only the chunks with such a page.

What it trusts, and what it does not:
- only private anonymous memory (what numpy allocates): shared memory can be written by another
  process, through page tables that are not ours;
- a page that is not present (never touched, discarded with MADV_DONTNEED, swapped out) counts as
  written: its contents are not known to be the same;
- PM_SCAN_CHECK_WPASYNC makes a scan fail when the range is not, or no longer, registered (freed,
  moved, or a new mapping at the same address); the caller then hashes everything, as without it;
- a write that bypasses the page tables is not seen: a device's DMA into host memory registered with
  it (cudaHostRegister, RDMA, io_uring fixed buffers). GKEWS_AUTO_DIRTY_PAGES=0 turns tracking off.
Each first write to a protected page costs a minor fault, in the user's cell: about 1 µs here, ten
times what hashing the page costs. So a numpy buffer with more than 5% of its pages written (or not
present) in one cell is no longer tracked, and hashed from then on; a torch storage stays tracked (its
hash would be due after every cell its version counter cannot vouch for). Ranges may share a page (the
heap packs allocations together): a scan hands what it finds to every range the page falls in. Only
automatic checkpoints ask; a pause's checkpoint and verify always hash what they cannot prove unchanged.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import struct
import threading

PAGE = os.sysconf("SC_PAGE_SIZE")
SYS_USERFAULTFD = {"x86_64": 323, "aarch64": 282}.get(os.uname().machine)
UFFD_USER_MODE_ONLY = 1  # the async mode delivers no fault to anyone: no privilege needed
UFFD_API = 0xAA
UFFD_FEATURE_WP_UNPOPULATED = 1 << 13
UFFD_FEATURE_WP_ASYNC = 1 << 15
UFFDIO_REGISTER_MODE_WP = 1 << 1
UFFDIO_WRITEPROTECT_MODE_WP = 1
PM_SCAN_WP_MATCHING = 1 << 0
PM_SCAN_CHECK_WPASYNC = 1 << 1
PAGE_IS_WRITTEN = 1 << 1
PAGE_IS_PRESENT = 1 << 3
SCAN_ARG = struct.Struct("12Q")  # struct pm_scan_arg
REGIONS = 256
ENV_SWITCH = "GKEWS_AUTO_DIRTY_PAGES"
UNTRACK_ABOVE = 0.05  # of a buffer's bytes written in one cell: from there on, hashing is cheaper


def _iowr(kind: int, nr: int, size: int) -> int:
    return (3 << 30) | (size << 16) | (kind << 8) | nr


UFFDIO_API = _iowr(UFFD_API, 0x3F, 24)
UFFDIO_REGISTER = _iowr(UFFD_API, 0x00, 32)
UFFDIO_UNREGISTER = (2 << 30) | (16 << 16) | (UFFD_API << 8) | 0x01  # _IOR
UFFDIO_WRITEPROTECT = _iowr(UFFD_API, 0x06, 24)
PAGEMAP_SCAN = _iowr(ord("f"), 16, SCAN_ARG.size)


def _refused_before_trying() -> str | None:
    """Why tracking is off without trying it: switched off, or no userfaultfd on this machine."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "off", "no"):
        return f"turned off by {ENV_SWITCH}=0"
    if SYS_USERFAULTFD is None:
        return f"no userfaultfd on {os.uname().machine}"
    return None


class _Region(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64), ("categories", ctypes.c_uint64)]


class DirtyPages:
    """One userfaultfd per process; the page ranges of the buffers it tracks, by (kind, address, size)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._uffd: int | None = None
        self._pagemap: int | None = None
        self._regions = (_Region * REGIONS)()
        self._tracked: dict[tuple, tuple[int, int]] = {}
        # written pages a scan for one buffer found in another's range (they share a page: the heap packs
        # allocations together); that buffer's next written() reports them
        self._pending: dict[tuple, list[tuple[int, int]]] = {}
        self._rewritten: set[tuple] = set()  # written mostly in one cell: hashed from then on
        self.unavailable: str | None = None

    # -- setting up ---------------------------------------------------------------------------------
    def _ready(self) -> bool:
        if self._uffd is not None:
            return True
        if self.unavailable is None:
            self.unavailable = self._open()
        return self.unavailable is None

    def _open(self) -> str | None:
        """None when tracking works here, else why not (said in the automatic checkpoints' status)."""
        refused = _refused_before_trying()
        if refused:
            return refused
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        fd = libc.syscall(SYS_USERFAULTFD, os.O_CLOEXEC | os.O_NONBLOCK | UFFD_USER_MODE_ONLY)
        if fd < 0:
            return f"userfaultfd refused: {os.strerror(ctypes.get_errno())}"
        try:
            wanted = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED
            api = bytearray(struct.pack("QQQ", UFFD_API, wanted, 0))
            fcntl.ioctl(fd, UFFDIO_API, api)
            self._pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            os.close(fd)
            return f"asynchronous write-protection or PAGEMAP_SCAN unsupported (needs Linux 6.7 or later): {exc}"
        self._uffd = fd
        return None

    # -- per buffer ---------------------------------------------------------------------------------
    def track(self, ident: tuple, address: int, nbytes: int) -> bool:
        """Protect a buffer's pages; from now on written() says which chunks changed. Call it before
        hashing the buffer, so a write during the hash is seen next time."""
        with self._lock:
            if ident in self._tracked:
                return True
            if ident in self._rewritten or not self._ready() or not _private_anonymous(address, nbytes):
                return False
            start, end = address - address % PAGE, -(-(address + nbytes) // PAGE) * PAGE
            # Protecting this range protects again the pages it shares with tracked neighbours: first
            # hand what those pages hold written to the neighbours (a neighbour no longer registered,
            # freed or mapped again, is dropped: it is hashed next time)
            for other, (low, high) in list(self._tracked.items()):
                if low < end and start < high and other in self._tracked:
                    pages = self._scan(max(low, start), min(high, end))
                    if pages is None:
                        del self._tracked[other]
                        self._pending.pop(other, None)
                    else:
                        self._credit(pages, None)
            try:
                fcntl.ioctl(self._uffd, UFFDIO_REGISTER,
                            bytearray(struct.pack("QQQQ", start, end - start, UFFDIO_REGISTER_MODE_WP, 0)))
                fcntl.ioctl(self._uffd, UFFDIO_WRITEPROTECT,
                            bytearray(struct.pack("QQQ", start, end - start, UFFDIO_WRITEPROTECT_MODE_WP)))
            except OSError:
                self._unregister(start, end)
                return False
            self._tracked[ident] = (start, end)
            self._pending[ident] = []
            return True

    def written(self, ident: tuple, address: int, nbytes: int, chunk: int, *, keep: bool = False) -> set[int] | None:
        """The chunks with a page written (or not present) since the last call, each protected again;
        None when that is not known: then every chunk must be hashed (and track() called again).
        keep: stay tracked however much was written (a torch storage: its hash would be paid after every
        cell the version counter cannot vouch for, a fault only in the cells that write it)."""
        ranges = self.written_ranges(ident, address, nbytes, keep=keep)
        if ranges is None:
            return None
        chunks = set()
        for first, last in ranges:
            chunks.update(range((first - address) // chunk, (last - 1 - address) // chunk + 1))
        return chunks

    def written_ranges(self, ident: tuple, address: int, nbytes: int, *, keep: bool = False):
        """The same as byte ranges within the buffer ([first, last) addresses), or None."""
        with self._lock:
            span = self._tracked.pop(ident, None)
            if span is None:
                return None
            pending = self._pending.pop(ident, [])
            pages = self._scan(*span)
            if pages is None:
                self._unregister(*span)
                return None
            self._credit(pages, ident)  # what a neighbour sharing those pages has not seen yet
            ranges, dirty = [], 0
            for first, last in pages + pending:
                first, last = max(first, address), min(last, address + nbytes)
                if first < last:
                    ranges.append((first, last))
                    dirty += last - first
            if dirty > UNTRACK_ABOVE * nbytes and not keep:
                self._unregister(*span)  # rewritten: the faults would cost more than the hash
                self._rewritten.add(ident)
            else:
                self._tracked[ident] = span
                self._pending[ident] = []
            return ranges

    def _credit(self, pages: list[tuple[int, int]], scanned_for) -> None:
        """Written pages a scan just protected again: every other tracked range they fall in gets them."""
        for other, (low, high) in self._tracked.items():
            if other == scanned_for:
                continue
            hits = [(max(a, low), min(b, high)) for a, b in pages if a < high and low < b]
            if hits:
                self._pending.setdefault(other, []).extend(hits)

    def tracking(self, ident: tuple) -> bool:
        with self._lock:
            return ident in self._tracked

    def forget(self, ident: tuple) -> None:
        with self._lock:
            self._pending.pop(ident, None)
            span = self._tracked.pop(ident, None)
            if span is not None:
                self._unregister(*span)

    def status(self) -> dict:
        with self._lock:  # before the first array to track: what is known without opening userfaultfd
            off = self.unavailable if self._uffd is not None or self.unavailable else _refused_before_trying()
            return {"tracked": len(self._tracked), "off": off}

    def _scan(self, start: int, end: int) -> list[tuple[int, int]] | None:
        """PAGEMAP_SCAN over [start, end): written or not present pages, protected again at once."""
        out, at = [], start
        while at < end:
            arg = bytearray(SCAN_ARG.pack(
                SCAN_ARG.size, PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC, at, end, 0,
                ctypes.addressof(self._regions), REGIONS, 0,
                PAGE_IS_PRESENT, 0, PAGE_IS_WRITTEN | PAGE_IS_PRESENT, PAGE_IS_WRITTEN | PAGE_IS_PRESENT))
            try:
                count = fcntl.ioctl(self._pagemap, PAGEMAP_SCAN, arg)
            except OSError:  # no longer registered: freed, moved, or another mapping there now
                return None
            out.extend((self._regions[i].start, self._regions[i].end) for i in range(count))
            walked = SCAN_ARG.unpack(arg)[4]
            if count < REGIONS and walked >= end:
                break
            following = max(walked, out[-1][1] if out else at)
            if following <= at:  # no progress: the rest is not known
                return None
            at = following
        return out

    def _unregister(self, start: int, end: int) -> None:
        try:
            fcntl.ioctl(self._uffd, UFFDIO_UNREGISTER, bytearray(struct.pack("QQ", start, end - start)))
        except OSError:
            pass  # already gone with its mapping


def _private_anonymous(address: int, nbytes: int) -> bool:
    """The whole buffer lies in private anonymous mappings (what /proc/self/maps shows without a path)."""
    end, covered = address + nbytes, address
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                low, high = (int(x, 16) for x in fields[0].split("-"))
                if high <= covered or low > covered:
                    continue
                path = fields[5].strip() if len(fields) > 5 else ""
                if fields[1][3] != "p" or (path and path != "[heap]"):
                    return False
                covered = high
                if covered >= end:
                    return True
    except OSError:
        return False
    return False


TRACKER = DirtyPages()
