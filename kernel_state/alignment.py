"""Memory for restored data that starts on a 64-byte boundary, as torch's CPU allocator gives.

A restored tensor or array must not sit at an odd address inside a shared buffer: SIMD kernels pick
other code paths for unaligned data (different last bits) and some refuse it. Everything restore
allocates for tensor or array data comes from here.
"""
from __future__ import annotations

import ctypes
import mmap
import warnings

ALIGNMENT = 64
_PAGE_FROM = 1 << 20  # from this size on, an anonymous mapping: page-aligned and zeroed lazily by the OS


def address(buffer) -> int:
    """The address of a writable buffer's first byte."""
    view = memoryview(buffer).cast("B")
    if not len(view):
        return 0
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def private_memory(nbytes: int) -> mmap.mmap:
    """Page-aligned anonymous memory (at least one byte) private to this process. mmap's default is
    MAP_SHARED, which a forked child (a DataLoader worker) shares instead of copying on write: its writes
    would reach the notebook's variables, and dirty-page tracking cannot follow shared mappings."""
    return mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE)


def aligned_buffer(nbytes: int) -> memoryview:
    """A writable byte buffer of `nbytes` whose first byte is 64-byte aligned. The memoryview keeps its
    owner alive; numpy and torch arrays built on it keep the memoryview alive."""
    if nbytes >= _PAGE_FROM:
        return memoryview(private_memory(nbytes))  # mappings start on a page
    raw = bytearray(nbytes + ALIGNMENT)
    pad = -address(raw) % ALIGNMENT
    return memoryview(raw)[pad:pad + nbytes]


def aligned_copy(source) -> memoryview:
    """A 64-byte aligned copy of a bytes-like object."""
    src = memoryview(source).cast("B")
    out = aligned_buffer(len(src))
    out[:] = src
    return out


def aligned_empty(shape, dtype):
    """An uninitialised numpy array on 64-byte aligned memory; its base is the buffer, not an array,
    so it is its own outermost array (what capture treats as the storage)."""
    import numpy as np
    dtype = np.dtype(dtype)
    count = 1
    for dim in shape:
        count *= int(dim)
    return np.ndarray(tuple(shape), dtype=dtype, buffer=aligned_buffer(max(count * dtype.itemsize, 1)))


def is_aligned(pointer: int) -> bool:
    return pointer % ALIGNMENT == 0


def small_root(data, dtype, shape):
    """Unpickling the memory small numpy arrays view: a 64-byte aligned copy, made once per pickle (or
    per checkpoint, through the memo), so the arrays built on it share memory as they did."""
    import numpy as np
    carrier = aligned_empty(shape, dtype)
    if carrier.nbytes:  # as bytes: a buffer of datetime64 or timedelta64 cannot be cast
        carrier.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    return carrier


def view_of(carrier, dtype, shape, offset, strides, writeable=True):
    """Unpickling a small numpy array: the same view (offset, strides, memory order) of its root."""
    import numpy as np
    if carrier.shape == tuple(shape) and carrier.dtype == np.dtype(dtype) and offset == 0 and \
            carrier.strides == tuple(strides):
        arr = carrier
    else:
        arr = np.ndarray(tuple(shape), dtype=np.dtype(dtype), buffer=carrier, offset=offset, strides=tuple(strides))
    if not writeable:
        if arr is carrier:  # other arrays may write through the root
            arr = carrier.view()
        arr.flags.writeable = False
    return arr


def array_from_layout(data, carrier_dtype, carrier_shape, dtype, shape, offset, strides, writeable=True):
    """Unpickling a small array of a checkpoint written before roots were shared: a root of its own."""
    return view_of(small_root(data, carrier_dtype, carrier_shape), dtype, shape, offset, strides, writeable)


def view_of_bytearray(owner, dtype, shape, offset, strides, writeable=True):
    """Unpickling an array over a bytearray or an array.array (`np.frombuffer(buf)`): a view of the restored
    owner again, so writes through one show in the other (its memory is the owner's, not aligned)."""
    import numpy as np
    return view_of(np.frombuffer(owner, dtype=np.uint8), dtype, shape, offset, strides, writeable)


def masked_view(data, state: dict):
    """A numpy masked array over `data` (an array restored as a view, so it shares memory as before) with
    its mask, fill value and flags: capture.py's reduction of np.ma.MaskedArray."""
    import numpy as np
    return subclass_view(data, np.ma.MaskedArray, state)


def subclass_view(data, cls, state: dict):
    """An array of a numpy subclass (np.recarray, np.matrix) over `data`, an array restored as a view (so
    it shares memory as before, on aligned memory), with its instance attributes."""
    viewed = data.view(cls)
    viewed.__dict__.update(state)
    return viewed


def hook_dict(hooks: list):
    """A dict of hooks as checkpoints before 2026-12-07 saved it (a tensor's `_backward_hooks`, an
    optimizer's step hooks: the hooks alone), keyed by new handle ids. Later ones save the dict itself, keys
    and all, which the handles that hold it share; the restore reserves the saving kernel's handle ids
    (torch_modules.reserve_handle_ids), so that no hook registered later replaces a restored one."""
    from collections import OrderedDict

    from torch.utils.hooks import RemovableHandle
    d: OrderedDict = OrderedDict()
    for hook in hooks:
        d[RemovableHandle(d).id] = hook
    return d


def tensor_extras(t, grad, backward_hooks, post_hooks):
    """A restored tensor with what its table row does not hold: a gradient that is no strided tensor (a
    sparse one: nn.Embedding(sparse=True)) and its gradient hooks (`p.register_hook(fn)`,
    `register_post_accumulate_grad_hook`). Every variable that holds the tensor carries them; the first
    one restored sets them, so a hook never runs twice."""
    if grad is not None and t.grad is None:
        t.grad = grad
    if backward_hooks and not t._backward_hooks:  # as register_hook does, also where grad is off now
        t._backward_hooks = backward_hooks if isinstance(backward_hooks, dict) else hook_dict(backward_hooks)
    if post_hooks and not getattr(t, "_post_accumulate_grad_hooks", None):
        t._post_accumulate_grad_hooks = post_hooks if isinstance(post_hooks, dict) else hook_dict(post_hooks)
    return t


def writeable(arr) -> bool:
    """arr.flags.writeable, without the FutureWarning numpy gives for reading it on an output of
    np.broadcast_arrays: it showed under every save and verify of such an array, pointing at this module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return bool(arr.flags.writeable)
