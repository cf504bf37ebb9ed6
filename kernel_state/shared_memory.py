"""numpy arrays and CPU torch tensors over the same memory (`torch.from_numpy(a)`, `t.numpy()`).

Each kind is saved as a storage of its own, so a restore gave each its own memory: a write through one
no longer showed through the other. A save records, for a storage whose memory lies inside a storage of
the other kind, `view_of: {storage, offset}`; the restore builds it on that storage's memory. When the
two span the same bytes the numpy buffer is the view (the torch storage is the one restored), so a
chain of views always ends: each step is to a storage at least as large, strictly larger from torch to
numpy. Only CPU storages take part: a CUDA tensor shares no memory with an array."""
from __future__ import annotations

import bisect
import math


def links(numpy_spans: dict, torch_spans: dict) -> dict:
    """{storage key: {"storage": the key it views, "offset": bytes}} for every numpy buffer inside a torch
    storage and every torch storage strictly inside a numpy buffer. Spans are {key: (address, nbytes)}."""
    out = {}
    for inner, outer, strict in ((numpy_spans, torch_spans, False), (torch_spans, numpy_spans, True)):
        holders = Spans()
        for key, (address, n) in outer.items():
            holders.add(address, n, key)
        for key, (address, n) in inner.items():
            found = None if key in out else holders.holder(address, n, strict)
            if found is not None:
                begin, holder = found
                out[key] = {"storage": holder, "offset": address - begin}
    return out


class Spans:
    """Memory spans, asked which one holds a given range (bisect over those sorted by start)."""

    def __init__(self):
        self._spans: list[tuple[int, int, int]] = []  # (address, nbytes, index into _keys)
        self._keys: list = []
        self._sorted: list[tuple[int, int, int]] | None = None
        self._reach: list[int] = []  # _reach[i]: the highest end among _sorted[:i + 1]

    def add(self, address: int, nbytes: int, key=None) -> None:
        if nbytes:
            self._spans.append((address, nbytes, len(self._keys)))
            self._keys.append(key)
            self._sorted = None

    def __bool__(self) -> bool:
        return bool(self._spans)

    def hold(self, address: int, nbytes: int) -> bool:
        return self.holder(address, nbytes) is not None

    def overlap(self, address: int, nbytes: int) -> bool:
        """Whether any span shares a byte with [address, address + nbytes)."""
        if not nbytes:
            return False
        self.holder(address, nbytes)  # sorts
        i = bisect.bisect_left(self._sorted, (address + nbytes, -1, -1)) - 1  # the spans that start before its end
        return i >= 0 and self._reach[i] > address

    def holder(self, address: int, nbytes: int, strict: bool = False) -> tuple[int, object] | None:
        """(start, key) of a span holding [address, address + nbytes) (with strict, a larger one), or None."""
        if not nbytes:
            return None
        if self._sorted is None:
            self._sorted, furthest, self._reach = sorted(self._spans), 0, []
            for begin, size, _ in self._sorted:
                furthest = max(furthest, begin + size)
                self._reach.append(furthest)
        # a holder starts at or before it; walking back stops where none before can reach its end
        i = bisect.bisect_right(self._sorted, (address, math.inf, math.inf)) - 1
        while i >= 0 and self._reach[i] >= address + nbytes:
            begin, size, index = self._sorted[i]
            if address + nbytes <= begin + size and (size > nbytes or not strict):
                return begin, self._keys[index]
            i -= 1
        return None


class _TensorMemory:
    """Lends a tensor storage's bytes to numpy (`__array_interface__`) and keeps the storage alive. The
    array's base is this object, as a `t.numpy()` array's base is a tensor: not an array, so the restored
    array is its own root, of its own dtype, as it was."""

    def __init__(self, storage, offset: int, dtype, shape):
        self.storage = storage
        interface = {"data": (storage.data_ptr() + offset, False), "shape": tuple(shape), "version": 3}
        interface["typestr"] = dtype.str
        if dtype.fields is not None:
            interface["descr"] = dtype.descr
        self.__array_interface__ = interface


def tensor_memory(storage, offset: int, dtype, shape):
    """An array of `dtype` and `shape` on a CPU torch storage's memory from `offset` on."""
    import numpy as np

    if math.prod(shape) == 0:
        return np.empty(shape, dtype)
    try:
        return np.asarray(_TensorMemory(storage, offset, dtype, shape))
    except ValueError:  # overlapping fields, which dtype.descr cannot state: as raw records, viewed
        return np.asarray(_TensorMemory(storage, offset, np.dtype(f"V{dtype.itemsize}"), shape)).view(dtype)
