"""The process the crash torture kills: it saves a changing namespace in a loop until SIGKILL.

The state is a pure function of its generation number, so the test can rebuild what any checkpoint
must hold. Every value changes in place between saves (the same objects, new contents), as in a
notebook, except `frozen`, which never changes, so that the unchanged-tensor path is crossed too.
"""
from __future__ import annotations


import numpy as np

import kernel_state

try:
    import torch
except ImportError:  # kernel_state works without torch; the torture then covers numpy and pickles
    torch = None

NOTEBOOK = "torture/crash.ipynb"


def build_state() -> dict:
    ns = {"generation": 0, "big": np.zeros((512, 2048), dtype=np.float32), "notes": [], "meta": {}}
    ns["view"] = ns["big"][::4, 100:600]  # a view: must come back a view of big
    ns["packs"] = [np.zeros(16_000, dtype=np.float64) for _ in range(12)]  # small: one pack blob
    if torch is not None:
        ns["weights"] = torch.zeros(256, 1024)
        ns["model"] = torch.nn.Linear(64, 32)
        ns["frozen"] = torch.arange(300_000, dtype=torch.float32)
    set_generation(ns, 0)
    return ns


def set_generation(ns: dict, gen: int) -> None:
    """Overwrite every value in place with what generation `gen` holds."""
    ns["generation"] = gen
    ns["big"][...] = gen
    ns["big"][gen % 512] = -gen
    for i, arr in enumerate(ns["packs"]):
        arr[...] = gen + i if i == gen % len(ns["packs"]) else i
    ns["notes"][:] = [f"generation {gen}"] * (gen % 7 + 1)
    ns["meta"].clear()
    ns["meta"].update(gen=gen, even=gen % 2 == 0, name="x" * (gen % 50))
    if torch is not None:
        with torch.no_grad():
            ns["weights"].fill_(float(gen))
            ns["weights"][gen % 256] = -1.0
            ns["model"].weight.fill_(gen / 10)
            ns["model"].bias.fill_(-gen)


def expected(gen: int) -> dict:
    ns = build_state()
    set_generation(ns, gen)
    return ns


def save_forever(root: str, first: int, log_path: str) -> None:
    """Save generations first, first+1, ... logging 'start g' before and 'done g' after each commit."""
    ns = build_state()
    gen = first
    with open(log_path, "a", buffering=1) as log:
        while True:
            set_generation(ns, gen)
            log.write(f"start {gen}\n")
            kernel_state.save(ns, notebook=NOTEBOOK, root=root, keep_last=4)
            log.write(f"done {gen}\n")
            gen += 1
