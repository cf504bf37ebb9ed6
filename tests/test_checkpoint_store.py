"""The checkpoint store and format, in a plain Python process (no kernel needed)."""
from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

import kernel_state
from kernel_state import CorruptBlob
from kernel_state.fingerprint import device_checksum
from kernel_state.safetensors_io import read_blob
from kernel_state.store import manifest_checksum

torch = pytest.importorskip("torch", reason="the torch extra is installed by make test")
safetensors = pytest.importorskip("safetensors")

NB = "projects/secret-name/analysis.ipynb"


def _manifests(root):
    return sorted((root / "notebooks").glob("*/manifests/*.json"))


def test_tensors_are_safetensors_files_that_the_library_reads(tmp_path):
    from safetensors import safe_open
    w = torch.randn(300, 700)
    a = np.arange(100_000, dtype=np.int64).reshape(1000, 100)
    kernel_state.save({"w": w, "a": a, "bias": torch.ones(5)}, notebook=NB, root=tmp_path)
    manifest = json.loads(_manifests(tmp_path)[0].read_text())
    assert manifest["format"] == "gkews-checkpoint" and manifest["version"] == 1
    found = {}
    for rec in manifest["storages"].values():
        with safe_open(str(tmp_path / "blobs" / f"{rec['blob']}.safetensors"), "pt") as f:
            found[rec["name"]] = f.get_tensor(rec["name"])
    tensors = [t for t in found.values()]
    assert any(t.shape == w.shape and torch.equal(t, w) for t in tensors)
    # an array is stored as the array that owns its memory (here the arange that `a` reshapes)
    assert a.base is not None and a.base.shape == (100_000,)
    assert any(t.shape == (100_000,) and torch.equal(t.reshape(1000, 100), torch.from_numpy(a)) for t in tensors)
    assert any(torch.equal(t, torch.ones(5)) for t in tensors)
    pickles = [p for p in (tmp_path / "blobs").glob("*.pkl") if p.stem != manifest["random_state"]["pickle"]]
    assert max(p.stat().st_size for p in pickles) < 1000  # no tensor data inside a variable's pickle


def test_one_changed_small_array_rewrites_one_pack_not_every_small_array(tmp_path):
    """Arrays under 1 MiB share pack blobs. With one pack per checkpoint, a DataFrame-like dict of 200 columns
    of 800 KB each was written whole again (160 MB) after one value changed; now the changed column is, and
    the restore still gets every column."""
    ns = {"cols": {f"c{i}": np.random.default_rng(i).normal(size=100_000) for i in range(200)}}
    total = sum(a.nbytes for a in ns["cols"].values())
    assert kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"] >= total
    assert kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"] == 0
    ns["cols"]["c5"][0] += 1
    written = kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"]
    assert 0 < written < 2 * ns["cols"]["c5"].nbytes, written
    expected = {k: v.copy() for k, v in ns["cols"].items()}
    ns.clear()
    kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert sorted(ns["cols"]) == sorted(expected)
    assert all(np.array_equal(ns["cols"][k], v) for k, v in expected.items())


def test_a_saved_model_can_still_have_its_parameters_swapped(tmp_path):
    """torch.utils.swap_tensors refuses a tensor anything holds a weak reference to, and a save held one to
    every tensor it saw (to tell an unchanged one): after a checkpoint (kernel undo takes one after every
    cell), `model.to()` with swap_module_params_on_conversion and load_state_dict with swapping failed with
    "Couldn't swap Linear.weight". They work now; the next save writes the new values and still reuses
    what did not change."""
    torch.manual_seed(0)
    model, other = torch.nn.Linear(300, 300), torch.nn.Linear(300, 300)
    ns = {"model": model, "other": other}
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    assert kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"] < 10_000
    swapping = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to(torch.float64)
        other.load_state_dict({k: v * 2 for k, v in other.state_dict().items()})
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swapping)
    torch.utils.swap_tensors(model.bias, torch.nn.Parameter(torch.ones(300, dtype=torch.float64)))
    assert kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"] > 2 * 300 * 300 * 4
    unchanged = kernel_state.save(ns, notebook=NB, root=tmp_path)
    assert unchanged["bytes_written"] < 10_000
    back: dict = {}
    kernel_state.restore(back, notebook=NB, root=tmp_path)
    for name in ns:
        for (key, live), came in zip(ns[name].state_dict().items(), back[name].state_dict().values()):
            assert came.dtype == live.dtype and torch.equal(came, live), (name, key)


