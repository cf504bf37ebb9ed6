"""GPU checkpoint speed against the raw disk and the usual ways to save and load, measured in ONE run.

    python3 benchmarks/bench_gpu.py                # a GPU: 4 GiB float32 model of nn.Linear(8192, 8192) layers
    python3 benchmarks/bench_gpu.py --smoke        # anywhere: a 16 MiB model through the CPU stand-in device

Every mode runs once as a discarded warm-up, then --repeat times; medians are reported, and ratios are
taken only between figures of this run. Every save is durable (fsync, or dd's conv=fsync). Cold
restores drop the page cache first (/proc/sys/vm/drop_caches as root, else posix_fadvise). With
--smoke the "device" is kernel_state.cuda_io.HostDevice (CPU memory standing in for GPU memory), so CI
runs every code path; its figures say nothing about a GPU. Then a single tensor of --big-gib is saved
and restored in child processes that report their peak extra host memory against the staging bound.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import kernel_state  # noqa: E402
from kernel_state import config, cuda_io  # noqa: E402
from kernel_state.fingerprint import kernel_name  # noqa: E402
from kernel_state.fsutil import fsync_file  # noqa: E402

from bench_checkpoint import drop_cache, files_under, timed  # noqa: E402

TARGETS = {  # ratio: (limit, "<" or ">"): the targets for a GPU run
    "full save / dd O_DIRECT": (1.1, "<="),
    "full save / torch.save + fsync": (0.5, "<="),
    "cold restore / safetensors load_file": (1.0, "<="),
    "unchanged re-save / full save": (0.01, "<"),
    "verify / full save": (0.01, "<"),
}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_model(gib: float, width: int, device: str):
    layer_bytes = width * width * 4
    layers = max(1, round(gib * (1 << 30) / layer_bytes))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, device=device) for _ in range(layers)])
    return model, sum(t.nbytes for t in model.state_dict().values())


def write_source(model, path: str) -> str:
    """The model's own bytes in one file, for dd to copy; /dev/shm keeps the reading side out of the figure."""
    with open(path, "wb") as f:
        for t in model.state_dict().values():
            f.write(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return path


def dd(src: str, dst: str, flags: list[str]) -> None:
    done = subprocess.run(["dd", f"if={src}", f"of={dst}", "bs=8M", *flags], capture_output=True, text=True)
    if done.returncode:  # e.g. a filesystem that refuses O_DIRECT (tmpfs): the reference cannot be measured
        raise SystemExit(f"dd {' '.join(flags)} into {os.path.dirname(dst)} failed: {done.stderr.strip()}; "
                         "pass --dir on a disk that takes O_DIRECT writes")


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k].view(torch.uint8), b[k].detach().view(torch.uint8)) for k in a)


def aligned(state: dict) -> bool:
    return all(t.untyped_storage().data_ptr() % 64 == 0 for t in state.values())


