"""A pause's save reads back the blobs it reuses (kernel_state/readback.py), in a plain Python process: what
happens when the disk does not keep what is written again. (The healing itself, through a real pause, is
in test_resume_accounting.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import kernel_state
from kernel_state.errors import CheckpointWriteError
from kernel_state.store import Store

NB = "rot/analysis.ipynb"


def _flip_a_byte(path) -> None:
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0x10
        f.seek(0)
        f.write(data)


def test_a_store_that_damages_what_is_written_again_fails_the_save_and_keeps_no_checkpoint_of_it(
        tmp_path, monkeypatch):
    """Bit rot since the first save, and a disk that damages the blobs written again: the save must fail
    naming the store and what to do, and must not leave a checkpoint that a list or a resume would offer
    as good. The earlier checkpoint stays listed (it is what there was)."""
    ns = {"w": np.arange(100_000, dtype=np.float64), "t": {"a": list(range(100))}}
    earlier = kernel_state.save(ns, notebook=NB, root=tmp_path)["id"]
    for blob in (tmp_path / "blobs").iterdir():
        _flip_a_byte(blob)

    commit = Store.commit

    def commit_to_a_bad_disk(self, notebook, manifest):
        written = list(self.staged)
        commit(self, notebook, manifest)
        for path in written:
            _flip_a_byte(path)

    monkeypatch.setattr(Store, "commit", commit_to_a_bad_disk)
    with pytest.raises(CheckpointWriteError) as failed:
        kernel_state.save(ns, notebook=NB, root=tmp_path, read_back=True)
    message = str(failed.value)
    assert f"the checkpoint store at {tmp_path} does not keep what is written to it" in message
    assert "Check the disk or volume under it" in message and "GKEWS_CHECKPOINT_ROOT" in message
    assert [c["id"] for c in Store(str(tmp_path)).list(NB)] == [earlier]


def test_a_pause_after_a_restore_reads_back_its_small_tensors_as_they_are(tmp_path):
    """Every pause after a resume from a checkpoint failed, saying the store "does not keep what is written
    to it": the restore noted a pack's data size as its size, the pause's read-back found the file (header
    and data) another size, took the good pack for damaged and removed it, with entries older checkpoints
    name. Small tensors and arrays (under 1 MiB) are packed: a model of a few layers is enough."""
    torch = pytest.importorskip("torch")
    ns = {"model": torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 2)),
          "small": np.arange(5000.0), "other": torch.arange(300.0)}
    earlier = kernel_state.save(ns, notebook=NB, root=tmp_path)
    packs = sorted(p.name for p in (tmp_path / "blobs").iterdir())
    kernel_state.restore(ns, notebook=NB, root=tmp_path)
    again = kernel_state.save(ns, notebook=NB, root=tmp_path, read_back=True)
    assert "repaired" not in again and again["bytes_written"] < 20_000, again
    assert again["bytes"] == earlier["bytes"]
    assert packs == sorted(p.name for p in (tmp_path / "blobs").iterdir())  # none removed, none packed anew
    fresh = {}
    assert kernel_state.restore(fresh, notebook=NB, root=tmp_path, checkpoint=earlier["id"])["failed"] == {}
    assert torch.equal(fresh["model"][0].weight, ns["model"][0].weight)
