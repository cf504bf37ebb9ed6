"""CUDA paths: run where a GPU is present (the device machine); the CPU-side logic is in test_checkpoint_store."""
from __future__ import annotations

import json
import time

import pytest

import kernel_state
from kernel_state.fingerprint import device_checksum, mix64
from kernel_state.store import manifest_checksum

torch = pytest.importorskip("torch", reason="the torch extra is installed by make test")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device machine)")


def test_cuda_model_round_trip_and_fingerprints_on_the_gpu(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 10)).cuda()
    x = torch.randn(4, 2048, device="cuda")
    expected = model(x)
    ns = {"model": model, "x": x}
    kernel_state.save(ns, notebook="gpu.ipynb", root=tmp_path)
    manifest = json.loads(next(tmp_path.glob("notebooks/*/manifests/*.json")).read_text())
    assert {r["device"] for r in manifest["storages"].values()} == {"cuda:0"}
    assert {r["fingerprint"]["algorithm"] for r in manifest["storages"].values()} == {"mix64"}
    assert kernel_state.verify(ns, notebook="gpu.ipynb", root=tmp_path)["verified"]
    with torch.no_grad():
        model[0].weight[0, 0] += 1e-3  # one weight, on the GPU
    verdict = kernel_state.verify(ns, notebook="gpu.ipynb", root=tmp_path)
    assert verdict["variables"]["model"]["verdict"] == "changed"

    back = {}
    result = kernel_state.restore(back, notebook="gpu.ipynb", root=tmp_path)
    assert result["failed"] == {} and result["warnings"] == []
    assert back["model"][0].weight.device.type == "cuda"
    assert torch.equal(back["model"](back["x"]), expected)
    cpu = {}
    kernel_state.restore(cpu, notebook="gpu.ipynb", root=tmp_path, device="cpu")
    assert cpu["model"][0].weight.device.type == "cpu"
    assert torch.equal(cpu["model"](cpu["x"]), expected.cpu())


def test_gpu_fingerprint_is_the_cpu_one_and_sees_swaps_and_rotations():
    t = torch.randn(3 * 65521 + 5, device="cuda")
    assert mix64(t.untyped_storage()) == mix64(t.cpu().untyped_storage())  # the same value on any device
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
    print(f"mix64 of 1 GiB on the GPU: {fingerprint_s * 1000:.1f} ms; save: {save_s * 1000:.0f} ms "
          f"({100 * fingerprint_s / save_s:.2f}%)")
    assert fingerprint_s < 0.01 * save_s