def test_a_training_step_beside_small_arrays_writes_the_changed_tensors_only(tmp_path):
    """Small torch storages unchanged since the last save keep their pack; small arrays were packed again at
    every save, so the packs changed with their company: a save with nothing changed wrote 20-40 MB of
    unchanged arrays again, and every save after a training step of a small model 30-40 MB. Only new bytes
    are packed now, and a restored kernel knows the packs it read, so its first save writes no more."""
    from kernel_state import capture, packed
    torch.manual_seed(0)
    features = {f"col{i}": np.random.default_rng(i).random(25_000) for i in range(200)}  # 200 x 200 KB
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ns, x = {"features": features, "model": model, "opt": opt}, torch.randn(64, 32)

    def step():
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    assert kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"] > 40e6
    assert kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"] < 10_000
    step()
    assert kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"] < 100_000
    step()
    assert kernel_state.save(ns, notebook=NB, root=tmp_path)["bytes_written"] < 100_000
    expected = [p.detach().clone() for p in model.parameters()]
    packed._packed.clear()  # another process: it knows nothing of this one's saves
    capture._written.clear()
    fresh: dict = {}
    kernel_state.restore(fresh, notebook=NB, root=tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(fresh["model"].parameters(), expected))
    assert all(np.array_equal(fresh["features"][k], v) for k, v in features.items())
    assert kernel_state.save(fresh, notebook=NB, root=tmp_path)["bytes_written"] < 100_000


