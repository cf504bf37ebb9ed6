"""Local GPU suspend on a real GPU: a real server and kernel, NVIDIA's driver checkpoint API and NVML.

The kernel holds a CUDA model; a pause in suspend mode must give its device memory back (NVML shows the
process gone from the GPU), and the resume must bring the same process back live-verified with the model's
output bit-identical. Runs where a GPU and the gpu extra are present (benchmarks/gpu/check.sh); the same
policy runs on the CPU against a simulated GPU in tests/test_suspend_fake*.py.
"""
from __future__ import annotations

import json
import signal

import pytest
from serverproc import Server
from test_lifecycle_restart import kill_pids

torch = pytest.importorskip("torch", reason="the torch extra is installed by make test")
pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device machine)"),
              pytest.mark.timeout(140)]

GIB = 1024 ** 3
SETUP = r'''
import os, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 16)).cuda()
probe = torch.randn(64, 4096, device="cuda")
ballast = torch.randn(256 * 1024 * 1024, device="cuda")  # 1 GiB more device memory to move
torch.cuda.synchronize()
print(os.getpid())
'''
CHECK = r'''
import json, hashlib
with torch.no_grad():
    out = model(probe).cpu()
print(json.dumps({"pid": os.getpid(), "out": hashlib.sha256(out.numpy().tobytes()).hexdigest(),
                  "ballast": float(ballast[:1000].sum())}))
'''


def nvml_used_by(pid: int) -> int:
    import pynvml
    pynvml.nvmlInit()
    used = 0
    for i in range(pynvml.nvmlDeviceGetCount()):
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i)):
            if p.pid == pid:
                used += p.usedGpuMemory or 1  # present without a figure still means "holds a context"
    return used


def test_suspend_gives_the_gpu_back_and_resumes_live(tmp_path):
    pytest.importorskip("pynvml", reason='needs the gpu extra: pip install "jupyter-gkews[gpu]"')
    pytest.importorskip("cuda.bindings.driver", reason='needs the gpu extra: pip install "jupyter-gkews[gpu]"')
    server = Server(tmp_path, cell_timeout=600)
    server.extra_args = ["--LocalBackend.release_mode=suspend"]
    pids: list[int] = []
    try:
        server.start()
        kid = server.open_notebook("gpu.ipynb")["kernel"]["id"]
        pid = int(server.run_cell(kid, SETUP).strip())
        pids.append(pid)
        before = json.loads(server.run_cell(kid, CHECK))
        held = nvml_used_by(pid)
        assert held > GIB, f"NVML does not show the kernel {pid} holding its 1 GiB+ (pid namespace?): {held}"

        code, r = server.post("gkews/pause")
        assert code == 202, r
        s = server.wait_for(("paused", "failed"), timeout=600)
        assert s["state"] == "paused", s["message"]
        nb = s["notebooks"][0]
        assert nb["status"] == "suspended", nb
        assert nb["message"].startswith("suspended in host memory ("), nb["message"]
        left = nvml_used_by(pid)
        assert left < 64 * 1024 ** 2, f"NVML still shows the suspended kernel holding {left} bytes on the GPU"
        print(f"suspended {nb['gpu']['bytes'] / GIB:.2f} GiB in {nb['gpu']['seconds']:.2f} s")

        code, r = server.post("gkews/resume")
        assert code == 202, r
        s = server.wait_for(("active", "failed"), timeout=600)
        assert s["state"] == "active", s["message"]
        nb = s["notebooks"][0]
        assert nb["verdict"] == "live-verified" and nb["kernel_id"] == kid, nb
        assert nvml_used_by(pid) > GIB
        after = json.loads(server.run_cell(kid, CHECK))
        assert after == before  # same pid, bit-identical model output and data
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.signal(signal.SIGTERM)
        kill_pids(pids)
