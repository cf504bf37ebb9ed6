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
        starts = sorted((address, n, key) for key, (address, n) in outer.items() if n)
        reach, furthest = [], 0  # reach[i]: the highest end among starts[:i + 1]
        for begin, size, _key in starts:
            furthest = max(furthest, begin + size)
            reach.append(furthest)
        for key, (address, n) in inner.items():
            if not n or key in out:
                continue
            # a holder starts at or before it; walking back stops where none before can reach its end
            i = bisect.bisect_right(starts, (address, float("inf"), "")) - 1
            while i >= 0 and reach[i] >= address + n:
                begin, size, holder = starts[i]
                if address + n <= begin + size and (size > n or not strict):
                    out[key] = {"storage": holder, "offset": address - begin}
                    break
                i -= 1
    return out


class Spans:
    """Memory spans, asked whether one holds a given range (bisect over those sorted by start)."""

    def __init__(self):
        self._spans: list[tuple[int, int]] = []
        self._sorted: list[tuple[int, int]] | None = None
        self._reach: list[int] = []

    def add(self, address: int, nbytes: int) -> None:
        if nbytes:
            self._spans.append((address, nbytes))
            self._sorted = None

    def __bool__(self) -> bool:
        return bool(self._spans)

    def hold(self, address: int, nbytes: int) -> bool:
        if self._sorted is None:
            self._sorted, furthest, self._reach = sorted(self._spans), 0, []
            for begin, size in self._sorted:
                furthest = max(furthest, begin + size)
                self._reach.append(furthest)
        i = bisect.bisect_right(self._sorted, (address, float("inf"))) - 1
        while i >= 0 and self._reach[i] >= address + nbytes:
            begin, size = self._sorted[i]
            if address + nbytes <= begin + size:
                return True
            i -= 1
        return False


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