def test_a_manifest_without_a_checksum_says_so(tmp_path):
    """A development build before manifests carried a checksum wrote none: it was called "modified or damaged"."""
    kernel_state.save({"w": torch.arange(10.0)}, notebook=NB, root=tmp_path)
    path = _manifests(tmp_path)[0]
    manifest = json.loads(path.read_text())
    del manifest["checksum"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(kernel_state.CorruptManifest, match="has no checksum: a development build before") as caught:
        kernel_state.restore({}, notebook=NB, root=tmp_path)
    assert "modified or damaged" not in str(caught.value) and "%gkews_checkpoint delete" in str(caught.value)


def test_a_manifest_damaged_after_this_process_read_it_is_still_refused(tmp_path):
    """A save writes its manifest and reads it back (retention, the collection); the checksum it verified then
    is remembered by the manifest's bytes, so the same bytes are not verified again, and other bytes are."""
    kernel_state.save({"w": torch.arange(10.0)}, notebook=NB, root=tmp_path)
    path = _manifests(tmp_path)[0]
    text = path.read_text()
    damaged = re.sub(r'("nbytes": ?)40\b', r"\g<1>41", text, count=1)  # same size, one digit wrong
    assert damaged != text and len(damaged) == len(text)
    path.write_text(damaged)
    with pytest.raises(kernel_state.CorruptManifest, match="does not match its checksum"):
        kernel_state.restore({}, notebook=NB, root=tmp_path)
    path.write_text(text)
    ns = {}
    kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert torch.equal(ns["w"], torch.arange(10.0))


def test_a_blob_of_small_and_large_tensors_in_any_order_is_the_file_the_library_reads(tmp_path):
    """write_blob gathers tensors under 64 KiB into one write: a batch ends before a larger tensor, so each
    lands at its own offset, and the blob's name is still the hash of the file's bytes."""
    from safetensors.numpy import load_file

    from kernel_state.hashing import digest_bytes
    from kernel_state.safetensors_io import write_blob
    rng = np.random.default_rng(0)
    sizes = [10, 70_000, 5, 3, 200_000, 8, 9_000_000, 4, 65_535, 65_536, 1, 70_000] + [100] * 500
    arrays = {f"t{i}": rng.integers(0, 255, n, dtype=np.uint8) for i, n in enumerate(sizes)}
    tmp, digest, size = write_blob([(k, "U8", [v.size], memoryview(v)) for k, v in arrays.items()], str(tmp_path))
    got = load_file(tmp)
    assert all(np.array_equal(got[k], v) for k, v in arrays.items())
    data = open(tmp, "rb").read()
    assert size == len(data) and digest == digest_bytes(data)


def test_what_a_process_remembers_of_manifests_stays_bounded(tmp_path, monkeypatch):
    """The lean views of the manifests a process read (retention, the collection) are dropped oldest first
    beyond a bound, in a kernel that saves after every cell; a manifest dropped from them is read again."""
    from kernel_state import store as store_module
    monkeypatch.setattr(store_module, "_KNOWN_BLOBS", 12)
    for i in range(6):
        kernel_state.save({"w": torch.full((300_000,), float(i)), "b": torch.full((3,), float(i))},
                          notebook=NB, root=tmp_path, keep_last=10)
        listed = sum(len(view["blobs"]) + 1 for view in store_module._LEAN.values())
        assert listed == store_module._known["listed"] and (listed <= 12 or len(store_module._LEAN) == 1)
        assert set(store_module._VERIFIED) == set(store_module._LEAN)
    assert len(kernel_state.list_checkpoints(notebook=NB, root=tmp_path)) == 6
    ns = {}
    kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert torch.equal(ns["w"], torch.full((300_000,), 5.0))


def test_a_save_leaves_pythons_collector_as_it_found_it(tmp_path):
    """A save turns the cyclic collector off while it builds its records (collections over the whole heap cost
    a save of 20,000 tiny tensors 1 s of 2.3 s); on again after it, also after a failed save; left off when
    the user had turned it off."""
    import gc
    assert gc.isenabled()
    kernel_state.save({"tiny": [torch.randn(4) for _ in range(100)]}, notebook=NB, root=tmp_path)
    assert gc.isenabled()
    with pytest.raises(Exception):
        kernel_state.save({"x": 1}, notebook=NB, root=tmp_path, keep_last=-3)  # refused: a wrong setting
    assert gc.isenabled()
    gc.disable()
    try:
        kernel_state.save({"x": 1}, notebook=NB, root=tmp_path)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_no_raw_notebook_path_in_any_file_name(tmp_path):
    kernel_state.save({"x": 1}, notebook=NB, root=tmp_path)
    names = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")]
    assert not any("secret-name" in n or "analysis" in n for n in names), names
    info = json.loads(next(tmp_path.glob("notebooks/*/notebook.json")).read_text())
    assert info == {"notebook": NB}


def test_names_that_are_not_user_state_are_not_saved(tmp_path):
    """IPython's output history is left out (a private name is the user's); `In`, `Out`, `exit`... only when
    they hold IPython's own objects (a real kernel's, tests/test_fidelity_state.py): here the script's own."""
    ns = {"In": [""], "Out": {}, "_": 3, "__": 4, "_i1": "x", "_private": 5, "exit": None, "quit": None,
          "get_ipython": print, "os": os, "keep": [1, 2]}
    result = kernel_state.save(ns, notebook=NB, root=tmp_path)
    assert sorted(result["saved"]) == ["In", "Out", "_private", "exit", "get_ipython", "keep", "os", "quit"]
    manifest = json.loads(_manifests(tmp_path)[0].read_text())
    assert manifest["modules"] == {"os": "os"}
    assert not {"_", "__", "_i1"} & set(manifest["variables"])


def test_modules_come_back_by_import_and_missing_ones_are_named(tmp_path):
    import json as json_module
    kernel_state.save({"js": json_module, "x": 1}, notebook=NB, root=tmp_path)
    path = _manifests(tmp_path)[0]
    manifest = json.loads(path.read_text())
    manifest["modules"]["gone"] = "no_such_module_here"
    manifest["checksum"] = manifest_checksum(manifest)  # an edit by hand, not damage
    path.write_text(json.dumps(manifest))
    ns = {}
    result = kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert ns["js"] is json_module and ns["x"] == 1
    assert "module no_such_module_here cannot be imported here" in result["failed"]["gone"]


def test_a_tampered_pickle_is_never_unpickled(tmp_path):
    kernel_state.save({"settings": {"lr": 0.1}}, notebook=NB, root=tmp_path)
    manifest = json.loads(_manifests(tmp_path)[0].read_text())
    blob = tmp_path / "blobs" / f"{manifest['variables']['settings']['pickle']}.pkl"
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    blob.write_bytes(pickle.dumps(Evil()))
    result = kernel_state.restore({}, notebook=NB, root=tmp_path)
    assert "does not match its hash" in result["failed"]["settings"]
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncate", "header", "hole"])
def test_damaged_safetensors_blobs_are_rejected_before_use(tmp_path, damage):
    kernel_state.save({"w": torch.arange(400_000.0), "ok": 7}, notebook=NB, root=tmp_path)
    manifest = json.loads(_manifests(tmp_path)[0].read_text())
    digest = next(iter(r["blob"] for r in manifest["storages"].values()))
    path = tmp_path / "blobs" / f"{digest}.safetensors"
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-4096]
    elif damage == "header":
        data[8:12] = b"\xff\xfe{]"
    else:
        text = data[8:4096].decode().replace('"data_offsets":[0,', '"data_offsets":[8,')
        data[8:4096] = text.encode()
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptBlob) as err:
        read_blob(str(path), digest)
    assert f"blob {digest[:12]}" in str(err.value)
    ns = {}
    result = kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert list(result["failed"]) == ["w"] and ns["ok"] == 7


