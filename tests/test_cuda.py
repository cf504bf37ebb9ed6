"""CUDA paths, asserting what the devices promise: weights and buffers bit-identical after a restore (on
the GPU and with device="cpu"), and forward outputs equal on the same device (never CPU against GPU,
which no two devices promise). Run where a GPU is present (benchmarks/gpu/check.sh); the same pipeline
runs on the CPU through a stand-in device in test_cuda_path_cpu.py."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time

import pytest

import kernel_state
from kernel_state import cuda_io
from kernel_state.fingerprint import DEVICE_ALGORITHM, Mix64Batch, device_checksum, kernel_name, mix64
from kernel_state.hashing import new_hasher
from kernel_state.store import manifest_checksum

torch = pytest.importorskip("torch", reason="the torch extra is installed by make test")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device machine)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NB = "gpu.ipynb"


def raw(t):
    """A tensor's bytes as integers: bit-for-bit comparable for every dtype, float8 included."""
    t = t.detach().contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same_bytes(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(raw(a).cpu(), raw(b).cpu())


def storages(value):
    tensors = value.state_dict().values() if isinstance(value, torch.nn.Module) else [value]
    return [t.untyped_storage() for t in tensors]


def test_a_cuda_model_comes_back_bit_identical_and_computes_the_same_on_the_same_device(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.BatchNorm1d(2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 10)).cuda().eval()
    x = torch.randn(4, 2048, device="cuda")
    with torch.no_grad():
        expected_gpu = model(x)
        expected_cpu = copy.deepcopy(model).cpu()(x.cpu())  # the reference for the CPU is the CPU's own
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    ns = {"model": model, "x": x}
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    manifest = json.loads(next(tmp_path.glob("notebooks/*/manifests/*.json")).read_text())
    assert {r["device"] for r in manifest["storages"].values()} == {"cuda:0"}
    assert {r["fingerprint"]["algorithm"] for r in manifest["storages"].values()} == {DEVICE_ALGORITHM}
    assert kernel_state.verify(ns, notebook=NB, root=tmp_path)["verified"]
    with torch.no_grad():
        model[0].weight[0, 0] += 1e-3  # one weight, on the GPU
    assert kernel_state.verify(ns, notebook=NB, root=tmp_path)["variables"]["model"]["verdict"] == "changed"
    with torch.no_grad():
        model[0].weight[0, 0] = reference["0.weight"][0, 0]

    for device in (None, "cpu"):
        back = {}
        result = kernel_state.restore(back, notebook=NB, root=tmp_path, device=device)
        assert result["failed"] == {} and result["warnings"] == []
        want = "cpu" if device == "cpu" else "cuda"
        assert back["model"][0].weight.device.type == want and back["x"].device.type == want
        for name, value in back["model"].state_dict().items():  # weights and buffers, bit for bit
            assert same_bytes(value, reference[name]), name
        with torch.no_grad():
            out = back["model"].eval()(back["x"])
        assert torch.equal(out, expected_cpu if device == "cpu" else expected_gpu)


@pytest.mark.parametrize("loader", ["pinned", "safetensors"])
def test_dtypes_buffers_tied_weights_and_views_round_trip_on_the_gpu(tmp_path, monkeypatch, loader):
    monkeypatch.setenv("GKEWS_CUDA_LOADER", loader)
    torch.manual_seed(1)
    base = torch.randn(3_000_001, device="cuda")
    emb = torch.nn.Embedding(4096, 512).cuda()
    head = torch.nn.Linear(512, 4096, bias=False).cuda()
    head.weight = emb.weight  # tied
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.BatchNorm1d(512)).cuda()
    model.register_buffer("table", torch.randn(1024, 1024, device="cuda"))
    ns = {"base": base, "view": base[100:100 + 3 * 500_000].view(3, -1), "emb": emb, "head": head, "model": model,
          "bf16": base.to(torch.bfloat16), "f16": base.to(torch.float16),
          "e4m3": base.to(torch.float8_e4m3fn), "e5m2": base.to(torch.float8_e5m2),
          "small_e4m3": base[:1000].to(torch.float8_e4m3fn)}
    kernel_state.save(ns, notebook=NB, root=tmp_path)
    for device in (None, "cpu"):
        back = {}
        result = kernel_state.restore(back, notebook=NB, root=tmp_path, device=device)
        assert result["failed"] == {} and result["warnings"] == []
        want = "cpu" if device == "cpu" else "cuda"
        for name in ("base", "view", "bf16", "f16", "e4m3", "e5m2", "small_e4m3"):
            assert back[name].device.type == want and same_bytes(back[name], ns[name]), name
        for name, value in model.state_dict().items():
            assert same_bytes(back["model"].state_dict()[name], value), name
        assert back["head"].weight is back["emb"].weight
        assert back["view"].untyped_storage().data_ptr() == back["base"].untyped_storage().data_ptr()
        if device is None:
            for value in back.values():
                for storage in storages(value):
                    assert storage.data_ptr() % 64 == 0
    assert all(v.is_pinned() for v in (b.tensor for b in cuda_io.ring(cuda_io.device_for("cuda"))))


