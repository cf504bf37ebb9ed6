"""What the peers benchmark runs inside each kernel, through silent user_expressions (no cell, no hooks).

Every function works on the kernel's user namespace and returns a JSON string. Saves are durable (fsync)
in every system, as ours is.
"""
from __future__ import annotations

import json
import os
import pickle
import time
import types

from contenthash import content_digest  # tests/contenthash.py, on sys.path beside this file
from kernel_state.fsutil import fsync_file

SKIP = {"In", "Out", "exit", "quit", "get_ipython", "open"}


def _ns() -> dict:
    from IPython import get_ipython
    return get_ipython().user_ns


def user_variables() -> dict:
    return {k: v for k, v in _ns().items()
            if not k.startswith("_") and k not in SKIP and not isinstance(v, types.ModuleType)}


def _du(path: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except FileNotFoundError:
                pass
    return total


def _answer(**kw) -> str:
    return json.dumps(kw, default=str)


# -- what the state is ---------------------------------------------------------------------------------
def live_bytes() -> str:
    """The memory the user's state holds: arrays by their own buffer (a view adds nothing), modules by
    their parameters and buffers, everything else by its pickle."""
    import numpy as np
    import torch
    total = 0
    for v in user_variables().values():
        if isinstance(v, np.ndarray):
            total += v.nbytes if v.base is None else 0
        elif isinstance(v, torch.nn.Module):
            total += sum(t.numel() * t.element_size() for t in v.state_dict().values())
        else:
            try:
                total += len(pickle.dumps(v))
            except Exception:
                pass
    return _answer(bytes=total)


def memcpy_rates() -> str:
    """GB/s of a 64 MiB copy into memory already touched (the best of three) and into fresh memory, page
    faults included: the fastest of three ways to get new memory (numpy.empty, which asks for huge pages;
    an anonymous mapping; a bytearray made from the source), each measured once on memory never used."""
    import mmap
    import time

    import numpy as np
    a = np.ones(64 << 20, np.uint8)

    def into_numpy():
        np.copyto(np.empty_like(a), a)

    def into_mapping():
        np.copyto(np.frombuffer(mmap.mmap(-1, a.nbytes, flags=mmap.MAP_PRIVATE), np.uint8), a)

    def into_bytearray():
        bytearray(memoryview(a))

    fresh = []
    for way in (into_numpy, into_mapping, into_bytearray):
        started = time.perf_counter()
        way()
        fresh.append(time.perf_counter() - started)
    b = np.empty_like(a)
    np.copyto(b, a)
    warm = []
    for _ in range(3):
        started = time.perf_counter()
        np.copyto(b, a)
        warm.append(time.perf_counter() - started)
    return _answer(fresh=a.nbytes / min(fresh) / 1e9, warm=a.nbytes / min(warm) / 1e9)


def expected() -> str:
    out = {}
    for name, v in user_variables().items():
        if isinstance(v, types.GeneratorType):
            out[name] = {"type": "generator", "digest": None}
            continue
        out[name] = {"type": type(v).__name__, "digest": content_digest(v)}
    return _answer(variables=out)


def check(expect: dict, generator_next: dict, view_of: dict) -> str:
    """Per variable: ok, missing, wrong type, or WRONG VALUE; a generator by its next value; a view by
    whether it still shares memory with its base."""
    import numpy as np
    ns = _ns()
    verdicts = {}
    for name, want in expect.items():
        if name not in ns:
            verdicts[name] = "missing"
        elif want["type"] == "generator":
            try:
                verdicts[name] = "ok" if next(ns[name]) == generator_next[name] else "WRONG VALUE"
            except Exception as exc:
                verdicts[name] = f"not a working generator ({type(exc).__name__})"
        elif type(ns[name]).__name__ != want["type"]:
            verdicts[name] = f"wrong type ({type(ns[name]).__name__})"
        else:
            verdicts[name] = "ok" if content_digest(ns[name]) == want["digest"] else "WRONG VALUE"
    for view, base in view_of.items():
        if verdicts.get(view) == "ok" and not np.shares_memory(ns[view], ns[base]):
            verdicts[view] = f"ok values, but no longer a view of {base}"
    return _answer(verdicts=verdicts)


# -- ours ----------------------------------------------------------------------------------------------
def save_ours(root: str, notebook: str) -> str:
    import kernel_state
    t = time.perf_counter()
    r = kernel_state.save(notebook=notebook, root=root)
    seconds = time.perf_counter() - t
    return _answer(seconds=seconds, written=r["bytes_written"], stored=_du(root),
                   error="; ".join(f"{k} skipped" for k in r["skipped"]) or None)


def restore_ours(root: str, notebook: str) -> str:
    import kernel_state
    t = time.perf_counter()
    r = kernel_state.restore(notebook=notebook, root=root)
    return _answer(seconds=time.perf_counter() - t, error="; ".join(r["failed"]) or None)


# -- dill.dump_module: the whole __main__ in one file per checkpoint -----------------------------------
def save_dill(directory: str, index: int) -> str:
    import dill
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"checkpoint-{index:02d}.pkl")
    t = time.perf_counter()
    error = None
    try:
        dill.dump_module(path)
        fsync_file(path)
    except Exception as exc:  # one unpicklable object aborts the whole dump
        error = f"{type(exc).__name__}: {str(exc)[:80]}"
    seconds = time.perf_counter() - t
    written = os.path.getsize(path) if os.path.exists(path) else 0
    if error and os.path.exists(path):
        os.rename(path, path + ".failed")  # a truncated file, kept for the byte count, never restored
    return _answer(seconds=seconds, written=written, stored=_du(directory), error=error)