def test_retention_keeps_the_newest_and_collects_orphan_blobs(tmp_path):
    for i in range(4):
        kernel_state.save({"w": torch.full((300_000,), float(i))}, notebook=NB, root=tmp_path, keep_last=2)
    rows = kernel_state.list_checkpoints(notebook=NB, root=str(tmp_path))
    assert len(rows) == 2
    assert len(list((tmp_path / "blobs").glob("*.safetensors"))) == 2  # blobs of deleted checkpoints are gone
    # a byte budget smaller than one checkpoint still keeps the newest
    result = kernel_state.save({"w": torch.full((300_000,), 9.0)}, notebook=NB, root=tmp_path, max_bytes=1000)
    assert [r["id"] for r in kernel_state.list_checkpoints(notebook=NB, root=str(tmp_path))] == [result["id"]]
    ns = {}
    kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert float(ns["w"][0]) == 9.0


WRONG_RETENTION = [({"GKEWS_KEEP_LAST": "0"}, "GKEWS_KEEP_LAST must be at least 1 (got 0)"),
                   ({"GKEWS_KEEP_LAST": "abc"}, "GKEWS_KEEP_LAST='abc' is not a whole number"),
                   ({"GKEWS_MAX_BYTES": "-5"}, "GKEWS_MAX_BYTES must be 0")]


@pytest.mark.parametrize("env, words", WRONG_RETENTION)
def test_a_wrong_retention_setting_is_refused_before_the_save_writes(tmp_path, monkeypatch, env, words):
    """The save said it failed, yet its checkpoint was there (and every later one went unretained)."""
    kernel_state.save({"w": 1}, notebook=NB, root=tmp_path)
    before = kernel_state.list_checkpoints(notebook=NB, root=str(tmp_path))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=re.escape(words)):
        kernel_state.save({"w": 2}, notebook=NB, root=tmp_path)
    assert kernel_state.list_checkpoints(notebook=NB, root=str(tmp_path)) == before


