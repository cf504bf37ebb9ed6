"""Kernel undo against Kishu: a checkpoint after every cell of a long notebook, then rewinds.

    .venv/bin/python -m benchmarks.peers.undo [--cells 50] [--mb 200] [--systems ours,kishu] [--json PATH]
    .venv/bin/python -m benchmarks.peers.undo --smoke      # 12 cells, a 20 MB array, ours only

The workload: a numpy array (200 MB by default) changed in slices, a ~134 MB torch model
(8 x Linear(2048, 2048)) trained by SGD in cells 5, 15 and 25 (every weight and its gradient change),
small variables in every cell. Ours runs with auto-checkpointing on (GKEWS_AUTO_CHECKPOINT=1): per cell,
the foreground seconds (what the user waits for, measured by the hook) and the bytes copied into staging,
against the memcpy time of those bytes, measured in the same kernel at two rates: into memory already
touched (the strict baseline) and into fresh memory (page faults included: bytes a cell creates need
new memory; the fastest of numpy, an anonymous mapping and a bytearray), and against the least a copy
can cost, cell by cell (touched memory for the bytes whose tensor an earlier snapshot staged, fresh
memory for new ones); per written checkpoint, the background write seconds. Kishu commits in its own
post_run_cell hook (timed by wrapping it, as in benchmarks/peers). After the last cell: storage against
the live state, then a rewind to cell 10 and to cell 40 (ours: the rewind op; Kishu: checkout of that
cell's commit, in the same kernel), timed, and every variable compared by content digest with the state
recorded after that cell. Between cells the driver waits --think seconds (default 1: a person reading
the result); with 0 the cells run back to back, like Run All, the snapshots of cells that end while the
writer is busy coalesce, and a cell without a checkpoint of its own cannot be rewound to (the report
lists the cells that have one).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from . import __main__ as peers
from .__main__ import NOTEBOOK, REPO, Kernel, boot, evaluate, inkernel

SETUP = """
import numpy as np, torch
torch.manual_seed(0)
arr = np.random.default_rng(0).standard_normal({n})        # {mb} MB
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)])   # 134 MB
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
view = arr[1000:200_000]
step, losses, config = 0, [], {{"lr": 1e-3, "name": "run-1"}}
"""
SLICE = """
arr[({k} * 100_000) % (arr.size - 1000):({k} * 100_000) % (arr.size - 1000) + 1000] += 1.0
step += 1
losses.append(1.0 / step)
"""
TRAIN = """
x = torch.randn(16, 2048)
loss = model(x).pow(2).mean()
opt.zero_grad(); loss.backward(); opt.step()
step += 1
losses.append(float(loss))
del x, loss
"""
REWIND_TO = (10, 40)


def workload(cells: int, mb: float) -> list[str]:
    out = [SETUP.format(n=int(mb * 1e6 / 8), mb=f"{mb:g}")]
    for k in range(2, cells + 1):
        out.append((TRAIN if k % 10 == 5 and k < 30 else SLICE).format(k=k))  # three training steps
    return out


def _q(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run_ours(work: Path, cells: list[str], rewind_to, think: float) -> dict:
    root = work / "ours"
    kernel = Kernel(root, notebook=NOTEBOOK, extra_env={"GKEWS_AUTO_CHECKPOINT": "1"})
    rows, expect = [], {}
    try:
        boot(kernel)
        evaluate(kernel, inkernel("time_cells()"))
        gbps = evaluate(kernel, inkernel("memcpy_rates()"))
        for index, cell in enumerate(cells, 1):
            kernel.run(cell, timeout=1800)
            time.sleep(think)  # the person reads the cell's result before running the next
            status = kernel.call({"op": "auto", "action": "status"})["result"]
            stage = status["last_stage"] or {}
            assert stage.get("cell") == index, (stage, index)
            rows.append({"cell": index, "foreground": stage["seconds"], "copied": stage["copied"],
                         "memcpy": stage["copied"] / (gbps["warm"] * 1e9),
                         "memcpy_fresh": stage["copied"] / (gbps["fresh"] * 1e9), "hashed": stage.get("hashed"),
                         "warm": stage.get("warm")})
            if index in rewind_to:
                expect[index] = evaluate(kernel, inkernel("expected()"))["variables"]
            print(f"  cell {index:2d}: foreground {stage['seconds'] * 1000:7.1f} ms, "
                  f"{stage['copied'] / 1e6:7.1f} MB staged", flush=True)
        status = kernel.call({"op": "auto", "action": "status", "wait": 1800})["result"]
        cell_seconds = evaluate(kernel, inkernel("timed_cells()"))
        own = sorted(r["label"]["cell"] for r in kernel.call({"op": "list"})["result"] if r.get("auto"))
        writes = evaluate(kernel, "__import__('json').dumps("
                                  "__import__('kernel_state.auto').auto.AUTO.writer.write_seconds)")
        live = evaluate(kernel, inkernel("live_bytes()"))["bytes"]
        stored = _du(root)
        rewinds = {}
        for cell in rewind_to:
            reply = kernel.call({"op": "rewind", "cell": cell})
            if not reply["ok"]:
                rewinds[cell] = {"seconds": None, "error": reply["error"], "verdicts": {}}
                continue
            verdicts = evaluate(kernel, inkernel(f"check({expect[cell]!r}, {{}}, {peers.VIEWS!r})"))["verdicts"]
            rewinds[cell] = {"seconds": reply["result"]["total_seconds"], "restore": reply["result"]["seconds"],
                             "verdicts": verdicts}
    finally:
        kernel.close()
    return {"name": "kernel_state (auto)", "rows": rows, "writes": writes, "live": live, "stored": stored,
            "rewinds": rewinds, "coalesced": status["coalesced"], "written": status["written"], "gbps": gbps,
            "cells_with_checkpoint": own, "cell_seconds": cell_seconds, "hashed": [r["hashed"] for r in rows]}


def run_kishu(work: Path, cells: list[str], rewind_to, think: float) -> dict:
    system = peers.Kishu(work)
    kernel = Kernel(system.dir, notebook=NOTEBOOK, extra_env=system.env(), kernel_name=system.kernel_name)
    rows, expect, commits = [], {}, {}
    try:
        boot(kernel)
        system.setup(kernel)
        evaluate(kernel, inkernel("time_cells()"))
        for index, cell in enumerate(cells, 1):
            kernel.run(cell, timeout=1800)
            time.sleep(think)
            row = system.checkpoint(kernel, index)
            rows.append({"cell": index, "foreground": row["seconds"]})
            if index in rewind_to:
                expect[index] = evaluate(kernel, inkernel("expected()"))["variables"]
                commits[index] = system.commit
            print(f"  cell {index:2d}: {row['seconds']:.3f} s, {row['stored'] / 1e6:.0f} MB stored", flush=True)
        live = evaluate(kernel, inkernel("live_bytes()"))["bytes"]
        cell_seconds = evaluate(kernel, inkernel("timed_cells()"))
        rewinds = {}
        for cell in rewind_to:
            try:
                reply = evaluate(kernel, inkernel(f"kishu_checkout({str(system.notebook)!r}, {commits[cell]!r})"))
                verdicts = evaluate(kernel, inkernel(f"check({expect[cell]!r}, {{}}, {peers.VIEWS!r})"))["verdicts"]
                rewinds[cell] = {"seconds": reply["seconds"], "verdicts": verdicts}
            except RuntimeError as exc:
                rewinds[cell] = {"seconds": None, "error": str(exc), "verdicts": {}}
    finally:
        kernel.close()
    # everything under Kishu's KISHU_PATH_ROOT (its database and the empty notebook it is given)
    return {"name": "Kishu", "rows": rows, "writes": [], "live": live, "stored": _du(system.dir),
            "rewinds": rewinds, "cell_seconds": cell_seconds}


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def report(results: list[dict]) -> None:
    for r in results:
        fg = [row["foreground"] for row in r["rows"] if row["foreground"] is not None]
        print(f"\n== {r['name']}")
        print(f"foreground per cell: p50 {_q(fg, 0.5) * 1000:.0f} ms, p95 {_q(fg, 0.95) * 1000:.0f} ms, "
              f"max {max(fg) * 1000:.0f} ms")
        small = [row for row in r["rows"] if row.get("copied") is not None and row["copied"] < 100e6]
        if small:
            p95 = _q([s["foreground"] for s in small], 0.95)
            print(f"cells staging < 100 MB: {len(small)}; foreground p95 {p95 * 1000:.0f} ms")
        staged = [row for row in r["rows"] if row.get("copied") is not None]
        for label, rows in (("cells staging < 100 MB", small), ("every cell", staged)):
            if rows:
                warm = [row["foreground"] - row["memcpy"] for row in rows]
                fresh = [row["foreground"] - row["memcpy_fresh"] for row in rows]
                print(f"{label}: foreground over the memcpy time of the staged bytes, into memory already "
                      f"touched ({r['gbps']['warm']:.1f} GB/s): p95 {_q(warm, 0.95) * 1000:.0f} ms, max "
                      f"{max(warm) * 1000:.0f} ms; into fresh memory ({r['gbps']['fresh']:.1f} GB/s): p95 "
                      f"{_q(fresh, 0.95) * 1000:.0f} ms, max {max(fresh) * 1000:.0f} ms")
        if staged and staged[0].get("warm") is not None:
            # the least a copy of these bytes can cost: into touched memory where an earlier snapshot
            # staged the same tensor (its buffer is warm), into fresh memory where the bytes are new
            warm_rate, fresh_rate = r["gbps"]["warm"] * 1e9, r["gbps"]["fresh"] * 1e9
            least = [row["warm"] / warm_rate + (row["copied"] - row["warm"]) / fresh_rate for row in staged]
            over = [row["foreground"] - t for row, t in zip(staged, least)]
            worst = max(range(len(over)), key=over.__getitem__)
            w = staged[worst]
            print(f"every cell against a memcpy of the same bytes (touched memory for bytes staged before, "
                  f"fresh memory for new ones): p95 {_q(over, 0.95) * 1000:.0f} ms over, max "
                  f"{over[worst] * 1000:.0f} ms (cell {w['cell']}: {w['foreground'] * 1000:.0f} ms for "
                  f"{w['copied'] / 1e6:.0f} MB, {w['warm'] / 1e6:.0f} MB of it into warm memory)")
        if r.get("hashed"):
            print(f"hashed to find what changed, per cell: p50 {_q(r['hashed'], 0.5) / 1e6:.0f} MB, "
                  f"max {max(r['hashed']) / 1e6:.0f} MB")
        if r.get("cell_seconds"):
            cs = r["cell_seconds"]
            print(f"the cells' own code (hooks excluded; dirty-page faults included): p50 {_q(cs, 0.5) * 1000:.1f} ms, "
                  f"p95 {_q(cs, 0.95) * 1000:.1f} ms, all {len(cs)} cells {sum(cs):.2f} s")
        if r["writes"]:
            print(f"background write per checkpoint: p50 {_q(r['writes'], 0.5):.3f} s, "
                  f"p95 {_q(r['writes'], 0.95):.3f} s, "
                  f"max {max(r['writes']):.3f} s; {r['written']} written, {r['coalesced']} coalesced")
            if r["coalesced"]:
                print(f"cells with a checkpoint of their own: {r['cells_with_checkpoint']}")
        print(f"stored after {len(r['rows'])} cells: {r['stored'] / 1e6:.0f} MB = {r['stored'] / r['live']:.2f}x the "
              f"live state ({r['live'] / 1e6:.0f} MB)")
        for cell, rw in r["rewinds"].items():
            ok = [n for n, v in rw["verdicts"].items() if v == "ok"]
            bad = {n: v for n, v in rw["verdicts"].items() if v != "ok"}
            secs = "failed" if rw["seconds"] is None else f"{rw['seconds']:.2f} s" + (
                f" (restore alone {rw['restore']:.2f} s; the rest: the undo checkpoint)" if "restore" in rw else "")
            print(f"rewind to cell {cell}: {secs}; {len(ok)}/{len(rw['verdicts'])} variables correct"
                  + (f"; not: {bad}" if bad else "") + (f" [{rw['error']}]" if rw.get("error") else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=50)
    ap.add_argument("--think", type=float, default=1.0,
                    help="seconds between a cell's end and the next cell (a person reading the result); "
                         "0 runs them back to back, like Run All, and snapshots coalesce")
    ap.add_argument("--mb", type=float, default=200, help="size of the numpy array in MB")
    ap.add_argument("--systems", default="ours,kishu", help="comma-separated subset of ours,kishu")
    ap.add_argument("--smoke", action="store_true", help="12 cells, a 20 MB array, ours only: does it run")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if args.smoke:
        args.cells, args.mb, args.systems = 12, 20, "ours"
    rewind_to = tuple(c for c in REWIND_TO if c <= args.cells) or (args.cells,)
    (REPO / "benchmarks" / "results").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gkews-bench-undo-", dir=REPO / "benchmarks" / "results"))
    jupyter_path = work / "jupyter"
    os.environ["JUPYTER_PATH"] = str(jupyter_path) + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    cells = workload(args.cells, args.mb)
    results = []
    try:
        for system in args.systems.split(","):
            print(f"\n== {system}", flush=True)
            try:
                if system == "kishu":
                    peers.ensure_kishu(jupyter_path)
                    results.append(run_kishu(work, cells, rewind_to, args.think))
                else:
                    results.append(run_ours(work, cells, rewind_to, args.think))
                report(results[-1:])  # each system's figures as soon as it is done
            except Exception as exc:  # one system failing still prints the others' figures
                print(f"  {system} failed: {type(exc).__name__}: {exc}", flush=True)
        print("\n==== all systems")
        report(results)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