def test_a_save_sees_work_still_queued_on_the_gpu(tmp_path):
    """The ring's side stream waits for the current stream: bytes streamed to a file right after work that
    is still queued (no synchronize in between, and no fingerprint first, which would wait for it) are the
    updated values."""
    w = torch.ones(64 << 20, device="cuda")  # 256 MiB
    torch.cuda._sleep(200_000_000)  # the current stream stays busy a while (about 0.1 s)
    w.mul_(3.0)
    path = tmp_path / "w.bin"  # beside the store, not in it: the store refuses a root holding files it did not write
    with open(path, "wb") as f:
        end = cuda_io.stream_to_file(cuda_io.device_for("cuda"), w.untyped_storage(), f.fileno(), 0, new_hasher())
    assert end == w.untyped_storage().nbytes()
    back = torch.from_file(str(path), size=w.numel(), dtype=torch.float32)
    assert torch.equal(back, torch.full_like(back, 3.0))
    kernel_state.save({"w": w}, notebook=NB, root=tmp_path / "store")  # and the whole save, then a restore
    restored = {}
    kernel_state.restore(restored, notebook=NB, root=tmp_path / "store")
    assert torch.equal(restored["w"] * 2, w * 2)  # used at once, on the current stream


def test_peak_host_memory_of_a_gpu_save_and_restore_stays_within_the_staging_bound(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GKEWS_DEVICE_STAGING_MB="256")
    for phase in ("save", "restore"):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu", "peak_memory.py"), phase,
                              "--device", "cuda", "--mib", "3072", "--root", str(tmp_path)],
                             env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        assert figures["ok"] and figures["tensor_bytes"] == 3072 << 20
        assert figures["extra_bytes"] <= (256 + 64) << 20, figures


def test_gpu_fingerprint_is_the_cpu_one_and_sees_swaps_and_rotations():
    t = torch.randn(3 * 65521 + 5, device="cuda")
    assert mix64(t.untyped_storage()) == mix64(t.cpu().untyped_storage())  # the same value on any device
    batch, parts = Mix64Batch(), [t, t[:7].clone(), torch.zeros(0, device="cuda"), t.half()]
    for i, part in enumerate(parts):  # queued together, read back with one wait: the same values
        batch.add(i, part.untyped_storage())
    assert [batch.get(i)["value"] for i in range(len(parts))] == [mix64(p.cpu().untyped_storage()) for p in parts]
    for dist in (1, 2, 65521, 1 << 16, 1 << 17):
        swapped = t.clone()
        swapped[[0, dist]] = t[[dist, 0]]
        assert mix64(swapped.untyped_storage()) != mix64(t.untyped_storage()), dist
        assert mix64(torch.roll(t, dist).untyped_storage()) != mix64(t.untyped_storage()), dist


def test_checkpoints_that_recorded_sum64_still_verify(tmp_path):
    ns = {"w": torch.randn(1000, device="cuda")}
    kernel_state.save(ns, notebook="old.ipynb", root=tmp_path)
    path = next(tmp_path.glob("notebooks/*/manifests/*.json"))
    manifest = json.loads(path.read_text())
    for rec in manifest["storages"].values():  # as an earlier version wrote it
        rec["fingerprint"] = {"algorithm": "sum64", "value": device_checksum(ns["w"].untyped_storage())}
    manifest["checksum"] = manifest_checksum(manifest)
    path.write_text(json.dumps(manifest))
    assert kernel_state.verify(ns, notebook="old.ipynb", root=tmp_path)["verified"]
    ns["w"][7] += 1
    assert kernel_state.verify(ns, notebook="old.ipynb", root=tmp_path)["variables"]["w"]["verdict"] == "changed"


def test_gpu_fingerprint_costs_under_one_percent_of_a_save(tmp_path):
    """mix64 of 1 GiB of weights on the GPU against the save of the same weights (copy, write, fsync)."""
    weights = {f"w{i}": torch.randn(32 << 20, device="cuda") for i in range(8)}  # 8 x 128 MiB
    mix64(weights["w0"].untyped_storage())  # first-use costs (allocator, kernels) are not the fingerprint's
    torch.cuda.synchronize()
    start = time.perf_counter()
    kernel_state.save(weights, notebook="cost.ipynb", root=tmp_path)
    save_s = time.perf_counter() - start
    start = time.perf_counter()
    for w in weights.values():
        mix64(w.untyped_storage())
    torch.cuda.synchronize()
    fingerprint_s = time.perf_counter() - start
    kernel = kernel_name(torch.device("cuda"))
    print(f"mix64 of 1 GiB on the GPU ({kernel}): {fingerprint_s * 1000:.1f} ms; save: {save_s * 1000:.0f} ms "
          f"({100 * fingerprint_s / save_s:.2f}%)")
    assert fingerprint_s < 0.01 * save_s
