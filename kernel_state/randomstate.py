"""The global random number generators, saved with a checkpoint and put back by its restore.

An experiment continues from a restore with the same draws as the uninterrupted run: Python's
`random`, numpy's legacy global state (`np.random.rand` and friends), torch's CPU generator and, when
CUDA is initialised in the kernel, every CUDA device's generator. Generators the user created
(`np.random.default_rng()`, `torch.Generator()`) are ordinary variables and are saved as such. Only
modules the kernel has imported are read: saving never imports numpy or torch, nor initialises CUDA.
"""
from __future__ import annotations

import contextlib
import pickle
import random
import sys


def capture() -> dict:
    """{generator name: state}, picklable."""
    states = {"python": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None and hasattr(np, "random"):
        states["numpy"] = np.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        states["torch"] = torch.get_rng_state().numpy().tobytes()
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            states["cuda"] = [s.numpy().tobytes() for s in cuda.get_rng_state_all()]
    return states


def dumps(states: dict) -> bytes:
    return pickle.dumps(states, protocol=5)


def digests(states: dict) -> dict:
    """{generator name: digest of its state}: what verify compares, without reading the saved states back
    (their pickles are the same bytes for the same state: tuples of ints, a uint32 array, bytes)."""
    from .hashing import digest_bytes
    return {name: digest_bytes(pickle.dumps(state, protocol=5)) for name, state in states.items()}


def compare(saved: dict | None) -> dict | None:
    """verify's verdict on the generators a checkpoint saved: {name: "match" | "changed" | "missing"};
    None when it saved none (`--no-random-state`). One saved before per-generator digests: "all"."""
    if not saved:
        return None
    live = capture()
    if "digests" not in saved:
        from .hashing import digest_bytes
        same = digest_bytes(dumps(live)) == saved["pickle"]
        return {"all": "match" if same else "changed"}
    now = digests(live)
    return {name: ("match" if now.get(name) == digest else "missing" if name not in now else "changed")
            for name, digest in saved["digests"].items()}


def apply(states: dict) -> tuple[list[str], list[str]]:
    """Put the saved states back; returns (generators restored, warnings)."""
    restored, warnings = [], []
    random.setstate(states["python"])
    restored.append("python")
    if "numpy" in states:
        import numpy as np
        np.random.set_state(states["numpy"])
        restored.append("numpy")
    if "torch" in states or "cuda" in states:
        try:
            import torch
        except ImportError:
            warnings.append("torch's random state was saved but torch cannot be imported here; not restored")
            return restored, warnings
        if "torch" in states:
            torch.set_rng_state(torch.frombuffer(bytearray(states["torch"]), dtype=torch.uint8))
            restored.append("torch")
        if "cuda" in states:
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            for index, state in enumerate(states["cuda"]):
                if index < count:
                    torch.cuda.set_rng_state(torch.frombuffer(bytearray(state), dtype=torch.uint8), index)
                    restored.append(f"cuda:{index}")
            if count < len(states["cuda"]):
                warnings.append(f"the random state of {len(states['cuda'])} CUDA device(s) was saved, this kernel "
                                f"has {count}: the others were not restored")
    return restored, warnings


@contextlib.contextmanager
def untouched():
    """What runs inside draws from the generators as they are and leaves them as they were: a probe that
    draws (a model in train mode, with dropout) moved them after the save had captured them, so that the
    restored run's next draws were not the uninterrupted run's, and verify called them changed."""
    states = capture()
    try:
        yield
    finally:
        apply(states)
