"""The lifecycle's own overhead, measured against a real `jupyter server` process with real kernels.

    .venv/bin/python benchmarks/bench_lifecycle.py [--notebooks 2] [--mb 100] [--cycles 3] [--json out.json]

Starts `python -m jupyter_server` with the extension on throw-away Jupyter, state and checkpoint
directories, opens N notebooks each holding one float64 numpy array of --mb megabytes, then runs one
discarded warm-up pause/resume cycle and --cycles measured ones (medians reported). Before each cycle
every array gets `+= 1`, so each checkpoint writes its data in full (nothing deduplicates).

Figures (milliseconds):
- pause: wall time from POST pause until GET status says paused (client-observed, 10 ms polling), the
  server's own span (timeline environment_stopped - pause_requested), and the sum of the checkpoint
  seconds the kernels report (status notebooks[].seconds). Overhead = span - that sum, split into the
  checkpoint phase (bridge calls, persisting state) and the release (local backend: kernel shutdown).
- resume: the status does not expose the time spent inside the restore calls, so after each resume the
  same checkpoint is restored once more inside each kernel through kernel_state.api (page cache warm, as
  it was during the resume) and its reported seconds stand in for it. Overhead = span (restore_done -
  resume_requested) - that sum; it includes starting the kernel processes (local backend), waiting for
  them to boot, and verifying. To size those, a fresh kernel per notebook is then started through
  POST api/kernels (launch to first cell run) and restores the checkpoint as its first act (imports
  included); the estimate "beyond one boot and the fresh restores" subtracts both.
- GET gkews/status latency p50/p99 with 50 concurrent clients (tornado AsyncHTTPClient, max_clients=50,
  one request at a time per client, 127.0.0.1): idle (50 x 40 requests), and during one extra
  pause/resume cycle (each client loops until the cycle ends, at most 400 requests each); and, as a
  baseline for the server itself, Jupyter Server's own GET api/status idle under the same load.
The load generator runs on the same machine as the server and the kernels.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from serverproc import Server  # noqa: E402  (tests/serverproc.py: the harness the tests use too)


class BenchServer(Server):
    """The shared harness, with the benchmark's timeouts, tight status polling and retried transitions."""

    def __init__(self, base: Path):
        super().__init__(base, request_timeout=120, cell_timeout=600)

    early_409s = 0  # see post_transition

    def post_transition(self, path: str) -> dict:
        """POST pause/resume. The status already says paused/active while the previous transition still
        holds its claim (it is persisting its last state), so an immediate request can be refused with 409:
        retry, and count those refusals."""
        while True:
            code, payload = self.post(path)
            if code == 202:
                return payload
            if code == 409 and " is running (" in payload.get("message", ""):  # "a pause is running (...)"
                self.early_409s += 1
                time.sleep(0.005)
                continue
            raise RuntimeError(f"POST {path}: {code} {payload}")

    def wait_state(self, state: str, timeout: float = 600) -> dict:
        """Poll the status every 10 ms until it says state; RuntimeError if the lifecycle failed."""
        s = self.wait_for((state, "failed"), timeout=timeout, interval=0.01)
        if s["state"] == "failed":
            raise RuntimeError(f"the lifecycle failed: {s['message']}")
        return s


def one_cycle(server: BenchServer, notebooks: list[tuple[str, str]]) -> dict:
    for _path, kid in notebooks:
        server.run_cell(kid, "x += 1.0")  # new content: the checkpoint writes it in full
    t0 = time.perf_counter()
    server.post_transition("gkews/pause")
    paused = server.wait_state("paused")
    t1 = time.perf_counter()
    server.post_transition("gkews/resume")
    resumed = server.wait_state("active")
    t2 = time.perf_counter()
    restore_s = 0.0
    for (path, kid), nb in zip(notebooks, resumed["notebooks"]):
        assert nb["path"] == path and nb["verdict"] == "restored-from-checkpoint", nb
        request = json.dumps({"op": "restore", "notebook": path, "root": str(server.checkpoint_root),
                              "checkpoint": nb["checkpoint"]})
        out = server.run_cell(kid, f"import kernel_state.api as _k; print(_k.call({request!r}))")
        result = json.loads(out.strip().splitlines()[-1])
        assert result["ok"], result
        restore_s += result["result"]["seconds"]
    tp, tr = paused["timeline"], resumed["timeline"]
    ckpt_s = sum(nb["seconds"] for nb in paused["notebooks"])
    ms = lambda a, b: (b - a) * 1000.0  # noqa: E731
    return {
        "pause_wall_ms": (t1 - t0) * 1000.0,
        "pause_span_ms": ms(tp["pause_requested"], tp["environment_stopped"]),
        "checkpoint_sum_ms": ckpt_s * 1000.0,
        "pause_overhead_wall_ms": (t1 - t0) * 1000.0 - ckpt_s * 1000.0,
        "pause_overhead_ms": ms(tp["pause_requested"], tp["environment_stopped"]) - ckpt_s * 1000.0,
        "pause_checkpoint_phase_overhead_ms": ms(tp["pause_requested"], tp["checkpoint_done"]) - ckpt_s * 1000.0,
        "pause_release_ms": ms(tp["checkpoint_done"], tp["environment_stopped"]),
        "resume_wall_ms": (t2 - t1) * 1000.0,
        "resume_span_ms": ms(tr["resume_requested"], tr["restore_done"]),
        "restore_sum_ms": restore_s * 1000.0,
        "resume_overhead_ms": ms(tr["resume_requested"], tr["restore_done"]) - restore_s * 1000.0,
        "resume_kernel_start_ms": ms(tr["capacity_obtained"], tr["kernels_started"]),
        "resume_verify_restore_ms": ms(tr["kernels_started"], tr["restore_done"]),
        "bytes_written": sum(nb["bytes_written"] for nb in paused["notebooks"]),
    }