def restore_dill(directory: str) -> str:
    import dill
    good = sorted(f for f in os.listdir(directory) if f.endswith(".pkl"))
    if not good:
        return _answer(seconds=None, error="no complete dump to load")
    t = time.perf_counter()
    dill.load_module(os.path.join(directory, good[-1]))
    return _answer(seconds=time.perf_counter() - t, error=None, loaded=good[-1])


# -- %store style: one stdlib pickle per variable, overwritten each time -------------------------------
def save_store(directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    t = time.perf_counter()
    written, errors = 0, []
    for name, value in user_variables().items():
        path = os.path.join(directory, name)
        try:
            data = pickle.dumps(value, protocol=5)
        except Exception as exc:
            errors.append(f"{name}: {type(exc).__name__}")
            continue
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        written += len(data)
    return _answer(seconds=time.perf_counter() - t, written=written, stored=_du(directory),
                   error="; ".join(errors) or None)


def restore_store(directory: str) -> str:
    ns = _ns()
    t = time.perf_counter()
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), "rb") as f:
            ns[name] = pickle.load(f)
    return _answer(seconds=time.perf_counter() - t, error=None)


# -- torch.save of the tensors: state dicts and arrays, one file per checkpoint ------------------------
def save_torch(directory: str, index: int) -> str:
    import numpy as np
    import torch
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"checkpoint-{index:02d}.pt")
    t = time.perf_counter()
    tensors, left = {}, []
    for name, v in user_variables().items():
        if isinstance(v, torch.nn.Module):
            tensors[name] = v.state_dict()
        elif isinstance(v, torch.Tensor):
            tensors[name] = v
        elif isinstance(v, np.ndarray) and not v.dtype.hasobject:
            tensors[name] = torch.from_numpy(v)
        else:
            left.append(name)
    torch.save(tensors, path)
    fsync_file(path)
    return _answer(seconds=time.perf_counter() - t, written=os.path.getsize(path), stored=_du(directory),
                   error=f"not tensors: {', '.join(left)}" if left else None)


def restore_torch(directory: str) -> str:
    import torch
    path = os.path.join(directory, sorted(os.listdir(directory))[-1])
    ns = _ns()
    t = time.perf_counter()
    loaded = torch.load(path, weights_only=True)
    for name, value in loaded.items():
        ns[name] = value.numpy() if isinstance(value, torch.Tensor) and name in ("arr", "view") else value
    return _answer(seconds=time.perf_counter() - t, error=None)


# -- Kishu: its own per-cell commit (post_run_cell), timed by wrapping the hook -------------------------
kishu_times: list[float] = []


def _get_ipython_builtin():
    """init_kishu() calls eval("get_ipython()"), which IPython's builtins provide only while a cell runs,
    and asks the frontend which one it is."""
    import builtins

    import kishu.jupyterint
    from IPython import get_ipython
    builtins.get_ipython = get_ipython
    # Headless: no frontend answers ipylab's command list, and jupyter_ui_poll's message replay while it
    # waits leaves this ipykernel deaf to the next request; the answer would be "jupyterlab" anyway.
    kishu.jupyterint.enclosing_platform = lambda: "jupyterlab"
    return get_ipython()


cell_times: list[float] = []


def time_cells() -> str:
    """Time each cell's own code: from the last pre_run_cell hook to the first post_run_cell one, before
    any system's checkpoint hook. What a system makes the user's code pay (page faults of dirty-page
    tracking) shows here."""
    from IPython import get_ipython
    ip = get_ipython()
    started = []
    ip.events.register("pre_run_cell", lambda info: started.append(time.perf_counter()))
    ip.events.callbacks["post_run_cell"].insert(0, lambda result: cell_times.append(time.perf_counter() - started[-1]))
    return _answer(ok=True)


def timed_cells() -> str:
    return json.dumps(cell_times)


def kishu_init(notebook_path: str) -> str:
    from kishu import init_kishu
    ip = _get_ipython_builtin()
    init_kishu(notebook_path)
    instrument = ip.user_ns["_kishu"]
    original = instrument.post_run_cell
    ip.events.unregister("post_run_cell", original)

    def timed(result):
        t = time.perf_counter()
        original(result)
        kishu_times.append(time.perf_counter() - t)
    ip.events.register("post_run_cell", timed)
    return _answer(ok=True)


def _kishu_db(notebook_path: str) -> int:
    stem = os.path.splitext(os.path.basename(notebook_path))[0]
    d = os.path.dirname(notebook_path)
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith(stem + ".kishudb"))


def kishu_last(notebook_path: str, stored_before: int) -> str:
    stored = _kishu_db(notebook_path)
    return _answer(seconds=kishu_times[-1] if kishu_times else None, written=stored - stored_before,
                   stored=stored, error=None)


def kishu_head() -> str:
    return _answer(commit=_ns()["_kishu"]._kishu_branch.get_head().commit_id)


def kishu_checkout(notebook_path: str, commit: str) -> str:
    from kishu import init_kishu
    ip = _get_ipython_builtin()
    init_kishu(notebook_path)
    instrument = ip.user_ns["_kishu"]
    t = time.perf_counter()
    instrument.checkout(commit, skip_notebook=True)
    return _answer(seconds=time.perf_counter() - t, error=None)


def preload() -> str:
    """What any restore needs imported first, so that no system's restore time includes a cold torch import."""
    import dill  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401
    return _answer(ok=True)