def test_blobs_shared_between_notebooks_survive_the_other_notebooks_retention(tmp_path):
    w = torch.randn(500_000)
    kernel_state.save({"w": w}, notebook="a.ipynb", root=tmp_path)
    for i in range(3):
        kernel_state.save({"w": w + i + 1}, notebook="b.ipynb", root=tmp_path, keep_last=1)
    kernel_state.save({"w": torch.zeros(3)}, notebook="b.ipynb", root=tmp_path, keep_last=1)
    ns = {}
    assert kernel_state.restore(ns, notebook="a.ipynb", root=tmp_path)["failed"] == {}
    assert torch.equal(ns["w"], w)


def test_cuda_tensors_come_back_on_the_cpu_with_a_warning_when_no_gpu_is_here(tmp_path):
    kernel_state.save({"w": torch.randn(1000, 300), "v": torch.randn(10)}, notebook=NB, root=tmp_path)
    path = _manifests(tmp_path)[0]
    manifest = json.loads(path.read_text())
    for rec in manifest["storages"].values():
        rec["device"] = "cuda:0"  # as if it had been written on a GPU machine
    manifest["checksum"] = manifest_checksum(manifest)  # an edit by hand, not damage
    path.write_text(json.dumps(manifest))
    ns = {}
    result = kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert result["failed"] == {}
    assert result["warnings"] == ["tensors saved on cuda:0 were restored to the CPU: no cuda device is "
                                  "available in this kernel"]
    assert ns["w"].device.type == "cpu"
    with pytest.raises(ValueError, match="no CUDA device is available"):
        kernel_state.restore({}, notebook=NB, root=tmp_path, device="cuda")
    ns = {}
    assert kernel_state.restore(ns, notebook=NB, root=tmp_path, device="cpu")["warnings"] == []


def test_device_checksum_is_the_documented_integer_sum():
    t = torch.randn(1_000_003)
    words = np.frombuffer(t.numpy().tobytes() + b"\0" * ((-t.numel() * 4) % 4), dtype=np.int32).astype(np.int64)
    weights = np.arange(words.size, dtype=np.int64) % 65521 + 1
    s1 = int(words.sum()) & (2**64 - 1)
    s2 = int((words * weights).sum()) & (2**64 - 1)
    assert device_checksum(t.untyped_storage()) == f"{s1:016x}{s2:016x}"
    u = t.clone()
    u[123] = float(np.nextafter(np.float32(u[123]), np.float32(1e9)))  # one bit
    assert device_checksum(u.untyped_storage()) != device_checksum(t.untyped_storage())


def test_save_reports_progress_in_bytes_and_variables(tmp_path):
    seen = []
    kernel_state.save({f"w{i}": torch.randn(1 << 20) for i in range(4)}, notebook=NB, root=tmp_path,
                      progress=seen.append)
    assert seen[-1]["variables_done"] == seen[-1]["variables_total"] == 4
    assert seen[-1]["bytes_done"] >= 4 * 4 * (1 << 20) - 8 * (1 << 20)
    assert seen == sorted(seen, key=lambda p: (p["variables_done"], p["bytes_done"]))