def fresh_kernel_restore(server: BenchServer, notebooks) -> dict:
    """What the resume's restore pays that a re-measure in a warm kernel does not: a kernel booting, and
    the first restore in a new process (imports included). One fresh kernel per notebook, one at a time."""
    boots, restores = [], []
    for path, _kid in notebooks:
        t = time.perf_counter()
        kid = server.post_ok("api/kernels", {"name": "python3"})["id"]
        server.run_cell(kid, "pass")  # connect, wait_for_ready, run: the kernel is usable
        boots.append((time.perf_counter() - t) * 1000.0)
        request = json.dumps({"op": "restore", "notebook": path, "root": str(server.checkpoint_root)})
        out = server.run_cell(kid, f"import kernel_state.api as _k; print(_k.call({request!r}))")
        result = json.loads(out.strip().splitlines()[-1])
        assert result["ok"], result
        restores.append(result["result"]["seconds"] * 1000.0)
        server.delete(f"api/kernels/{kid}")
    return {"boot_ms": boots, "restore_ms": restores}


async def status_load(url: str, token: str, clients: int, per_client: int, until: threading.Event | None = None,
                      path: str = "gkews/status"):
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    http = AsyncHTTPClient(force_instance=True, max_clients=clients)
    request = HTTPRequest(url + path, headers={"Authorization": f"token {token}"}, request_timeout=120)
    latencies, errors = [], 0

    async def client():
        nonlocal errors
        for _ in range(per_client):
            if until is not None and until.is_set():
                return
            t = time.perf_counter()
            r = await http.fetch(request, raise_error=False)
            latencies.append((time.perf_counter() - t) * 1000.0)
            errors += r.code != 200
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - t0
    http.close()
    latencies.sort()
    pct = lambda p: latencies[min(len(latencies) - 1, int(round(p / 100 * (len(latencies) - 1))))]  # noqa: E731
    return {"requests": len(latencies), "errors": errors, "p50_ms": pct(50), "p99_ms": pct(99),
            "max_ms": latencies[-1], "req_per_s": len(latencies) / elapsed}


