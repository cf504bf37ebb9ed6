"""Side by side with the peers: one notebook workload checkpointed by Kishu, dill.dump_module, %store-style
per-variable pickles, torch.save of the tensors, and kernel_state.

    .venv/bin/python -m benchmarks.peers [--mb 200] [--json out.json] [--keep]

The workload (CELLS below): a 200 MB float64 numpy array, a ~134 MB torch model (8 x Linear(2048, 2048)),
a view of the array, small variables; then nine cells of in-place mutations (a slice of the array, a row
of one layer, counters), a generator from the sixth cell on. Each system runs it in its own real ipykernel
and checkpoints after every cell: Kishu by its own post_run_cell commit (timed by wrapping that hook), the
others by a call made silently (user_expressions, as the server does) right after the cell. Every save is
fsynced. Printed per checkpoint: seconds, bytes written, total bytes stored. Then each system's newest
checkpoint is restored in a fresh kernel (page cache dropped first where this process may), timed, and
every variable is compared by content digest with the state after the last cell.

Kishu (PyPI `kishu`) clashes with this venv (it pins jupyter-ui-poll<=1.0 and pulls ipylab's widgets into
JupyterLab), so the first run creates benchmarks/results/kishu-venv from PyPI: its own site-packages
first, this venv's after (a .pth file), and a kernelspec that starts ipykernel with that python. Kishu
runs headless in its test mode (ENV_KISHU_TEST_MODE, TEST_NOTEBOOK_PATH: no frontend to save or reload the
notebook), with init_kishu() and KishuForJupyter.checkout() called as a notebook would.
One run, no warm-up: each system's first checkpoint pays its first writes; dd of the live state's size
with conv=fdatasync, measured in the same run, is the raw-disk reference.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests"))
from kernels import Kernel  # noqa: E402  (tests/kernels.py: the real-kernel harness the tests use)

KISHU_VENV = REPO / "benchmarks" / "results" / "kishu-venv"
NOTEBOOK = "peers/workload.ipynb"

SETUP = """
import numpy as np, torch
torch.manual_seed(0)
arr = np.random.default_rng(0).standard_normal({n})        # {mb} MB
model = torch.nn.Sequential(*[torch.nn.Linear({width}, {width}) for _ in range(8)])   # 134 MB at 2048
view = arr[1000:2_000_000]                                  # a view of the array
step, losses, config = 0, [], {{"lr": 1e-3, "name": "run-1", "layers": 8}}
"""
MUTATION = """
arr[{k} * 100_000:{k} * 100_000 + 1000] += 1.0
with torch.no_grad():
    model[{k} % 8].weight[0] += 0.5