def test_without_torch_plain_state_and_arrays_still_work(tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, kernel_state\n"
        "def f(x): return x + 1\n"
        "ns = {'a': np.arange(50000.0), 'd': {'k': [1, 2]}, 'f': f}\n"
        f"kernel_state.save(ns, notebook='t.ipynb', root={str(tmp_path)!r})\n"
        "out = {}\n"
        f"r = kernel_state.restore(out, notebook='t.ipynb', root={str(tmp_path)!r})\n"
        "assert r['failed'] == {}, r\n"
        "assert out['d'] == {'k': [1, 2]} and out['f'](1) == 2 and (out['a'] == ns['a']).all()\n"
        "print('ok', 'torch' in sys.modules and sys.modules['torch'] is not None)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok False", proc.stderr


@pytest.mark.parametrize("size", [2_000_000, 26_000_000], ids=["one blob", "chunked"])
def test_an_array_another_thread_writes_during_the_save_restores_as_written(tmp_path, monkeypatch, size):
    """A training thread writes into an array after the save hashed it and before its bytes reach the disk. The
    checkpoint must name what it wrote: it restores (the bytes written, old or new), and verify right after that
    restore says match. (It named the hash taken first: a chunk no file has, so the array was lost.)"""
    from kernel_state import capture
    a = np.zeros(size)
    written = {"put": 0}
    put = kernel_state.store.Store.put_tensors

    def write_meanwhile(self, entries, *args, **kwargs):
        written["put"] += 1
        a[-1] = 7.0  # after the hash, before the copy
        return put(self, entries, *args, **kwargs)
    monkeypatch.setattr(kernel_state.store.Store, "put_tensors", write_meanwhile)
    assert capture.CHUNKED <= a.nbytes or size == 2_000_000
    kernel_state.save({"a": a}, notebook=NB, root=tmp_path)
    monkeypatch.setattr(kernel_state.store.Store, "put_tensors", put)
    assert written["put"] >= 1

    ns = {}
    result = kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert result["failed"] == {} and ns["a"][-1] == 7.0 and not ns["a"][:-1].any()
    assert kernel_state.verify(ns, notebook=NB, root=tmp_path)["variables"]["a"]["verdict"] == "match"


@pytest.mark.parametrize("kind", ["tensor", "array", "chunked array"])
def test_memory_written_while_its_blob_is_written_restores(tmp_path, monkeypatch, kind):
    """A training thread writes into a tensor while its blob is being written: between the writer's hash of a
    chunk and that chunk's write to the file. The blob must hold the bytes its name says (it held the newer
    ones under the older hash, so that every restore refused it as damaged, after a save said "Saved")."""
    from kernel_state import safetensors_io
    value = {"tensor": lambda: torch.zeros(6 << 20), "array": lambda: np.zeros(3 << 20),
             "chunked array": lambda: np.zeros(5 << 20)}[kind]()
    flat = value.view(-1) if kind == "tensor" else value.reshape(-1)
    pwrite = safetensors_io._pwrite_all
    writes = []

    def write_meanwhile(fd, buf, offset):
        if offset:  # a data chunk (the header goes at 0)
            writes.append(offset)
            flat[len(writes) % flat.shape[0]] += 1  # the training step, between the hash and the write
        return pwrite(fd, buf, offset)
    monkeypatch.setattr(safetensors_io, "_pwrite_all", write_meanwhile)
    kernel_state.save({"w": value}, notebook=NB, root=tmp_path)
    monkeypatch.setattr(safetensors_io, "_pwrite_all", pwrite)
    assert writes

    ns = {}
    result = kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert result["failed"] == {}, result["failed"]
    restored = ns["w"].view(-1) if kind == "tensor" else ns["w"].reshape(-1)
    assert int((restored != 0).sum()) <= len(writes)  # each step's write, or the zeros before it
    assert kernel_state.verify(ns, notebook=NB, root=tmp_path)["variables"]["w"]["verdict"] == "match"


def test_a_small_tensor_written_during_the_save_does_not_poison_later_saves(tmp_path, monkeypatch):
    """A training thread fills a small gradient with ones after the save hashed its zeros, before the pack was
    written. A later quiet save of another zero tensor must restore zeros: the pack entry was named by the
    earlier bytes, and every later save of zeros referred to the entry holding ones (verify said match)."""
    from kernel_state.capture import Capture
    grad = torch.zeros(300)
    flush = Capture.flush_pack

    def write_meanwhile(self):
        grad.fill_(1.0)  # after the hash, before the pack is written
        return flush(self)
    monkeypatch.setattr(Capture, "flush_pack", write_meanwhile)
    kernel_state.save({"grad": grad}, notebook=NB, root=tmp_path)
    monkeypatch.setattr(Capture, "flush_pack", flush)

    ns = {"mask": torch.zeros(300)}
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    fresh = {}
    assert kernel_state.restore(fresh, notebook=NB, root=tmp_path)["failed"] == {}
    assert torch.equal(fresh["mask"], torch.zeros(300))
    again = {}
    kernel_state.restore(again, notebook=NB, root=tmp_path, checkpoint=kernel_state.list_checkpoints(
        notebook=NB, root=tmp_path)[-1]["id"])
    assert torch.equal(again["grad"], torch.ones(300))  # the racing save holds what it wrote, and says so
    assert kernel_state.verify(again, notebook=NB, root=tmp_path, checkpoint=kernel_state.list_checkpoints(
        notebook=NB, root=tmp_path)[-1]["id"])["variables"]["grad"]["verdict"] == "match"


def test_a_full_restore_names_the_variables_it_left_that_may_hold_replaced_objects(tmp_path):
    """Restoring an older checkpoint over a kernel that made an optimizer since: the optimizer still trains the
    replaced model's tensors, which no variable shows. The restore says which variables it left as they were
    (a restore of named variables already said so)."""
    ns = {"model": torch.nn.Linear(2, 2)}
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    ns["opt"] = torch.optim.SGD(ns["model"].parameters(), lr=0.1)
    result = kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert result["restored"] == ["model"]
    assert [w for w in result["warnings"] if "left as they were, not being in this checkpoint: opt;" in w]
    assert kernel_state.restore({}, notebook=NB, root=tmp_path)["warnings"] == []  # a fresh kernel: nothing left


def test_a_checkpoint_dated_ahead_by_a_wrong_clock_never_outranks_the_saves_after_it(tmp_path, monkeypatch):
    """The clock was a day ahead for one save, then corrected: each later save used to sort before the
    stale one, so keep_last=1 deleted the save that had just succeeded and a restore brought back yesterday."""
    import time
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86400)
    ahead = kernel_state.save({"x": "stale"}, notebook=NB, root=tmp_path)["id"]
    monkeypatch.setattr(time, "time", real)
    for value in ("today", "later"):
        result = kernel_state.save({"x": value}, notebook=NB, root=tmp_path, keep_last=1)
        assert result["id"] > ahead and result["retention"]["deleted"] != [result["id"]], result
    rows = kernel_state.checkpoint.list_checkpoints(notebook=NB, root=tmp_path)
    assert [r["id"] for r in rows] == [result["id"]]
    ns = {}
    kernel_state.restore(ns, notebook=NB, root=tmp_path)
    assert ns["x"] == "later"


