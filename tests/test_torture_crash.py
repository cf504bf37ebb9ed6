"""Crash torture: SIGKILL at random moments of many saves; the previous checkpoint always restores exactly.

A child process (forked from a forkserver that has numpy, torch and kernel_state imported, so a start
costs milliseconds) saves a changing namespace in a loop and is killed after a random delay. After each
kill: no listed checkpoint is half written, the newest one is the last save the child finished (or the
one it was finishing), and the newest two restore with every value equal, by content digest, to what
that generation held. test_crash_consistency.py kills one save at fixed fractions of its duration;
this one covers 60 random moments across whole saves, retention and garbage collection included.

The random delays come from a fixed seed, printed and named in every failure; replay one with
GKEWS_TORTURE_SEED=<seed>.
"""
from __future__ import annotations

import multiprocessing
import os
import random

import numpy as np
import pytest

import kernel_state
from kernel_state.store import Store

import torture_saver
from contenthash import content_digest

SEED = int(os.environ.get("GKEWS_TORTURE_SEED", "20261130"))
KILLS = int(os.environ.get("GKEWS_TORTURE_KILLS", "60"))


@pytest.fixture(scope="module")
def forkserver():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "torch", "kernel_state", "torture_saver"])
    return ctx


def _log(path) -> list[tuple[str, int]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        word, _, gen = line.partition(" ")
        if word in ("start", "done") and gen.isdigit():
            out.append((word, int(gen)))
    return out


def _restore_exactly(root, checkpoint_id, why) -> int:
    ns = {}
    result = kernel_state.restore(ns, notebook=torture_saver.NOTEBOOK, root=root, checkpoint=checkpoint_id)
    assert result["failed"] == {}, (why, result["failed"])
    gen = ns["generation"]
    want = torture_saver.expected(gen)
    assert sorted(ns) == sorted(want), (why, sorted(ns))
    for name, value in want.items():
        assert content_digest(ns[name]) == content_digest(value), f"{why}: {name} of generation {gen} differs"
    assert np.shares_memory(ns["view"], ns["big"]), f"{why}: view no longer shares memory with big"
    return gen


def test_sigkill_at_random_moments_of_many_saves(tmp_path, forkserver):
    print(f"crash torture: seed {SEED}, {KILLS} kills (replay with GKEWS_TORTURE_SEED={SEED})")
    rng = random.Random(SEED)
    root = str(tmp_path / "store")
    log = tmp_path / "saves.log"
    newest_gen, mid_save, with_leftovers = -1, 0, 0
    for kill in range(KILLS):
        why = f"seed {SEED}, kill {kill}"
        before = len(_log(log))
        child = forkserver.Process(target=torture_saver.save_forever, args=(root, newest_gen + 1, str(log)))
        child.start()
        # wait for the first save to begin, then let it run for a random time: inside the first save
        # (slow: a new process), or after some later ones (fast: unchanged tensors are not rewritten)
        while not _log(log)[before:] and child.is_alive():
            child.join(0.002)
        assert child.is_alive(), f"{why}: the saver died on its own (exit {child.exitcode})"
        child.join(rng.uniform(0.0, 0.4) if rng.random() < 0.5 else rng.uniform(0.4, 1.2))
        child.kill()  # SIGKILL
        child.join()
        assert child.exitcode == -9, why

        entries = _log(log)[before:]
        done = [g for word, g in entries if word == "done"]
        last_started = max(g for word, g in entries if word == "start")
        mid_save += entries[-1][0] == "start"
        tmp = os.path.join(root, "tmp")
        with_leftovers += os.path.isdir(tmp) and bool(os.listdir(tmp))

        listed = kernel_state.list_checkpoints(notebook=torture_saver.NOTEBOOK, root=root)
        assert all("error" not in row for row in listed), (why, listed)
        if not listed:  # killed before the very first save committed: nothing to restore yet
            assert newest_gen == -1 and not done, (why, entries)
            continue
        gen = _restore_exactly(root, listed[0]["id"], why + ", newest")
        # no committed save is lost: the newest is the last one reported done (or, if none was, the
        # newest before this child), or the one killed between its commit and its report
        assert gen in (max(done) if done else newest_gen, last_started), (why, gen, newest_gen, entries)
        assert gen >= newest_gen, (why, gen, newest_gen)
        if len(listed) > 1:
            older = _restore_exactly(root, listed[1]["id"], why + ", previous")
            assert older < gen, why
        newest_gen = gen
    print(f"crash torture: {KILLS} kills, {mid_save} inside a save, {with_leftovers} left temp files, "
          f"newest generation {newest_gen}")
    assert mid_save >= KILLS // 2, f"seed {SEED}: only {mid_save} of {KILLS} kills landed inside a save"

    # the next garbage collection leaves exactly what the listed checkpoints reference, and no temp file
    store = Store(root)
    with store.lock(exclusive=True):
        store._collect()
    referenced = set()
    for row in kernel_state.list_checkpoints(notebook=torture_saver.NOTEBOOK, root=root):
        referenced.update(store.load_manifest(torture_saver.NOTEBOOK, row["id"])["blobs"])
    on_disk = {name.split(".", 1)[0] for name in os.listdir(store.blob_dir)}
    assert on_disk == referenced and os.listdir(store.tmp_dir) == []
