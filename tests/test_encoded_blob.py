"""Encoded blobs (kernel undo's smaller blobs): exact round trips, damage named, bases kept by GC."""
from __future__ import annotations

import os

import numpy as np
import pytest

from kernel_state import encoded_blob
from kernel_state.errors import CorruptBlob
from kernel_state.fingerprint import cpu_fingerprint
from kernel_state.safetensors_io import read_blob, write_blob
from kernel_state.store import Store


def _bytes(arr) -> memoryview:
    return memoryview(arr).cast("B")


def _plain(store: Store, arr, dtype="F64") -> str:
    tmp, digest, _size = write_blob([("t", dtype, list(arr.shape), _bytes(arr))], store.tmp_dir)
    os.replace(tmp, store.blob_path(digest, "safetensors"))
    return digest


def _encoded(store: Store, arr, dtype="F64", base: str | None = None, base_arr=None) -> str:
    digest = cpu_fingerprint(dtype, list(arr.shape), _bytes(arr))
    out = encoded_blob.write(store.tmp_dir, dtype, list(arr.shape), _bytes(arr), base,
                             None if base_arr is None else _bytes(base_arr))
    assert out is not None, "expected the encoding to pay off"
    os.replace(out[0], store.blob_path(digest, "enc"))
    return digest


def _read(store: Store, digest: str, arr) -> np.ndarray:
    buf, entries = read_blob(store.blob_path(digest, "safetensors"), digest)
    _dtype, _shape, begin, end = entries["t"]
    return np.frombuffer(buf, dtype=arr.dtype, count=(end - begin) // arr.itemsize, offset=begin)


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "store"))
    s.ensure()
    return s


def test_a_slice_change_is_stored_as_a_few_kilobytes_and_read_back_bit_for_bit(store):
    rng = np.random.default_rng(0)
    before = rng.standard_normal(1_250_003)  # 10 MB, not a multiple of a block
    base = _plain(store, before)
    after = before.copy()
    after[500_000:501_000] += 1.0
    after[-1] = np.nan
    digest = _encoded(store, after, base=base, base_arr=before)
    assert os.path.getsize(store.blob_path(digest, "enc")) < 64 << 10
    assert not os.path.exists(store.blob_path(digest, "safetensors"))
    got = _read(store, digest, after)
    assert got.tobytes() == after.tobytes()


def test_without_a_base_and_readable_by_the_safetensors_library(store):
    from safetensors import safe_open
    weights = np.random.default_rng(1).standard_normal(300_000).astype(np.float32)  # exponents compress
    digest = _encoded(store, weights, "F32")
    assert _read(store, digest, weights).tobytes() == weights.tobytes()
    with safe_open(store.blob_path(digest, "enc"), "np") as f:
        assert f.metadata()["gkews_encoding"] == encoded_blob.ENCODING
        assert f.metadata()["base"] == ""
        assert f.get_tensor("encoded").dtype == np.uint8


def test_incompressible_bytes_stay_plain(store):
    noise = np.frombuffer(np.random.default_rng(2).bytes(2 << 20), dtype=np.uint8)
    assert encoded_blob.write(store.tmp_dir, "U8", [noise.size], _bytes(noise)) is None
    assert os.listdir(store.tmp_dir) == []


def test_damage_is_named_never_handed_out(store):
    before = np.arange(1_000_000, dtype=np.float64)
    base = _plain(store, before)
    after = before.copy()
    after[10] = -1
    digest = _encoded(store, after, base=base, base_arr=before)
    path = store.blob_path(digest, "enc")
    raw = bytearray(open(path, "rb").read())
    raw[-5] ^= 0xFF
    open(path, "wb").write(raw)
    with pytest.raises(CorruptBlob, match=digest[:12]):
        _read(store, digest, after)
    # a missing base is named too
    digest2 = _encoded(store, after + 1, base=base, base_arr=before)
    os.unlink(store.blob_path(base, "safetensors"))
    with pytest.raises(CorruptBlob, match=f"blob {base[:12]} is missing"):
        _read(store, digest2, after)


def test_a_base_may_not_have_a_base(store):
    a = np.zeros(1 << 18)
    b, c = a.copy(), a.copy()
    b[0], c[1] = 1, 2
    base = _plain(store, a)
    middle = _encoded(store, b, base=base, base_arr=a)
    last = _encoded(store, c, base=middle, base_arr=b)
    with pytest.raises(CorruptBlob, match="itself a base's delta"):
        _read(store, last, c)


def test_garbage_collection_keeps_a_base_only_an_encoded_blob_names(store):
    before = np.arange(1_000_000, dtype=np.float64)
    base = _plain(store, before)
    after = before.copy()
    after[3] = 0
    digest = _encoded(store, after, base=base, base_arr=before)
    orphan = _encoded(store, before * 2)
    # one checkpoint naming the encoded blob alone (as a later checkpoint that found it unchanged does)
    manifest = {"format": "gkews-checkpoint", "version": 1, "id": "20261201-010101-000-abcd", "notebook": "n",
                "variables": {}, "skipped": {}, "modules": {}, "tensors": {}, "arrays": {}, "storages": {},
                "blobs": {digest: 1}}
    store.commit("n.ipynb", manifest)
    with store.lock(exclusive=True):
        store._collect()
    assert os.path.exists(store.blob_path(base, "safetensors"))
    assert os.path.exists(store.blob_path(digest, "enc"))
    assert not os.path.exists(store.blob_path(orphan, "enc"))
    assert _read(store, digest, after).tobytes() == after.tobytes()


def test_the_writer_never_takes_a_delta_for_a_base(store):
    """The same contents can be one place's keyframe, be collected, and come back as another place's
    delta: the writer must then not XOR with it (a read would need a base's base)."""
    from kernel_state import auto
    a = np.zeros(1 << 18)
    b, c = a.copy(), a.copy()
    b[0], c[1] = 1, 2
    middle = _encoded(store, b, base=_plain(store, a), base_arr=a)  # a delta, remembered as a keyframe
    auto.KEYFRAMES[(store.root, "place")] = middle
    digest = cpu_fingerprint("F64", [c.size], _bytes(c))
    manifest = {"format": "gkews-checkpoint", "version": 1, "id": "20261201-010101-000-abce", "notebook": "n",
                "variables": {}, "skipped": {}, "modules": {}, "tensors": {}, "arrays": {}, "storages": {},
                "blobs": {digest: 0}}
    with store.lock():
        auto.Writer._put_tensors(store, manifest, store.blob_path(digest, "safetensors"),
                                 [("t", "F64", [c.size], _bytes(c))], "place", {})
        store.commit("n.ipynb", manifest)
    assert encoded_blob.base_of(store.blob_path(digest, "enc")) is None
    assert _read(store, digest, c).tobytes() == c.tobytes()