def test_packs_of_small_arrays_are_rewritten_once_mostly_dead_so_the_store_stays_near_its_data(tmp_path):
    """50 small arrays (10 MB; each 200 KiB, so packed), 5 of them changed before each save, keep_last=1:
    each save packed the changed ones anew and kept every earlier pack that still held one unchanged array,
    so the store held 3x its data after every older checkpoint was gone. A pack the checkpoint needs less than
    half of is now rewritten: the blobs stay under twice the data."""
    rng = np.random.default_rng(0)
    ns = {f"a{i}": rng.random(25_600) for i in range(50)}
    data = sum(a.nbytes for a in ns.values())
    for _ in range(30):
        for i in rng.choice(50, 5, replace=False):
            ns[f"a{i}"] = rng.random(25_600)
        kernel_state.save(ns, notebook=NB, root=tmp_path, keep_last=1)
    blobs = sum(p.stat().st_size for p in (tmp_path / "blobs").iterdir())
    assert blobs < 2 * data, (blobs, data)
    back = {}
    kernel_state.restore(back, notebook=NB, root=tmp_path)
    assert all(np.array_equal(back[k], v) for k, v in ns.items())


def test_a_checkpoint_deleted_while_the_list_is_read_is_left_out(tmp_path, monkeypatch):
    """GET /gkews/checkpoints answered 500 now and then beside kernel undo: its retention deleted an automatic
    checkpoint between the listing of the ids and the reading of that one's manifest."""
    from kernel_state.store import Store

    for value in (1, 2):
        kernel_state.save({"v": value}, notebook="a.ipynb", root=tmp_path)
    store = Store(str(tmp_path))
    ids = store.checkpoint_ids("a.ipynb")
    monkeypatch.setattr(Store, "checkpoint_ids", lambda self, nb: ["20991231-235959-999-dead"] + ids)
    assert [row["id"] for row in store.list("a.ipynb")] == ids