def peak_memory(big_gib: float, device: str, work: str) -> dict:
    """Save, then restore, one tensor of big_gib in child processes (benchmarks/gpu/peak_memory.py)."""
    root = os.path.join(work, "peak")
    out = {}
    for phase in ("save", "restore"):
        cmd = [sys.executable, os.path.join(HERE, "gpu", "peak_memory.py"), phase, "--device",
               "fake" if device == "cpu" else "cuda", "--root", root, "--mib", str(int(big_gib * 1024))]
        run = subprocess.run(cmd, capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                 [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])))
        if run.returncode:
            raise SystemExit(f"{phase} of a {big_gib} GiB tensor failed:\n{run.stderr[-3000:]}")
        out[phase] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-gib", type=float, default=4.0, help="size of the float32 model (default 4)")
    ap.add_argument("--width", type=int, default=8192, help="nn.Linear(width, width) layers (default 8192)")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per mode after one warm-up (default 2)")
    ap.add_argument("--big-gib", type=float, default=10.0, help="single tensor for the peak-memory check "
                    "(default 10; 0 skips it)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir under ./)")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes through the CPU stand-in device (for CI)")
    args = ap.parse_args()
    if args.smoke:
        args.model_gib, args.width, args.repeat, args.big_gib = 1 / 64, 640, 1, 1 / 16
        os.environ["GKEWS_DEVICE_STAGING_MB"] = "8"
        cuda_io.BACKENDS["cpu"] = cuda_io.HostDevice()
        device = "cpu"
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --smoke for the CPU stand-in")
    else:
        device = "cuda"
    import safetensors.torch as st

    work = tempfile.mkdtemp(prefix="gkews-gpu-bench-", dir=args.dir or os.getcwd())
    model, nbytes = make_model(args.model_gib, args.width, device)
    reference = {k: v.detach().clone() for k, v in model.state_dict().items()}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free > 2 * nbytes else work
    src = write_source(model, os.path.join(tempfile.mkdtemp(dir=shm), "model.bin"))
    results: dict[str, list[float]] = {}
    checks: dict[str, bool] = {}
    how_cold = []

    def cold(paths):
        how_cold.append(drop_cache(paths))

    def run(name, fn, setup=None):
        def timed_fn():
            fn()
            sync(device)
        results[name] = timed(timed_fn, args.repeat, setup)
        print(f"{name:<58} {statistics.median(results[name]):8.3f} s", flush=True)

    try:
        out = os.path.join(work, "out")
        run("dd O_DIRECT (+fsync)", lambda: dd(src, out, ["oflag=direct", "conv=fsync"]))
        run("dd conv=fdatasync", lambda: dd(src, out, ["conv=fdatasync"]))

        def torch_save():
            torch.save(model.state_dict(), out)
            fsync_file(out)
        run("torch.save + fsync", torch_save)
        st_file = os.path.join(work, "model.safetensors")

        def st_save():
            st.save_file(model.state_dict(), st_file)
            fsync_file(st_file)
        run("safetensors.save_file + fsync", st_save)
        os.unlink(out)

        roots = iter(range(10 ** 6))
        state = {"root": None}

        def fresh_root():
            if state["root"]:
                shutil.rmtree(state["root"])
            state["root"] = os.path.join(work, f"store{next(roots)}")

        def ks_save():
            kernel_state.save({"model": model}, notebook="bench", root=state["root"])
        run("kernel_state.save (full)", ks_save, setup=fresh_root)
        os.environ["GKEWS_DIRECT_IO"] = "none"
        run("kernel_state.save (full, page-cache writes)", ks_save, setup=fresh_root)
        os.environ.pop("GKEWS_DIRECT_IO")
        run("kernel_state.save (unchanged)", ks_save)
        run("kernel_state.verify", lambda: kernel_state.verify({"model": model}, notebook="bench", root=state["root"]))
        root = state["root"]

        def restore_with(loader, direct=None):
            def fn():
                os.environ["GKEWS_CUDA_LOADER"] = loader
                if direct:
                    os.environ["GKEWS_DIRECT_IO"] = direct
                try:
                    back = {}
                    result = kernel_state.restore(back, notebook="bench", root=root)
                    assert result["failed"] == {}, result["failed"]
                    sync(device)
                    checks[f"restore ({loader}{', ' + direct if direct else ''}): bit-identical, 64-byte aligned, "
                           f"on {device}"] = (same_weights(reference, back["model"].state_dict())
                                              and aligned(back["model"].state_dict())
                                              and back["model"][0].weight.device.type == device)
                finally:
                    os.environ.pop("GKEWS_CUDA_LOADER")
                    os.environ.pop("GKEWS_DIRECT_IO", None)
            return fn
        store_files = files_under(root)
        run("kernel_state.restore cold (pinned ring)", restore_with("pinned"), setup=lambda: cold(store_files))
        run("kernel_state.restore cold (pinned ring, O_DIRECT reads)", restore_with("pinned", "both"),
            setup=lambda: cold(store_files))
        run("kernel_state.restore cold (GKEWS_CUDA_LOADER=safetensors)", restore_with("safetensors"),
            setup=lambda: cold(store_files))

        def st_load():
            back = st.load_file(st_file, device=device)
            sync(device)
            checks["safetensors load_file: bit-identical"] = same_weights(reference, back)
        run(f"safetensors load_file(device='{device}') cold", st_load, setup=lambda: cold([st_file]))
        torch.save(model.state_dict(), out)
        run(f"torch.load(map_location='{device}') cold",
            lambda: torch.load(out, map_location=device, weights_only=True), setup=lambda: cold([out]))
        cpu = {}
        kernel_state.restore(cpu, notebook="bench", root=root, device="cpu")
        checks["restore --device cpu: bit-identical, on the CPU"] = (
            same_weights({k: v.cpu() for k, v in reference.items()}, cpu["model"].state_dict())
            and cpu["model"][0].weight.device.type == "cpu")
        del cpu
    finally:
        shutil.rmtree(os.path.dirname(src), ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    peak = {}
    if args.big_gib > 0:
        peak_dir = tempfile.mkdtemp(prefix="gkews-gpu-peak-", dir=args.dir or os.getcwd())
        try:
            peak = peak_memory(args.big_gib, device, peak_dir)
        finally:
            shutil.rmtree(peak_dir, ignore_errors=True)
    for phase, figures in peak.items():
        checks[f"{phase} of a {args.big_gib:g} GiB tensor: extra host memory within the staging bound"] = (
            figures["ok"] and figures["extra_bytes"] <= figures["staging_bytes"] + (64 << 20))

    med = {k: statistics.median(v) for k, v in results.items()}
    full = med["kernel_state.save (full)"]
    restore_best = min(med["kernel_state.restore cold (pinned ring)"],
                       med["kernel_state.restore cold (pinned ring, O_DIRECT reads)"])
    st_cold = med[f"safetensors load_file(device='{device}') cold"]
    ratios = {
        "full save / dd O_DIRECT": full / med["dd O_DIRECT (+fsync)"],
        "full save / torch.save + fsync": full / med["torch.save + fsync"],
        "full save (page-cache writes) / dd O_DIRECT": med["kernel_state.save (full, page-cache writes)"]
        / med["dd O_DIRECT (+fsync)"],
        "cold restore / safetensors load_file": restore_best / st_cold,
        "cold restore (safetensors loader) / safetensors load_file":
            med["kernel_state.restore cold (GKEWS_CUDA_LOADER=safetensors)"] / st_cold,
        "cold restore / torch.load": restore_best / med[f"torch.load(map_location='{device}') cold"],
        "unchanged re-save / full save": med["kernel_state.save (unchanged)"] / full,
        "verify / full save": med["kernel_state.verify"] / full,
    }
    safetensors_loader = med["kernel_state.restore cold (GKEWS_CUDA_LOADER=safetensors)"]
    loader = "pinned" if restore_best <= safetensors_loader else "safetensors"
    machine = {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
               "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None, "cold": sorted(set(how_cold)),
               "staging_bytes": config.staging_bytes(), "ring": list(cuda_io.ring_shape(config.staging_bytes())),
               "fingerprint": kernel_name(torch.device(device))}

    print(f"\nmodel: {nbytes / 2**30:.3f} GiB on {device}"
          f" ({'CPU stand-in device, --smoke' if args.smoke else machine['gpu']}),"
          f" medians of {args.repeat} after a warm-up; dd source in {shm}; cold reads by {', '.join(machine['cold'])};"
          f" GPU fingerprints by the {machine['fingerprint']}")
    print(f"{'mode':<58} {'median s':>9} {'GB/s':>7}")
    for name, seconds in med.items():
        rate = "" if "unchanged" in name or "verify" in name else f"{nbytes / seconds / 1e9:7.2f}"
        print(f"{name:<58} {seconds:9.3f} {rate:>7}")
    print(f"\n{'ratio':<58} {'value':>7}  target")
    for name, value in ratios.items():
        limit = TARGETS.get(name)
        verdict = "" if limit is None else f"{limit[1]} {limit[0]:g}  " + (
            "met" if (value <= limit[0] if limit[1] == "<=" else value < limit[0]) else "MISSED")
        print(f"{name:<58} {value:7.3f}  {verdict}")
    for phase, figures in peak.items():
        print(f"peak extra host memory, {phase} of a {figures['tensor_bytes'] / 2**30:g} GiB tensor: "
              f"{figures['extra_bytes'] / 2**20:.0f} MiB (staging bound {figures['staging_bytes'] / 2**20:.0f} MiB,"
              f" {figures['seconds']:.2f} s)")
    writes = "O_DIRECT" if full <= med["kernel_state.save (full, page-cache writes)"] else "page-cache"
    print(f"faster restore loader in this run: {loader}; faster save writes: {writes}")
    for name, ok in checks.items():
        print(f"check: {name}: {'ok' if ok else 'FAILED'}")
    ok = all(checks.values())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": "fake" if args.smoke else device, "machine": machine, "model_bytes": nbytes,
                       "runs": results, "medians": med, "ratios": ratios, "peak_memory": peak, "checks": checks,
                       "faster_loader": loader, "faster_writes": writes, "ok": ok}, f, indent=1)
    if not ok:
        raise SystemExit("a correctness check failed (see above)")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
