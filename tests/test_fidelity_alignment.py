"""Restored memory is aligned and computes what the uninterrupted run computes, bit for bit; arrays of
any memory order and stride pattern come back as they were (real kernels, save in one, restore in a
fresh one)."""
from __future__ import annotations

import pytest

from kernels import Kernel

torch = pytest.importorskip("torch")

BUILD = r'''
import hashlib, numpy as np, torch
torch.manual_seed(0)
def make(dtype):
    net = torch.nn.Sequential(torch.nn.Linear(37, 61), torch.nn.LayerNorm(61), torch.nn.GELU(),
                              torch.nn.Linear(61, 29), torch.nn.Linear(29, 7)).to(dtype).eval()
    return net
models = {str(d): make(d) for d in (torch.float32, torch.float16, torch.bfloat16)}
big = torch.nn.Linear(1024, 640).eval()                    # a storage of its own blob
inputs = {k: torch.randn(13, 37).to(getattr(torch, k[6:])) for k in models}
opt = torch.optim.Adam(models["torch.float32"].parameters(), lr=1e-3)
models["torch.float32"](inputs["torch.float32"]).sum().backward(); opt.step()
odd = torch.arange(7, dtype=torch.float32)                 # 28 bytes: lands at an odd offset in the pack
halves = [torch.randn(3, dtype=torch.float16) for _ in range(5)]
rng = np.random.default_rng(5)
small_arrays = [rng.standard_normal(n).astype(t) for n, t in [(3, "f4"), (5, "f2"), (9, "c16"), (11, "i8")]]
large = rng.standard_normal((300, 100))
fortran_small = np.asfortranarray(rng.standard_normal((6, 5)))
fortran_large = np.asfortranarray(rng.standard_normal((400, 300)))
negative_small = np.arange(40.0)[::-3]
negative_large = large[::-1, ::-2]
fortran_view = fortran_large[10:200:3, ::-1]
broadcast_small = np.broadcast_to(np.arange(4.0), (3, 4))
broadcast_large = np.broadcast_to(np.arange(20000.0), (50, 20000))
strided = np.lib.stride_tricks.as_strided(np.arange(100000.0), shape=(1000, 50), strides=(800, 8))
readonly = np.arange(10000.0); readonly.flags.writeable = False
def outputs():
    h = {}
    with torch.no_grad():
        for k, net in models.items():
            out = net(inputs[k]).contiguous()
            h[k] = hashlib.sha256(out.view(torch.uint8).numpy().tobytes()).hexdigest()
        h["big"] = hashlib.sha256(big(torch.ones(4, 1024)).numpy().tobytes()).hexdigest()
    return h
def layouts():
    names = ["large", "fortran_small", "fortran_large", "negative_small", "negative_large", "fortran_view",
             "broadcast_small", "broadcast_large", "strided", "readonly"]
    g = globals()
    return {n: [g[n].tolist() == g[n].tolist(), hashlib.sha256(np.ascontiguousarray(g[n]).tobytes()).hexdigest(),
                list(g[n].shape), list(g[n].strides), g[n].flags.f_contiguous, g[n].flags.c_contiguous,
                g[n].flags.writeable, g[n].dtype.str] for n in names}
'''

ALIGNMENT = r'''
def storages():
    """(what, address of the memory each restored tensor/array storage starts at)"""
    seen = []
    def tensor(name, t):
        seen.append((name, t.untyped_storage().data_ptr()))
    def array(name, a):
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        # the storage starts at the lowest address the outermost array spans
        low = sum(min(0, s * (n - 1)) for n, s in zip(root.shape, root.strides))
        seen.append((name, root.ctypes.data + low))
    def walk(name, v):
        if isinstance(v, torch.Tensor):
            tensor(name, v)
        elif isinstance(v, np.ndarray):
            array(name, v)
        elif isinstance(v, torch.nn.Module):
            for n, t in list(v.named_parameters()) + list(v.named_buffers()):
                tensor(f"{name}.{n}", t)
        elif isinstance(v, torch.optim.Optimizer):
            for i, st in enumerate(v.state.values()):
                for n, t in st.items():
                    walk(f"{name}.state[{i}].{n}", t)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(f"{name}[{k!r}]", x)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{name}[{i}]", x)
    for name in ["models", "big", "inputs", "opt", "odd", "halves", "small_arrays", "large", "fortran_small",
                 "fortran_large", "negative_small", "negative_large", "fortran_view", "broadcast_small",
                 "broadcast_large", "strided", "readonly"]:
        walk(name, globals()[name])
    return seen
'''


