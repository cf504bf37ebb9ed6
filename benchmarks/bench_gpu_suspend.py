"""Local GPU suspend against shutdown: the same kernel state paused and resumed both ways.

    .venv/bin/python benchmarks/bench_gpu_suspend.py [--gib 4] [--cycles 2] [--json out.json]
    .venv/bin/python benchmarks/bench_gpu_suspend.py --smoke      # no GPU: simulated driver, CPU kernel

For each release mode (c.LocalBackend.release_mode = suspend, then shutdown) a real `jupyter server` starts
with one notebook whose kernel holds a CUDA model and --gib GiB of random float32 on the GPU. Each cycle:
POST pause until GET status says paused (pause), POST resume until it says active (resume), and POST resume
until the first cell's result (model output) is back (resume → first cell). Suspend moves the device memory
to host memory and back in the same process (verdict live-verified); shutdown writes the application
checkpoint, stops the kernel, and restores a fresh one from disk (restored-from-checkpoint). Both modes take
the application checkpoint first, so the pause figures differ by the release step only.

--smoke runs the same sequence on the CPU with the fake driver (c.LocalBackend.gpu_api = "fake"): a numpy
array instead of CUDA tensors, and the fake's file says the kernel holds --gib GiB. Its figures measure the
server's own path, not a GPU; CI runs it to keep the benchmark working.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from serverproc import Server  # noqa: E402  (tests/serverproc.py: the harness the tests use too)

GPU_SETUP = r'''
import os, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 16)).cuda()
probe = torch.randn(64, 4096, device="cuda")
ballast = torch.randn(int({gib} * 2**30) // 4, device="cuda")
torch.cuda.synchronize()
print(os.getpid())
'''
GPU_CELL = "with torch.no_grad(): print(float(model(probe).sum()))"
CPU_SETUP = r'''
import os, numpy as np
ballast = np.random.default_rng(0).standard_normal(1_000_000)
print(os.getpid())
'''
CPU_CELL = "print(float(ballast.sum()))"


def measure(base: Path, mode: str, args) -> dict:
    server = Server(base, request_timeout=120, cell_timeout=1200)
    server.extra_args = [f"--LocalBackend.release_mode={mode}"]
    if args.smoke:
        server.extra_args += ["--LocalBackend.gpu_api=fake", "--LocalBackend.host_memory_reserve=0"]
    setup, cell = (CPU_SETUP, CPU_CELL) if args.smoke else (GPU_SETUP.replace("{gib}", str(args.gib)), GPU_CELL)
    pids = []
    try:
        server.start()
        kid = server.open_notebook("bench.ipynb")["kernel"]["id"]
        pid = int(server.run_cell(kid, setup).strip())
        pids.append(pid)
        if args.smoke:
            from jupyter_gkews.gpu_suspend import fake
            with fake.edit(os.environ[fake.ENV]) as data:
                data["processes"][str(pid)] = {"device": 0, "bytes": int(args.gib * 2 ** 30), "state": "running"}
        expected = server.run_cell(kid, cell)
        rows = []
        for _ in range(args.cycles):
            t0 = time.perf_counter()
            transition(server, "pause")
            paused = wait(server, "paused")
            t1 = time.perf_counter()
            transition(server, "resume")
            resumed = wait(server, "active")
            t2 = time.perf_counter()
            out = server.run_cell(kid, cell)
            t3 = time.perf_counter()
            assert out == expected, f"{mode}: the model's output changed: {out!r} != {expected!r}"
            pnb, rnb = paused["notebooks"][0], resumed["notebooks"][0]
            pids.append(int(server.run_cell(kid, "print(os.getpid())").strip()))
            rows.append({"pause_s": t1 - t0, "resume_s": t2 - t1, "resume_to_first_cell_s": t3 - t1,
                         "paused_as": pnb["status"], "message": pnb.get("message"), "verdict": rnb["verdict"],
                         "checkpoint_s": pnb.get("seconds"), "suspend_s": (pnb.get("gpu") or {}).get("seconds")})
        return {"mode": mode, "cycles": rows,
                **{k: statistics.median(r[k] for r in rows) for k in ("pause_s", "resume_s", "resume_to_first_cell_s")}}
    finally:
        server.kill()
        for p in pids:
            try:
                os.kill(p, 9)
            except (ProcessLookupError, PermissionError):
                pass


def transition(server: Server, action: str) -> None:
    while True:
        code, payload = server.post(f"gkews/{action}")
        if code == 202:
            return
        if code == 409 and "transition is running" in payload.get("message", ""):
            time.sleep(0.005)  # the previous transition is persisting its last state
            continue
        raise RuntimeError(f"POST {action}: {code} {payload}")


def wait(server: Server, state: str) -> dict:
    s = server.wait_for((state, "failed"), timeout=1800, interval=0.01)
    if s["state"] == "failed":
        raise RuntimeError(f"the lifecycle failed: {s['message']}")
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=4.0, help="GiB of device memory the kernel holds (beyond the model)")
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="CPU only: simulated GPU driver (fake), tiny state")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gkews-bench-gpu-") as tmp:
        if args.smoke:
            os.environ["GKEWS_FAKE_GPU"] = os.path.join(tmp, "fake-gpu.json")
        results = [measure(Path(tmp) / mode, mode, args) for mode in ("suspend", "shutdown")]
    print(f"{'mode':<9} {'pause s':>8} {'resume s':>9} {'resume→1st cell s':>18}  paused as / verdict")
    for r in results:
        c = r["cycles"][-1]
        print(f"{r['mode']:<9} {r['pause_s']:8.2f} {r['resume_s']:9.2f} {r['resume_to_first_cell_s']:18.2f}  "
              f"{c['paused_as']} / {c['verdict']}  ({c['message']})")
    if args.smoke:
        print("(smoke: simulated driver on the CPU; these figures are the server's path, not a GPU's)")
    if args.json:
        Path(args.json).write_text(json.dumps({"smoke": args.smoke, "gib": args.gib, "results": results}, indent=1))


if __name__ == "__main__":
    main()