def load_during_cycle(server: BenchServer, notebooks, clients: int) -> tuple[dict, dict]:
    done = threading.Event()
    box: dict = {}

    def driver():
        try:
            time.sleep(0.3)  # the load is running before the pause is requested
            box["cycle"] = one_cycle(server, notebooks)
        except BaseException as exc:  # reported below
            box["error"] = exc
        finally:
            done.set()
    thread = threading.Thread(target=driver)
    thread.start()
    figures = asyncio.run(status_load(server.url, server.token, clients, 400, until=done))
    thread.join()
    if "error" in box:
        raise box["error"]
    return figures, box["cycle"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notebooks", type=int, default=2)
    ap.add_argument("--mb", type=float, default=100.0, help="megabytes of numpy data per notebook")
    ap.add_argument("--cycles", type=int, default=3, help="measured cycles (after one warm-up); at least 3")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=40, help="requests per client for the idle latency")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (server log, checkpoints)")
    args = ap.parse_args()
    if args.cycles < 3:
        ap.error("--cycles must be at least 3")

    base = Path(tempfile.mkdtemp(prefix="gkews-bench-lifecycle-"))
    server = BenchServer(base)
    try:
        server.start()
        notebooks = []
        for i in range(args.notebooks):
            path = f"bench/nb{i}.ipynb"
            kid = server.open_notebook(path)["kernel"]["id"]
            n = int(args.mb * 1e6 / 8)
            server.run_cell(kid, f"import numpy as np\nx = np.random.default_rng({i}).standard_normal({n})")
            notebooks.append((path, kid))
        print(f"{args.notebooks} notebook(s) x {args.mb:g} MB; warm-up cycle...", flush=True)
        one_cycle(server, notebooks)
        cycles = []
        for i in range(args.cycles):
            cycles.append(one_cycle(server, notebooks))
            print(f"cycle {i + 1}: pause {cycles[-1]['pause_wall_ms']:.0f} ms, resume "
                  f"{cycles[-1]['resume_wall_ms']:.0f} ms", flush=True)
        fresh = fresh_kernel_restore(server, notebooks)
        idle = asyncio.run(status_load(server.url, server.token, args.clients, args.requests))
        baseline = asyncio.run(status_load(server.url, server.token, args.clients, args.requests, path="api/status"))
        busy, loaded_cycle = load_during_cycle(server, notebooks, args.clients)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    med = {k: statistics.median(c[k] for c in cycles) for k in cycles[0]}
    spread = {k: (min(c[k] for c in cycles), max(c[k] for c in cycles)) for k in cycles[0]}
    rows = [
        ("pause wall time (client: POST -> status paused)", "pause_wall_ms"),
        ("pause span (server timeline)", "pause_span_ms"),
        ("  sum of checkpoint seconds (notebooks[].seconds)", "checkpoint_sum_ms"),
        ("**pause overhead** = span - checkpoint sum", "pause_overhead_ms"),
        ("  of which: checkpoint phase beyond the saves", "pause_checkpoint_phase_overhead_ms"),
        ("  of which: release (kernel shutdown)", "pause_release_ms"),
        ("pause overhead, client wall - checkpoint sum", "pause_overhead_wall_ms"),
        ("resume wall time (client: POST -> status active)", "resume_wall_ms"),
        ("resume span (server timeline)", "resume_span_ms"),
        ("  restore seconds (same checkpoint, re-measured in-kernel)", "restore_sum_ms"),
        ("**resume overhead** = span - restore", "resume_overhead_ms"),
        ("  of which: kernel launch (returns before the kernel is ready)", "resume_kernel_start_ms"),
        ("  of which: verify + restore calls, incl. waiting for the kernels to boot", "resume_verify_restore_ms"),
    ]
    print(f"\n{args.notebooks} notebooks x {args.mb:g} MB, {args.cycles} cycles after a warm-up; "
          f"{med['bytes_written'] / 1e6:.0f} MB written per pause\n")
    print("| figure | median ms | min-max ms |\n|---|---:|---:|")
    for label, key in rows:
        print(f"| {label} | {med[key]:.0f} | {spread[key][0]:.0f}-{spread[key][1]:.0f} |")
    boot, first = statistics.median(fresh["boot_ms"]), sum(fresh["restore_ms"])
    print(f"|   fresh kernel: launch to first cell run (median of {len(fresh['boot_ms'])}) | {boot:.0f} | "
          f"{min(fresh['boot_ms']):.0f}-{max(fresh['boot_ms']):.0f} |")
    print(f"|   restore seconds in fresh kernels (first restore, imports included), sum | {first:.0f} | |")
    print(f"| resume overhead beyond one kernel boot and fresh restores (estimate) | "
          f"{med['resume_span_ms'] - boot - first:.0f} | |")
    print(f"\n| {args.clients} concurrent clients, GET gkews/status unless said "
          "| requests | p50 ms | p99 ms | max ms | req/s |\n"
          "|---|---:|---:|---:|---:|---:|")
    for label, f in (("idle", idle), ("during a pause/resume cycle", busy),
                     ("baseline: GET api/status (Jupyter Server's own), idle", baseline)):
        print(f"| {label} | {f['requests']} | {f['p50_ms']:.1f} | {f['p99_ms']:.1f} | {f['max_ms']:.1f} | "
              f"{f['req_per_s']:.0f} |" + (f" ({f['errors']} errors)" if f["errors"] else ""))
    print(f"\nrequests refused with 409 right after the status said paused/active (retried): {server.early_409s}")
    print(f"the cycle under load: pause {loaded_cycle['pause_wall_ms']:.0f} ms (overhead "
          f"{loaded_cycle['pause_overhead_ms']:.0f}), resume {loaded_cycle['resume_wall_ms']:.0f} ms (overhead "
          f"{loaded_cycle['resume_overhead_ms']:.0f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"notebooks": args.notebooks, "mb": args.mb, "cycles": cycles, "median": med,
                       "status_idle": idle, "status_during_cycle": busy,
                       "api_status_idle": baseline, "fresh_kernel": fresh, "early_409s": server.early_409s,
                       "cycle_under_load": loaded_cycle,
                       "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                   "platform": platform.platform()}}, f, indent=1)
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
