"""Checkpoint speed against the raw disk and against the usual ways to save, measured in ONE run.

    python benchmarks/bench_checkpoint.py            # 1 GiB model, 400 MB numpy namespace, 3 repeats

Every figure is a median of --repeat runs after one discarded warm-up (this VM returns freed memory to
its host, so first runs are slow), and every save is durable (fsync) in every mode. Ratios are taken
against figures measured in this same run, never against numbers from another day.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kernel_state  # noqa: E402
from kernel_state import capture  # noqa: E402
from kernel_state.fsutil import fsync_file  # noqa: E402


def drop_cache(paths, everything: bool = True) -> str:
    """Evict files from the page cache so the next read comes from the disk (everything: the whole cache,
    when allowed; else only these files)."""
    try:
        if not everything:
            raise PermissionError("only these files")
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        return "fadvise(DONTNEED)"


def files_under(root: str) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def timed(fn, repeat: int, setup=None) -> list[float]:
    """One warm-up run, discarded, then `repeat` timed runs."""
    times = []
    for i in range(repeat + 1):
        if setup:
            setup()
        gc.collect()
        t = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t
        if i:
            times.append(elapsed)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-gib", type=float, default=1.0, help="size of the float32 model (default 1)")
    ap.add_argument("--numpy-mb", type=int, default=400, help="size of the numpy namespace (default 400)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per mode, after one warm-up (default 3)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir on the disk under ./)")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument("--smoke", action="store_true", help="the smallest run (a 4 MB model, 8 MB of arrays, "
                    "only these files evicted from the page cache): every mode works; the figures mean nothing")
    args = ap.parse_args()
    width = 1024 if args.smoke else 4096
    if args.smoke:
        args.model_gib, args.numpy_mb = 0.0, 8
    if args.repeat < 3:
        ap.error("--repeat must be at least 3: the figures are medians")

    work = tempfile.mkdtemp(prefix="gkews-bench-", dir=args.dir or os.getcwd())
    results: dict[str, list[float]] = {}
    try:
        layers = max(1, round(args.model_gib * 16))
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
        state = model.state_dict()
        model_bytes = sum(t.numel() * t.element_size() for t in state.values())
        target = os.path.join(work, "out")

        def clean():
            if os.path.isdir(target):
                shutil.rmtree(target)
            elif os.path.exists(target):
                os.unlink(target)
            capture._written.clear()  # no incremental help: every byte is written

        # raw disk, the same bytes: the model's weights copied to memory-backed /dev/shm first
        src = "/dev/shm/gkews-bench-src"
        with open(src, "wb") as f:
            for t in state.values():
                f.write(t.numpy().tobytes())
        count = model_bytes // (8 << 20)
        try:
            results["dd O_DIRECT (+fsync)"] = timed(lambda: subprocess.run(
                ["dd", f"if={src}", f"of={target}", "bs=8M", f"count={count}", "oflag=direct", "conv=fsync"],
                check=True, capture_output=True), args.repeat, clean)
            results["dd conv=fdatasync"] = timed(lambda: subprocess.run(
                ["dd", f"if={src}", f"of={target}", "bs=8M", f"count={count}", "conv=fdatasync"],
                check=True, capture_output=True), args.repeat, clean)
        finally:
            os.unlink(src)

        def torch_save():
            torch.save(state, target)
            fsync_file(target)
        results["torch.save + fsync"] = timed(torch_save, args.repeat, clean)

        from safetensors.torch import save_file

        def st_save():
            save_file(state, target)
            fsync_file(target)
        results["safetensors.save_file + fsync"] = timed(st_save, args.repeat, clean)

        results["kernel_state.save (full)"] = timed(
            lambda: kernel_state.save({"model": model}, notebook="bench", root=target), args.repeat, clean)

        # incremental: the same model saved again, unchanged
        clean()
        kernel_state.save({"model": model}, notebook="bench", root=target)
        results["kernel_state.save (unchanged re-save)"] = timed(
            lambda: kernel_state.save({"model": model}, notebook="bench", root=target), args.repeat)

        # cold restore of the whole model vs torch.load(weights_only=True), page cache dropped
        torch_file = os.path.join(work, "model.pt")
        torch.save(state, torch_file)
        fsync_file(torch_file)
        how = {}

        def cold(paths):
            def setup():
                how["method"] = drop_cache(paths, everything=not args.smoke)
            return setup
        results["torch.load(weights_only) cold"] = timed(
            lambda: torch.load(torch_file, weights_only=True), args.repeat, cold([torch_file]))
        results["kernel_state.restore cold"] = timed(
            lambda: kernel_state.restore({}, notebook="bench", root=target), args.repeat, cold(files_under(target)))
        check = {}
        kernel_state.restore(check, notebook="bench", root=target)
        assert all(torch.equal(a, b) for a, b in zip(check["model"].state_dict().values(), state.values()))
        check = model = state = None  # free them (a `del` would leave the closures above unresolved)
        clean()
        gc.collect()

        # a numpy namespace: 8 float64 arrays
        per = args.numpy_mb * 10**6 // 8 // 8
        rng = np.random.default_rng(0)
        arrays = {f"arr{i}": rng.standard_normal(per) for i in range(8)}
        arrays["meta"] = {"epoch": 3, "note": "numpy namespace"}
        numpy_bytes = sum(a.nbytes for a in arrays.values() if isinstance(a, np.ndarray))
        import dill

        def dill_module():
            mod = types.ModuleType("__main__")
            mod.__dict__.update(arrays)
            dill.dump_module(target, module=mod)
            fsync_file(target)

        def pickle5(value):
            with open(target, "wb") as f:
                pickle.dump(value, f, protocol=5)
                f.flush()
                os.fsync(f.fileno())
        results["dill.dump_module + fsync (numpy)"] = timed(dill_module, args.repeat, clean)
        results["pickle protocol 5 + fsync (numpy)"] = timed(lambda: pickle5(arrays), args.repeat, clean)
        results["kernel_state.save (numpy)"] = timed(
            lambda: kernel_state.save(dict(arrays), notebook="bench", root=target), args.repeat, clean)
        arrays = None

        # a vocabulary: a dict of many small Python objects, where the per-object cost is all there is
        vocab = {f"token{i}": i for i in range(20_000 if args.smoke else 1_000_000)}
        results["pickle protocol 5 + fsync (vocab)"] = timed(lambda: pickle5(vocab), args.repeat, clean)
        results["kernel_state.save (vocab)"] = timed(
            lambda: kernel_state.save({"vocab": vocab}, notebook="bench", root=target), args.repeat, clean)
        vocab_keys, vocab = len(vocab), None
        # records: a list of small dicts (rows read from JSON or a CSV), plain data two levels deep
        records = [{"id": i, "name": f"row{i}", "score": i / 7} for i in range(20_000 if args.smoke else 1_000_000)]
        results["pickle protocol 5 + fsync (records)"] = timed(lambda: pickle5(records), args.repeat, clean)
        results["kernel_state.save (records)"] = timed(
            lambda: kernel_state.save({"records": records}, notebook="bench", root=target), args.repeat, clean)
        record_count, records = len(records), None

        # many tiny tensors (a list of per-sample embeddings): the per-tensor cost, not the bytes
        tiny = [torch.randn(4) for _ in range(2_000 if args.smoke else 20_000)]

        def torch_save_tiny():
            torch.save(tiny, target)
            fsync_file(target)
        results["torch.save + fsync (tiny tensors)"] = timed(torch_save_tiny, args.repeat, clean)
        results["kernel_state.save (tiny tensors)"] = timed(
            lambda: kernel_state.save({"tiny": tiny}, notebook="bench", root=target), args.repeat, clean)
        tiny_count = len(tiny)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    gib = model_bytes / 2**30
    print(f"\nmachine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}")
    print(f"model: {layers} x nn.Linear({width}, {width}) float32 = {model_bytes / 2**30:.3f} GiB; numpy namespace "
          f"{numpy_bytes / 1e6:.0f} MB; medians of {args.repeat} after a warm-up; cold reads by {how.get('method')}\n")
    print(f"{'mode':<40} {'median s':>9} {'GB/s':>6}   runs")
    for k, v in results.items():
        size = numpy_bytes if "numpy" in k else model_bytes
        counted = any(word in k for word in ("unchanged", "tiny", "vocab", "records"))  # not a byte rate
        rate = "" if counted else f"{size / med[k] / 1e9:6.2f}"
        print(f"{k:<40} {med[k]:9.3f} {rate:>6}   {', '.join(f'{x:.3f}' for x in v)}")

    ours = med["kernel_state.save (full)"]
    checks = [
        ("full save vs torch.save + fsync", ours / med["torch.save + fsync"], "< 1.0"),
        ("full save vs dd O_DIRECT", ours / med["dd O_DIRECT (+fsync)"], "<= 1.5"),
        ("full save vs dd conv=fdatasync", ours / med["dd conv=fdatasync"], "(info)"),
        ("full save vs safetensors.save_file", ours / med["safetensors.save_file + fsync"], "(info)"),
        ("numpy: dill.dump_module / ours",
         med["dill.dump_module + fsync (numpy)"] / med["kernel_state.save (numpy)"], ">= 1.5"),
        ("numpy: ours vs pickle protocol 5",
         med["kernel_state.save (numpy)"] / med["pickle protocol 5 + fsync (numpy)"], "(info)"),
        ("unchanged re-save / full save", med["kernel_state.save (unchanged re-save)"] / ours, "< 0.05"),
        ("cold restore vs torch.load",
         med["kernel_state.restore cold"] / med["torch.load(weights_only) cold"], "<= 1.3"),
        (f"{vocab_keys}-key dict: ours vs pickle protocol 5",
         med["kernel_state.save (vocab)"] / med["pickle protocol 5 + fsync (vocab)"], "(info)"),
        (f"{record_count} records: ours vs pickle protocol 5",
         med["kernel_state.save (records)"] / med["pickle protocol 5 + fsync (records)"], "(info)"),
        (f"{tiny_count} tiny tensors: ours vs torch.save",
         med["kernel_state.save (tiny tensors)"] / med["torch.save + fsync (tiny tensors)"], "(info)"),
    ]
    print(f"\n{'ratio':<40} {'value':>7}  target   verdict")
    verdicts = {}
    for name, value, goal in checks:
        if goal == "(info)":
            verdict = ""
        else:
            op, bound = goal.split()
            bound = float(bound)
            ok = {"<": value < bound, "<=": value <= bound, ">=": value >= bound}[op]
            verdict = "met" if ok else "MISSED"
        verdicts[name] = {"value": round(value, 3), "target": goal, "verdict": verdict}
        print(f"{name:<40} {value:7.3f}  {goal:<7}  {verdict}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"medians_s": med, "runs_s": results, "ratios": verdicts, "model_gib": gib,
                       "numpy_bytes": numpy_bytes}, f, indent=1)


if __name__ == "__main__":
    main()