step += 1
losses.append(1.0 / step)
"""
EXTRA = {6: "gen = (i * i for i in range(10))\n", 8: "next(gen)\n", 9: "next(gen)\n"}
GENERATOR_NEXT = {"gen": 4}  # two values consumed by cells 8 and 9
VIEWS = {"view": "arr"}


def cells(mb: float, width: int = 2048) -> list[str]:
    out = [SETUP.format(n=int(mb * 1e6 / 8), mb=f"{mb:g}", width=width)]
    for k in range(2, 11):
        out.append(MUTATION.format(k=k) + EXTRA.get(k, ""))
    return out


def evaluate(kernel: Kernel, expr: str) -> dict:
    """Evaluate an expression returning a JSON string, silently (no cell, no pre/post_run_cell hooks)."""
    msg_id = kernel.client.execute("", silent=True, user_expressions={"r": expr})
    reply = kernel.client.get_shell_msg(timeout=1800)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kernel.client.get_shell_msg(timeout=1800)
    data = reply["content"]["user_expressions"]["r"]
    if data["status"] != "ok":
        raise RuntimeError(f"{expr[:80]}: {data.get('ename')}: {data.get('evalue')}")
    return json.loads(ast.literal_eval(data["data"]["text/plain"]))


def inkernel(call: str) -> str:
    return f"__import__('inkernel').{call}"


def boot(kernel: Kernel) -> None:
    evaluate(kernel, f"__import__('sys').path.extend({[str(HERE), str(REPO / 'tests')]!r}) or '{{}}'")


# -- Kishu's own environment ----------------------------------------------------------------------------
def ensure_kishu(jupyter_path: Path) -> str:
    python = KISHU_VENV / "bin" / "python"
    if not (python.exists()
            and subprocess.run([str(python), "-c", "import kishu"], capture_output=True).returncode == 0):
        print(f"creating {KISHU_VENV} with kishu from PyPI (once)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(KISHU_VENV)], check=True)
        site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        ours = next(p for p in sys.path if p.endswith("site-packages"))
        Path(site, "gkews-main-venv.pth").write_text(ours + "\n")  # after its own: torch, numpy, ipykernel
        subprocess.run([str(python), "-m", "pip", "install", "-q", "kishu"], check=True)
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('kishu'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    spec = jupyter_path / "kernels" / "gkews-kishu"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "kishu", "language": "python"}))
    return version


# -- the systems ----------------------------------------------------------------------------------------
class System:
    name = ""
    kernel_name = "python3"

    def __init__(self, work: Path):
        self.dir = work / self.slug()
        self.dir.mkdir(parents=True)

    def slug(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.name).strip("-")

    def env(self) -> dict:
        return {}

    def setup(self, kernel: Kernel) -> None:
        pass

    def checkpoint(self, kernel: Kernel, index: int) -> dict:
        raise NotImplementedError

    def restore(self, kernel: Kernel) -> dict:
        raise NotImplementedError


class Ours(System):
    name = "kernel_state (ours)"

    def checkpoint(self, kernel, index):
        return evaluate(kernel, inkernel(f"save_ours({str(self.dir)!r}, {NOTEBOOK!r})"))

    def restore(self, kernel):
        return evaluate(kernel, inkernel(f"restore_ours({str(self.dir)!r}, {NOTEBOOK!r})"))


class Dill(System):
    name = "dill.dump_module"

    def checkpoint(self, kernel, index):
        return evaluate(kernel, inkernel(f"save_dill({str(self.dir)!r}, {index})"))

    def restore(self, kernel):
        return evaluate(kernel, inkernel(f"restore_dill({str(self.dir)!r})"))


class Store(System):
    name = "%store-style pickle per variable"

    def checkpoint(self, kernel, index):
        return evaluate(kernel, inkernel(f"save_store({str(self.dir)!r})"))

    def restore(self, kernel):
        return evaluate(kernel, inkernel(f"restore_store({str(self.dir)!r})"))


class TorchSave(System):
    name = "torch.save (tensors only)"

    def checkpoint(self, kernel, index):
        return evaluate(kernel, inkernel(f"save_torch({str(self.dir)!r}, {index})"))

    def restore(self, kernel):
        return evaluate(kernel, inkernel(f"restore_torch({str(self.dir)!r})"))


class Kishu(System):
    name = "Kishu"
    kernel_name = "gkews-kishu"

    def __init__(self, work):
        super().__init__(work)
        self.notebook = self.dir / "workload.ipynb"
        nbformat.write(nbformat.v4.new_notebook(), str(self.notebook))
        self.stored = 0
        self.commit = None

    def env(self):
        return {"ENV_KISHU_TEST_MODE": "1", "TEST_NOTEBOOK_PATH": str(self.notebook), "KISHU_PATH_ROOT": str(self.dir)}

    def setup(self, kernel):
        evaluate(kernel, inkernel(f"kishu_init({str(self.notebook)!r})"))

    def checkpoint(self, kernel, index):  # the commit already ran in the cell's post_run_cell hook
        row = evaluate(kernel, inkernel(f"kishu_last({str(self.notebook)!r}, {self.stored})"))
        self.stored = row["stored"]
        self.commit = evaluate(kernel, inkernel("kishu_head()"))["commit"]
        return row

    def restore(self, kernel):
        return evaluate(kernel, inkernel(f"kishu_checkout({str(self.notebook)!r}, {self.commit!r})"))


def drop_caches() -> str:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "cold"
    except OSError:
        return "warm (page cache not dropped: not allowed here)"


def raw_disk(work: Path, nbytes: int) -> float:
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={work / 'dd.bin'}", "bs=8M", f"count={max(1, nbytes >> 23)}",
                    "conv=fdatasync"], check=True, capture_output=True)
    seconds = time.perf_counter() - t
    (work / "dd.bin").unlink()
    return seconds


def run_system(system: System, workload: list[str]) -> dict:
    print(f"\n== {system.name}", flush=True)
    kernel = Kernel(system.dir, notebook=NOTEBOOK, extra_env=system.env(), kernel_name=system.kernel_name)
    rows = []
    try:
        boot(kernel)
        system.setup(kernel)
        for index, cell in enumerate(workload, 1):
            kernel.run(cell, timeout=1800)
            row = system.checkpoint(kernel, index)
            rows.append(row)
            print(f"  cell {index:2d}: {row['seconds'] if row['seconds'] is not None else float('nan'):7.3f} s, "
                  f"{row['written'] / 1e6:8.1f} MB written, {row['stored'] / 1e6:8.1f} MB stored"
                  + (f"  [{row['error']}]" if row.get("error") else ""), flush=True)
        live = evaluate(kernel, inkernel("live_bytes()"))["bytes"]
        expect = evaluate(kernel, inkernel("expected()"))["variables"]
    finally:
        kernel.close()
    cache = drop_caches()
    fresh = Kernel(system.dir, notebook=NOTEBOOK, extra_env=system.env(), kernel_name=system.kernel_name)
    try:
        boot(fresh)
        evaluate(fresh, inkernel("preload()"))
        try:
            restored = system.restore(fresh)
            verdicts = evaluate(fresh, inkernel(f"check({expect!r}, {GENERATOR_NEXT!r}, {VIEWS!r})"))["verdicts"]
        except RuntimeError as exc:
            restored, verdicts = {"seconds": None, "error": str(exc)}, {n: "not restored" for n in expect}
    finally:
        fresh.close()
    print(f"  restore in a fresh kernel ({cache}): "
          f"{restored['seconds'] if restored['seconds'] is not None else float('nan'):.3f} s"
          + (f" [{restored['error']}]" if restored.get("error") else ""), flush=True)
    print("  " + ", ".join(f"{n}: {v}" for n, v in verdicts.items()), flush=True)
    return {"name": system.name, "checkpoints": rows, "live_bytes": live, "restore": restored,
            "cache": cache, "verdicts": verdicts}


def report(results: list[dict], dd_seconds: float, live: int, kishu_version: str) -> None:
    print(f"\nlive state {live / 1e6:.0f} MB; raw disk: dd of {live / 1e6:.0f} MB with conv=fdatasync "
          f"{dd_seconds:.2f} s; kishu {kishu_version}\n")
    names = [r["name"] for r in results]
    print("| cell | " + " | ".join(f"{n}: s / MB written / MB stored" for n in names) + " |")
    print("|---:|" + "---|" * len(names))
    for i in range(len(results[0]["checkpoints"])):
        cells_ = []
        for r in results:
            row = r["checkpoints"][i]
            s = "failed" if row["seconds"] is None else f"{row['seconds']:.2f}"
            mark = " ✗" if row.get("error") and "skipped" not in (row.get("error") or "") else ""
            cells_.append(f"{s} / {row['written'] / 1e6:.0f} / {row['stored'] / 1e6:.0f}{mark}")
        print(f"| {i + 1} | " + " | ".join(cells_) + " |")
    print("\n| system | stored after 10 / live | restore s (fresh kernel) | variables correct | not correct |")
    print("|---|---:|---:|---:|---|")
    for r in results:
        ok = [n for n, v in r["verdicts"].items() if v == "ok"]
        bad = {n: v for n, v in r["verdicts"].items() if v != "ok"}
        seconds = r["restore"]["seconds"]
        print(f"| {r['name']} | {r['checkpoints'][-1]['stored'] / live:.2f}x | "
              f"{'-' if seconds is None else f'{seconds:.2f}'} | {len(ok)}/{len(r['verdicts'])} | "
              + ("; ".join(f"{n}: {v}" for n, v in bad.items()) or "") + " |")
    by = {r["name"]: r for r in results}
    ours, kishu = by.get(Ours.name), by.get(Kishu.name)
    if ours and kishu:
        ratio = ours["checkpoints"][-1]["stored"] / live
        faster = [o["seconds"] < k["seconds"] for o, k in zip(ours["checkpoints"], kishu["checkpoints"])
                  if k["seconds"] is not None]
        wrong = [n for r in results for n, v in r["verdicts"].items() if "WRONG" in v]
        print("\n| goal | measured | |")
        print("|---|---|---|")
        print(f"| stored after ten checkpoints < 1.5x live | {ratio:.2f}x (Kishu "
              f"{kishu['checkpoints'][-1]['stored'] / live:.2f}x) | {'met' if ratio < 1.5 else 'NOT met'} |")
        print(f"| every checkpoint faster than Kishu's for the same cell | {sum(faster)}/{len(faster)} cells | "
              f"{'met' if all(faster) else 'NOT met'} |")
        if ours["restore"]["seconds"] is not None and kishu["restore"]["seconds"] is not None:
            print(f"| restore faster than Kishu's checkout | {ours['restore']['seconds']:.2f} s vs "
                  f"{kishu['restore']['seconds']:.2f} s | "
                  f"{'met' if ours['restore']['seconds'] < kishu['restore']['seconds'] else 'NOT met'} |")
        ours_wrong = [n for n, v in ours["verdicts"].items() if v not in ("ok", "missing")]
        print(f"| nothing restored wrong (a value, type or view that came back different) | ours: "
              f"{ours_wrong or 'none'} (missing, reported as skipped at save: "
              f"{[n for n, v in ours['verdicts'].items() if v == 'missing'] or 'none'}); any system's WRONG VALUE: "
              f"{wrong or 'none'} | {'met' if not ours_wrong else 'NOT met'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=200, help="size of the numpy array in MB")
    ap.add_argument("--systems", default="kishu,dill,store,torch,ours",
                    help="comma-separated subset of kishu,dill,store,torch,ours")
    ap.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--smoke", action="store_true", help="the smallest run (a 2 MB array, a 2 MB model, no Kishu, "
                    "whose environment comes from PyPI): every system works; the figures mean nothing")
    args = ap.parse_args()
    width = 256 if args.smoke else 2048
    if args.smoke:
        args.mb, args.systems = 2, ",".join(s for s in args.systems.split(",") if s != "kishu")
    results_dir = REPO / "benchmarks" / "results"  # ignored by git: a fresh clone does not have it
    results_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gkews-bench-peers-", dir=results_dir))
    jupyter_path = work / "jupyter"
    os.environ["JUPYTER_PATH"] = str(jupyter_path) + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    classes = {"kishu": Kishu, "dill": Dill, "store": Store, "torch": TorchSave, "ours": Ours}
    chosen = [classes[s] for s in args.systems.split(",")]
    kishu_version = ensure_kishu(jupyter_path) if Kishu in chosen else "-"
    workload = cells(args.mb, width)
    try:
        results = [run_system(cls(work), workload) for cls in chosen]
        live = results[0]["live_bytes"]
        dd_seconds = raw_disk(work, live)
        report(results, dd_seconds, live, kishu_version)
        if args.json:
            Path(args.json).write_text(json.dumps({"results": results, "dd_seconds": dd_seconds, "live": live,
                                                   "kishu": kishu_version}, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
