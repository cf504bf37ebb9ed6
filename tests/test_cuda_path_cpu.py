"""The device path (kernel_state.cuda_io) on the CPU: the same pipeline the GPU uses, driven through
HostDevice, a stand-in device whose "device memory" is CPU memory and whose copies run asynchronously
in a worker thread. tests/test_cuda.py runs the real thing where a GPU is present."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

import kernel_state
from kernel_state import config, cuda_io

torch = pytest.importorskip("torch", reason="the torch extra is installed by make test")
safetensors_torch = pytest.importorskip("safetensors.torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the repository first, then what the caller had (benchmarks/gpu/check.sh puts its wheels there)
PYTHONPATH = os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])
NB = "device.ipynb"
MIB = 1 << 20
BUFFER = 2 * MIB  # GKEWS_DEVICE_STAGING_MB=8: four buffers of 2 MiB


class Trace:
    """Records what the stand-in device does, and lets a test hold one step until a condition holds."""

    def __init__(self):
        self.events: list[tuple] = []
        self.changed = threading.Condition()
        self.hold = None  # (event to hold, predicate over the events that releases it)
        self.held_until_condition: bool | None = None

    def __call__(self, *event):
        with self.changed:
            self.events.append(event)
            self.changed.notify_all()
        if self.hold and event == self.hold[0]:
            self.held_until_condition = self.wait_for(self.hold[1])

    def wait_for(self, predicate, timeout=20.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self.events), timeout)

    def count(self, what: str, phase: str = "done") -> int:
        return sum(1 for e in self.events if e[:2] == (what, phase))


@pytest.fixture
def device(monkeypatch):
    """A stand-in device for CPU tensors: every CPU storage of 1 MiB or more takes the device path."""
    monkeypatch.setenv("GKEWS_DEVICE_STAGING_MB", "8")
    trace = Trace()
    fake = cuda_io.HostDevice(trace)
    monkeypatch.setitem(cuda_io.BACKENDS, "cpu", fake)
    cuda_io.release()
    yield trace
    cuda_io.release()


def chunks(nbytes: int) -> int:
    return -(-nbytes // BUFFER)


def raw(t):
    """The bytes of a tensor, comparable for every dtype (float8 has no equality on the CPU)."""
    return t.detach().contiguous().view(torch.uint8) if t.dtype.itemsize == 1 else t.detach().contiguous().view(
        {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.dtype.itemsize])


def namespace():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(1024, 700)
    model = torch.nn.Sequential(torch.nn.Linear(600, 700), torch.nn.BatchNorm1d(700),
                                torch.nn.Linear(700, 1024, bias=False))
    model[2].weight = emb.weight  # tied: one storage under two names
    model.register_buffer("table", torch.randn(512, 1100))  # a large buffer, not a parameter
    base = torch.randn(3_000_001)  # not a whole number of buffers, nor of 4 KiB pages
    return {
        "emb": emb, "model": model, "base": base, "view": base[1000:1000 + 7 * 128_000].view(-1, 7),
        "bf16": base.to(torch.bfloat16), "f16": base.to(torch.float16),
        "e4m3": base.to(torch.float8_e4m3fn), "e5m2": base.to(torch.float8_e5m2),
    }


def flip_byte(path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(offset, os.SEEK_END)
        f.write(bytes([byte ^ 0xFF]))


def streamed_storages(root) -> dict:
    manifest = json.loads(next(root.glob("notebooks/*/manifests/*.json")).read_text())
    return {k: r for k, r in manifest["storages"].items() if r["nbytes"] >= cuda_io.STREAM_MIN}


def assert_same(back, ns):
    for name in ("base", "view", "bf16", "f16", "e4m3", "e5m2"):
        assert back[name].dtype == ns[name].dtype and back[name].shape == ns[name].shape, name
        assert torch.equal(raw(back[name]), raw(ns[name])), name
    for name, value in ns["model"].state_dict().items():
        assert torch.equal(back["model"].state_dict()[name], value), name
    assert isinstance(back["model"][0].weight, torch.nn.Parameter)
    assert back["model"][2].weight is back["emb"].weight  # still tied
    assert back["view"].untyped_storage().data_ptr() == back["base"].untyped_storage().data_ptr()  # still a view
    assert back["view"].storage_offset() == 1000


@pytest.mark.parametrize("direct_io", ["write", "both", "none"])
def test_dtypes_parameters_buffers_tied_weights_and_views_round_trip_through_the_ring(tmp_path, device, monkeypatch,
                                                                                      direct_io):
    monkeypatch.setenv("GKEWS_DIRECT_IO", direct_io)
    ns = namespace()
    kernel_state.save(ns, notebook=NB, root=tmp_path / "ring")
    streamed = streamed_storages(tmp_path / "ring")
    assert len(streamed) == 8  # emb (= the tied head), a Linear weight, the table, base and 4 dtypes
    assert device.count("d2h") == sum(chunks(r["nbytes"]) for r in streamed.values())

    # the same blobs, byte for byte, as the plain CPU path writes: the format does not depend on the path
    monkeypatch.delitem(cuda_io.BACKENDS, "cpu")
    kernel_state.save(ns, notebook=NB, root=tmp_path / "plain")
    assert sorted(os.listdir(tmp_path / "ring" / "blobs")) == sorted(os.listdir(tmp_path / "plain" / "blobs"))
    for record in streamed.values():  # and the safetensors library reads them
        path = tmp_path / "ring" / "blobs" / f"{record['blob']}.safetensors"
        assert safetensors_torch.load_file(str(path))["t"].untyped_storage().nbytes() == record["nbytes"]

    plain = {}
    assert kernel_state.restore(plain, notebook=NB, root=tmp_path / "ring", device="cpu")["failed"] == {}
    assert_same(plain, ns)

    monkeypatch.setitem(cuda_io.BACKENDS, "cpu", cuda_io.HostDevice(device))
    back = {}
    result = kernel_state.restore(back, notebook=NB, root=tmp_path / "ring")
    assert result["failed"] == {} and result["warnings"] == []
    assert device.count("h2d") == sum(chunks(r["nbytes"]) for r in streamed.values())
    assert_same(back, ns)
    for value in back.values():
        tensors = value.state_dict().values() if isinstance(value, torch.nn.Module) else [value]
        for t in tensors:  # each storage that came through the ring (small ones share the pack blob)
            if t.untyped_storage().nbytes() >= cuda_io.STREAM_MIN:
                assert t.untyped_storage().data_ptr() % 64 == 0
    verdicts = kernel_state.verify(back, notebook=NB, root=tmp_path / "ring")["variables"]
    assert all(v["verdict"] == "match" for v in verdicts.values())


def test_device_to_host_copies_run_while_the_disk_writes(tmp_path, device, monkeypatch):
    """The first chunk's write is held until the device has started copying the second chunk: a save
    that waited for each write before the next copy would never get there."""
    nbytes = 3 * BUFFER
    first = []

    def write_piece(fd, direct, view, address, offset):
        if not first:
            first.append(offset)
            first.append(device.wait_for(lambda events: ("d2h", "start", BUFFER) in events))
        original(fd, direct, view, address, offset)

    original = cuda_io.write_piece
    monkeypatch.setattr(cuda_io, "write_piece", write_piece)
    ns = {"t": torch.randint(0, 255, (nbytes,), dtype=torch.uint8)}
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    assert first[1] is True, "the second chunk was not copied while the first one was being written"
    back = {}
    kernel_state.restore(back, notebook=NB, root=tmp_path)
    assert torch.equal(back["t"], ns["t"])


def test_host_to_device_copies_run_while_the_next_chunk_is_read(tmp_path, device, monkeypatch):
    """The first chunk's copy to the device is held until the second chunk's read has started."""
    ns = {"t": torch.randint(0, 255, (3 * BUFFER + 5,), dtype=torch.uint8)}
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    reads = []

    def read_chunk(fd, direct, buf, position, n):
        reads.append(position)
        device("read", "start", position)
        return original(fd, direct, buf, position, n)

    original = cuda_io._read_chunk
    monkeypatch.setattr(cuda_io, "_read_chunk", read_chunk)
    device.hold = (("h2d", "start", 0), lambda events: any(e[:2] == ("read", "start") and e[2] > min(reads)
                                                           for e in events))
    back = {}
    assert kernel_state.restore(back, notebook=NB, root=tmp_path)["failed"] == {}
    assert device.held_until_condition is True, "the next chunk was not read while the first went to the device"
    assert torch.equal(back["t"], ns["t"])


def run_phase(phase, root, env, mib=None):
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu", "peak_memory.py"), phase, "--device", "fake",
           "--root", str(root)] + (["--mib", str(mib)] if mib else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_peak_host_memory_of_a_save_and_a_restore_stays_within_the_staging_bound(tmp_path):
    """A 512 MiB tensor through a 32 MiB ring: the process's resident high-water mark grows by the ring
    and a little more, not by the tensor (a restore also holds the "device" copy, subtracted here)."""
    env = dict(os.environ, GKEWS_DEVICE_STAGING_MB="32", PYTHONPATH=PYTHONPATH)
    bound = 32 * MIB + 16 * MIB  # the ring, plus the interpreter's own allocations while it works
    saved = run_phase("save", tmp_path, env, mib=512)
    assert saved["ok"] and saved["high_water_reset"] and saved["tensor_bytes"] == 512 * MIB
    assert saved["extra_bytes"] <= bound, saved
    restored = run_phase("restore", tmp_path, env)
    assert restored["ok"] and restored["tensor_bytes"] == 512 * MIB
    assert restored["extra_bytes"] <= bound, restored


def test_a_damaged_or_truncated_blob_fails_only_its_variable(tmp_path, device):
    ns = {"a": torch.randn(700_000), "b": torch.randn(800_000), "c": torch.randn(900_000)}
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    storages = streamed_storages(tmp_path)
    blob = {r["nbytes"]: tmp_path / "blobs" / f"{r['blob']}.safetensors" for r in storages.values()}
    flip_byte(blob[2_800_000], -100)
    os.truncate(blob[3_200_000], blob[3_200_000].stat().st_size - 10)
    back = {}
    result = kernel_state.restore(back, notebook=NB, root=tmp_path)
    assert "does not match its hash" in result["failed"]["a"]
    assert "header describes" in result["failed"]["b"]
    assert list(back) == ["c"] and torch.equal(back["c"], ns["c"])


def test_the_safetensors_loader_setting_restores_the_same_bytes_and_checks_the_hash(tmp_path, device, monkeypatch):
    monkeypatch.setenv("GKEWS_CUDA_LOADER", "safetensors")
    ns = namespace()
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    back = {}
    assert kernel_state.restore(back, notebook=NB, root=tmp_path)["failed"] == {}
    assert device.count("h2d") == 0  # safetensors' loader, not the ring
    assert_same(back, ns)
    largest = max(streamed_storages(tmp_path).values(), key=lambda r: r["nbytes"])
    flip_byte(tmp_path / "blobs" / f"{largest['blob']}.safetensors", -1)
    result = kernel_state.restore({}, notebook=NB, root=tmp_path)
    assert any("does not match its hash" in reason for reason in result["failed"].values())


def test_settings_say_what_is_wrong_and_how_to_fix_it(monkeypatch):
    assert config.staging_bytes() == 256 * MIB
    assert cuda_io.ring_shape(256 * MIB) == (64 * MIB, 4)
    assert cuda_io.ring_shape(1024 * MIB) == (64 * MIB, 8)
    assert cuda_io.ring_shape(8 * MIB) == (2 * MIB, 4)
    monkeypatch.setenv("GKEWS_DEVICE_STAGING_MB", "4")
    with pytest.raises(ValueError, match="GKEWS_DEVICE_STAGING_MB must be at least 8"):
        config.staging_bytes()
    monkeypatch.setenv("GKEWS_CUDA_LOADER", "fast")
    with pytest.raises(ValueError, match="GKEWS_CUDA_LOADER='fast' is not one of pinned, safetensors"):
        config.cuda_loader()
    monkeypatch.setenv("GKEWS_DIRECT_IO", "always")
    with pytest.raises(ValueError, match="GKEWS_DIRECT_IO='always' is not one of write, read, both, none"):
        config.direct_io()


@pytest.mark.timeout(600)  # the subprocess's own limit, not pytest's default 300 s
def test_the_gpu_benchmark_runs_on_the_cpu_with_smoke(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_gpu.py"), "--smoke",
                          "--dir", str(tmp_path), "--json", str(tmp_path / "bench.json")],
                         env=dict(os.environ, PYTHONPATH=PYTHONPATH), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    figures = json.loads((tmp_path / "bench.json").read_text())
    assert figures["device"] == "fake" and figures["ok"] is True
    for ratio in ("full save / dd O_DIRECT", "full save / torch.save + fsync", "cold restore / safetensors load_file",
                  "unchanged re-save / full save", "verify / full save"):
        assert ratio in figures["ratios"] and figures["ratios"][ratio] > 0, ratio
        assert ratio in out.stdout


def test_kernel_undo_stages_a_changed_device_tensor_through_the_ring(tmp_path, device):
    """An automatic checkpoint copies a changed device storage to host memory through the pinned ring
    before the next cell runs (only that storage), so the checkpoint holds the end of its cell even when
    the next cell changes the tensor again while the writer writes; it restores bit-identical."""
    from kernel_state import auto
    ns = namespace()

    class Shell:
        user_ns, execution_count, config = ns, 3, {}
    undo = auto.AutoCheckpoint()
    undo.shell, undo.root, undo.notebook = Shell(), str(tmp_path / "undo"), NB
    undo.snapshot({"cell": 1, "source": "first"})
    assert undo.writer.wait_idle(120) and undo.writer.error is None
    before = device.count("d2h")
    weight = ns["model"][0].weight
    with torch.no_grad():
        weight.mul_(1.001)
    expected = {k: v.clone() for k, v in ns["model"].state_dict().items()}
    undo.writer.hold()  # the writer takes the snapshot but writes nothing until the next cell has run
    undo.snapshot({"cell": 2, "source": "second"})
    assert device.count("d2h") - before == chunks(weight.untyped_storage().nbytes())
    with torch.no_grad():
        weight.add_(1.0)  # the next cell
    undo.writer.release()
    assert undo.writer.wait_idle(120) and undo.writer.error is None, undo.writer.error
    back = {}
    kernel_state.restore(back, notebook=NB, root=undo.root, checkpoint=undo.writer.last["id"])
    for name, value in expected.items():
        assert torch.equal(raw(back["model"].state_dict()[name]), raw(value)), name
    assert back["model"][2].weight is back["emb"].weight


def test_a_full_resave_and_verify_wait_for_the_device_fingerprints_once(tmp_path, monkeypatch):
    """A re-save proves each GPU storage unchanged by fingerprinting it on the GPU, and verify (the resume's
    proof) compares them. Those fingerprints are queued for every storage before the walk and read back with
    one wait, not one wait per parameter (the GPU idle while Python queues the next); a write the version
    counter did not see is still found. Here
    storages of 1 MiB or more stand for GPU ones: they get the device fingerprint, computed on the CPU."""
    import kernel_state.capture as capture
    import kernel_state.fingerprint as f

    def big(ust):
        return ust.nbytes() >= MIB
    monkeypatch.setattr(f, "on_device", big)
    monkeypatch.setattr(capture, "on_device", big)
    waits = {"one storage": 0, "all at once": 0}
    single, read_back = f.mix64, f.Mix64Batch._read_back

    def one(ust):
        waits["one storage"] += 1
        return single(ust)

    def batch(self):
        waits["all at once"] += 1
        return read_back(self)
    monkeypatch.setitem(f._DEVICE_ALGORITHMS, f.DEVICE_ALGORITHM, one)
    monkeypatch.setattr(f.Mix64Batch, "_read_back", batch)
    torch.manual_seed(0)
    ns = {"model": torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)])}  # 1 MiB weights
    root = str(tmp_path / "store")
    kernel_state.save(ns, notebook=NB, root=root)
    manifest = json.loads(next((tmp_path / "store" / "notebooks").glob("*/manifests/*.json")).read_text())
    assert [s["fingerprint"]["algorithm"] for s in manifest["storages"].values()].count("mix64") == 6

    waits.update({"one storage": 0, "all at once": 0})
    unchanged = kernel_state.save(ns, notebook=NB, root=root)
    assert waits == {"one storage": 0, "all at once": 1}
    assert unchanged["bytes_written"] < MIB  # every weight's blob reused
    waits.update({"one storage": 0, "all at once": 0})
    assert kernel_state.verify(ns, notebook=NB, root=root)["variables"]["model"]["verdict"] == "match"
    assert waits == {"one storage": 0, "all at once": 1}  # verify (the resume's proof) too

    weight = ns["model"][3].weight
    weight.data.add_(1.0)  # .data: the bytes change, the parameter's version does not
    assert kernel_state.verify(ns, notebook=NB, root=root)["variables"]["model"] == {
        "verdict": "changed", "detail": "1 of 12 tensors/arrays differ"}
    changed = kernel_state.save(ns, notebook=NB, root=root)
    assert changed["bytes_written"] >= MIB
    back = {}
    kernel_state.restore(back, notebook=NB, root=root)
    assert torch.equal(back["model"][3].weight, weight) and torch.equal(back["model"][0].weight, ns["model"][0].weight)
