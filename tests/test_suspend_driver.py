"""The messages a user reads when the GPU suspend cannot be used: the extra missing, a driver too old, the API
refused. The real wrapper runs against a stand-in `cuda.bindings.driver` module that answers as such drivers
do (the wrapper only calls it; the real module needs a GPU driver to load)."""
from __future__ import annotations

import sys
import types

import pytest

from jupyter_gkews.gpu_suspend.driver import CudaCheckpointDriver, DriverError, GpuUnavailable, refusal
from jupyter_gkews.gpu_suspend.nvml import NvmlMemory


def fake_bindings(monkeypatch, *, version=12080, init=0, results=None, has_api=True):
    driver = types.SimpleNamespace(
        cuInit=lambda flags: (init,), cuDriverGetVersion=lambda: (0, version),
        cuGetErrorName=lambda err: (0, {2: b"CUDA_ERROR_OUT_OF_MEMORY", 801: b"CUDA_ERROR_NOT_SUPPORTED",
                                        100: b"CUDA_ERROR_NO_DEVICE"}.get(int(err), b"")),
        CUcheckpointLockArgs=types.SimpleNamespace)
    if has_api:
        for name in ("Lock", "Checkpoint", "Restore", "Unlock"):
            call = f"cuCheckpointProcess{name}"
            setattr(driver, call, lambda pid, args, _c=call: ((results or {}).get(_c, 0),))
        driver.cuCheckpointProcessGetState = lambda pid: (0, 2)
    cuda = types.ModuleType("cuda")
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = driver
    cuda.bindings = bindings
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)


def test_extra_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(GpuUnavailable, match=r'pip install "jupyter-gkews\[gpu\]"'):
        CudaCheckpointDriver()
    with pytest.raises(GpuUnavailable, match=r'pip install "jupyter-gkews\[gpu\]"'):
        NvmlMemory()


def test_driver_too_old(monkeypatch):
    fake_bindings(monkeypatch, version=12020)
    with pytest.raises(GpuUnavailable, match=r"supports CUDA 12\.2; the checkpoint API needs driver 550"):
        CudaCheckpointDriver()


def test_bindings_without_the_api(monkeypatch):
    fake_bindings(monkeypatch, has_api=False)
    with pytest.raises(GpuUnavailable, match=r"no checkpoint API .* upgrade it"):
        CudaCheckpointDriver()


def test_no_gpu(monkeypatch):
    fake_bindings(monkeypatch, init=100)
    with pytest.raises(GpuUnavailable, match="cuInit failed with CUDA_ERROR_NO_DEVICE"):
        CudaCheckpointDriver()


def test_refused_and_failed_calls(monkeypatch):
    fake_bindings(monkeypatch, results={"cuCheckpointProcessLock": 801, "cuCheckpointProcessRestore": 2})
    driver = CudaCheckpointDriver()
    assert driver.state(1234) == "checkpointed"
    with pytest.raises(DriverError) as refused:
        driver.lock(1234, 5.0)
    assert "gVisor" in refusal(refused.value) and "CUDA_ERROR_NOT_SUPPORTED" in refusal(refused.value)
    with pytest.raises(DriverError) as oom:
        driver.restore(1234)
    assert oom.value.out_of_memory and refusal(oom.value) is None
    assert str(oom.value) == "cuCheckpointProcessRestore for pid 1234 returned CUDA_ERROR_OUT_OF_MEMORY (2)"
    driver.checkpoint(1234)
    driver.unlock(1234)


def test_driver_without_the_symbols(monkeypatch):
    fake_bindings(monkeypatch)

    def missing(pid):
        raise RuntimeError('Function "cuCheckpointProcessGetState" not found')
    sys.modules["cuda.bindings.driver"].cuCheckpointProcessGetState = missing
    with pytest.raises(GpuUnavailable, match="not in this NVIDIA driver .* needs driver 550 or later"):
        CudaCheckpointDriver()