def test_restored_storages_are_aligned_and_outputs_are_bit_identical(tmp_path):
    with Kernel(tmp_path) as first:
        first.run(BUILD)
        out = first.run("%gkews_checkpoint save")
        assert "Saved checkpoint" in out and "Skipped" not in out
        expected = first.value("outputs()")          # the uninterrupted run
        expected_layouts = first.value("layouts()")

    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out, out
        fresh.run(ALIGNMENT)
        seen = fresh.value("[(n, p % 64) for n, p in storages()]")
        assert len(seen) > 40
        assert [name for name, rest in seen if rest] == []   # every storage on a 64-byte boundary
        assert fresh.value("all(not m.training for m in models.values())") is True
        assert fresh.value("outputs()") == expected          # float32, float16, bfloat16 and the big layer
        assert fresh.value("layouts()") == expected_layouts  # values, strides, memory order, flags
        assert fresh.value("np.shares_memory(negative_large, large) and np.shares_memory(fortran_view, fortran_large)")
        assert fresh.value("broadcast_large.strides[0] == 0 and broadcast_large.base.nbytes < 200_000")


FORK_WRITES = r'''
import os
def child_writes():
    """What a DataLoader worker forked from the kernel may do: write its own copy of the data."""
    pid = os.fork()
    if pid == 0:
        data[0] = 42.0; weights[0] = 42.0; rows[1] = -1.0
        os._exit(0)
    os.waitpid(pid, 0)
    return [float(data[0]), float(weights[0]), rows[1].tolist()]
'''


def test_a_forked_childs_writes_do_not_reach_restored_variables(tmp_path):
    """A fork gives the child a copy-on-write copy of the kernel's memory, restored or not: a DataLoader worker
    that changes its rows must not change the notebook's dataset (restored storages were shared mappings)."""
    setup = ("import numpy as np, torch\ndata = np.zeros(2_000_000)\nweights = torch.zeros(1_000_000)\n"
             "rows = np.zeros((4, 3))")
    with Kernel(tmp_path) as first:
        first.run(setup)
        first.run(FORK_WRITES)
        assert first.value("child_writes()") == [0.0, 0.0, [0.0, 0.0, 0.0]]  # as any process behaves
        assert "Saved checkpoint" in first.run("%gkews_checkpoint save")

    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out, out
        fresh.run(FORK_WRITES)
        assert fresh.value("child_writes()") == [0.0, 0.0, [0.0, 0.0, 0.0]]


def test_broadcast_views_save_and_verify_without_numpy_warnings(tmp_path):
    """Reading the writeable flag of an np.broadcast_arrays output makes numpy warn: every save and verify of
    one showed a FutureWarning pointing into kernel_state."""
    with Kernel(tmp_path) as first:
        first.run("import numpy as np\nrow, grid = np.broadcast_arrays(np.arange(4.0), np.zeros((3, 4)))")
        out = first.run("%gkews_checkpoint save") + first.run("%gkews_checkpoint verify")
        assert "Warning" not in out and "Verified" in out, out
        expected = first.value("[row.tolist(), row.strides, grid.shape]")
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Warning" not in out, out
        assert fresh.value("[row.tolist(), row.strides, grid.shape]") == expected
