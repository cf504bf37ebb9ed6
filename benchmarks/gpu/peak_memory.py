"""Peak extra host memory of saving, then restoring, one large tensor on a device.

    python benchmarks/gpu/peak_memory.py save    --device cuda --mib 10240 --root DIR
    python benchmarks/gpu/peak_memory.py restore --device cuda --root DIR

Each phase runs in its own process (run them one after the other) and prints one JSON line. "Extra" is
the process's resident high-water mark (VmHWM, reset through /proc/self/clear_refs just before the
operation) minus its resident memory just before it; for a restore the device's own allocation is
subtracted when the "device" is host memory (--device fake: the CPU stand-in used by the tests). The
data is random, and the restore phase checks it with kernel_state.verify against the saved fingerprints.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_high_water() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=("save", "restore"))
    ap.add_argument("--device", choices=("cuda", "fake"), default="cuda")
    ap.add_argument("--mib", type=int, default=10240, help="save: the tensor's size in MiB (default 10240)")
    ap.add_argument("--root", required=True, help="the checkpoint store")
    args = ap.parse_args()

    import torch

    import kernel_state
    from kernel_state import config, cuda_io

    if args.device == "fake":
        cuda_io.BACKENDS["cpu"] = cuda_io.HostDevice()
        device = "cpu"
    else:
        device = "cuda"
        # the CUDA context and the fingerprint's kernels are loaded before the baseline is read
        from kernel_state.fingerprint import storage_fingerprint
        storage_fingerprint(torch.ones(1024, device=device).untyped_storage(), "F32", [1024])
    notebook = "peak-memory"
    if args.phase == "save":
        gen = torch.Generator(device=device).manual_seed(1)
        big = torch.empty(args.mib << 20, dtype=torch.uint8, device=device)
        big.random_(0, 256, generator=gen)
        namespace = {"big": big}
    else:
        namespace = {}
    if device == "cuda":
        torch.cuda.synchronize()
    reset = reset_high_water()
    before = status_kib("VmRSS")
    started = time.perf_counter()
    if args.phase == "save":
        result = kernel_state.save(namespace, notebook=notebook, root=args.root)
        ok = not result["skipped"]
    else:
        result = kernel_state.restore(namespace, notebook=notebook, root=args.root)
        ok = result["failed"] == {}
    seconds = time.perf_counter() - started
    peak = status_kib("VmHWM")
    tensor_bytes = namespace["big"].untyped_storage().nbytes()
    device_bytes = tensor_bytes if args.phase == "restore" and args.device == "fake" else 0
    if args.phase == "restore":
        verdict = kernel_state.verify(namespace, notebook=notebook, root=args.root)["variables"]["big"]["verdict"]
        ok = ok and verdict == "match" and namespace["big"].device.type == device
    extra = (peak - before) * 1024 - device_bytes
    print(json.dumps({"phase": args.phase, "device": args.device, "tensor_bytes": tensor_bytes,
                      "staging_bytes": config.staging_bytes(),
                      "extra_bytes": extra, "high_water_reset": reset, "seconds": round(seconds, 3), "ok": ok}))


if __name__ == "__main__":
    main()
