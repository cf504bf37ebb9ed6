"""CUDA paths: run where a GPU is present (the device machine); the CPU-side logic is in test_checkpoint_store."""
from __future__ import annotations

import json

import pytest

import kernel_state

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
    assert {r["fingerprint"]["algorithm"] for r in manifest["storages"].values()} == {"sum64"}
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
