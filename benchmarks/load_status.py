"""Load: 50 concurrent GET status clients while pause/resume cycles repeat, against a real server.

    .venv/bin/python benchmarks/load_status.py [--seconds 180] [--clients 50] [--notebooks 2] [--mb 20]

Starts `python -m jupyter_server` with the extension (tests/serverproc.py) on throw-away directories and
opens N notebooks, each holding a numpy array of --mb megabytes. First the clients poll at rest for
--rest-seconds; then, for --seconds, one driver repeats: change every array (`x += 1`), pause, wait for
paused, resume, wait for active, and check that each notebook came back from exactly the checkpoint its
pause reported, with the value it had before the pause. Meanwhile the clients (tornado
AsyncHTTPClient, one request at a time each, 127.0.0.1) record every latency and every state they see.

Reported: p50/p95/p99/max of GET status latency at rest and during the cycles; checkpoints lost (a pause
reported a checkpoint that GET checkpoints does not list, or the resume restored another one or a
different value, or it failed): must be 0; states stuck (a transition state seen by the clients for longer
than --stuck-after seconds, or a cycle that ended in failed or never ended): must be 0.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from serverproc import Server  # noqa: E402  (tests/serverproc.py: the harness the tests use too)

TRANSITIONS = ("pausing", "resuming")
DIGEST = "import xxhash; print(xxhash.xxh3_128_hexdigest(x.tobytes()))"


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"requests": 0}
    v = sorted(values)
    pick = lambda p: v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]  # noqa: E731
    return {"requests": len(v), "p50_ms": pick(50), "p95_ms": pick(95), "p99_ms": pick(99), "max_ms": v[-1]}


async def poll_status(url: str, token: str, clients: int, stop: threading.Event, seen: list) -> dict:
    """Each client loops GET status until stop; latencies in ms, and (time, state) of every answer."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    http = AsyncHTTPClient(force_instance=True, max_clients=clients)
    request = HTTPRequest(url + "gkews/status", headers={"Authorization": f"token {token}"}, request_timeout=120)
    latencies, errors = [], []

    async def client():
        while not stop.is_set():
            t = time.perf_counter()
            r = await http.fetch(request, raise_error=False)
            latencies.append((time.perf_counter() - t) * 1000.0)
            if r.code != 200:
                errors.append(r.code)
                continue
            seen.append((time.monotonic(), json.loads(r.body)["state"]))
    await asyncio.gather(*(client() for _ in range(clients)))
    http.close()
    return {**percentiles(latencies), "errors": len(errors)}


def longest_transition(seen: list) -> float:
    """The longest run of answers, in seconds, that all said one transition state."""
    longest, start, state = 0.0, None, None
    for t, s in sorted(seen):
        if s in TRANSITIONS and s == state:
            longest = max(longest, t - start)
        elif s in TRANSITIONS:
            start, state = t, s
        else:
            start, state = None, None
    return longest


class Cycler:
    def __init__(self, server: Server, notebooks: list[str], stuck_after: float):
        self.server, self.notebooks, self.stuck_after = server, notebooks, stuck_after
        self.cycles, self.lost, self.stuck, self.problems = 0, 0, 0, []
        self.kernels = {}

    def transition(self, action: str, target: str) -> dict | None:
        while True:  # the previous transition may still hold its claim for a moment after its state shows
            code, payload = self.server.post(f"gkews/{action}")
            if code == 202:
                break
            if code == 409 and "transition is running" in payload.get("message", ""):
                time.sleep(0.01)
                continue
            raise RuntimeError(f"POST {action}: {code} {payload}")
        try:
            s = self.server.wait_for((target, "failed"), timeout=self.stuck_after, interval=0.05)
        except AssertionError as exc:
            self.stuck += 1
            self.problems.append(f"cycle {self.cycles + 1}: {exc}")
            return None
        if s["state"] == "failed":
            self.stuck += 1
            self.problems.append(f"cycle {self.cycles + 1}: {action} failed: {s['message']}")
            return None
        return s

    def one(self) -> bool:
        before = {}
        for path in self.notebooks:
            before[path] = self.server.run_cell(self.kernels[path], "x += 1\n" + DIGEST).strip()
        paused = self.transition("pause", "paused")
        if paused is None:
            return False
        saved = {nb["path"]: nb.get("checkpoint") for nb in paused["notebooks"]}
        listed = {row["id"] for row in self.server.get("gkews/checkpoints")["checkpoints"]}
        for path in self.notebooks:
            if not saved.get(path) or saved[path] not in listed:
                self.lost += 1
                self.problems.append(f"cycle {self.cycles + 1}: {path}: checkpoint {saved.get(path)} not listed")
        resumed = self.transition("resume", "active")
        if resumed is None:
            return False
        for nb in resumed["notebooks"]:
            self.kernels[nb["path"]] = nb["kernel_id"]
            ok = nb.get("verdict") == "restored-from-checkpoint" and nb.get("checkpoint") == saved.get(nb["path"]) \
                and not nb.get("failed")
            if ok:
                ok = self.server.run_cell(nb["kernel_id"], DIGEST).strip() == before[nb["path"]]
            if not ok:
                self.lost += 1
                self.problems.append(f"cycle {self.cycles + 1}: {nb['path']} came back wrong: {nb}")
        self.cycles += 1
        return True


def run(seconds: float, rest_seconds: float = 10, clients: int = 50, notebooks: int = 2, mb: float = 20,
        stuck_after: float = 120, base: Path | None = None, progress=print, min_cycles: int = 1) -> dict:
    """Cycles repeat for `seconds`, and at least `min_cycles` times however slow the machine is."""
    own = base is None
    base = Path(tempfile.mkdtemp(prefix="gkews-bench-load-")) if own else base
    server = Server(base, request_timeout=120, cell_timeout=300)
    try:
        server.start()
        cycler = Cycler(server, [f"load/nb{i}.ipynb" for i in range(notebooks)], stuck_after)
        for i, path in enumerate(cycler.notebooks):
            kid = server.open_notebook(path)["kernel"]["id"]
            server.run_cell(kid, "import numpy as np\n"
                            f"x = np.random.default_rng({i}).standard_normal({int(mb * 1e6 / 8)})")
            cycler.kernels[path] = kid

        stop, seen = threading.Event(), []
        timer = threading.Timer(rest_seconds, stop.set)
        timer.start()
        rest = asyncio.run(poll_status(server.url, server.token, clients, stop, seen))
        progress(f"at rest: {rest}")

        stop, seen = threading.Event(), []
        box: dict = {}

        def driver():
            deadline = time.monotonic() + seconds
            try:
                while time.monotonic() < deadline or cycler.cycles < min_cycles:
                    if not cycler.one():
                        break
                    progress(f"cycle {cycler.cycles} done")
            except BaseException as exc:  # reported below
                box["error"] = exc
            finally:
                stop.set()
        thread = threading.Thread(target=driver)
        thread.start()
        busy = asyncio.run(poll_status(server.url, server.token, clients, stop, seen))
        thread.join()
        if "error" in box:
            raise box["error"]
        longest = longest_transition(seen)
        stuck = cycler.stuck + (longest > stuck_after)
        return {"clients": clients, "notebooks": notebooks, "mb": mb, "rest": rest, "cycling": busy,
                "cycles": cycler.cycles, "checkpoints_lost": cycler.lost, "states_stuck": stuck,
                "longest_transition_s": round(longest, 2), "problems": cycler.problems,
                "final_state": server.status()["state"]}
    finally:
        server.stop()
        if own:
            shutil.rmtree(base, ignore_errors=True)


def table(r: dict) -> str:
    lines = [f"| {r['clients']} clients, GET gkews/status | requests | p50 ms | p95 ms | p99 ms | max ms | non-200 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for label, f in (("at rest", r["rest"]), (f"during {r['cycles']} pause/resume cycles", r["cycling"])):
        lines.append(f"| {label} | {f['requests']} | {f['p50_ms']:.1f} | {f['p95_ms']:.1f} | {f['p99_ms']:.1f} | "
                     f"{f['max_ms']:.1f} | {f['errors']} |")
    lines.append("")
    lines.append(f"checkpoints lost: {r['checkpoints_lost']}; states stuck: {r['states_stuck']} (longest run of "
                 f"one transition state seen by the clients: {r['longest_transition_s']} s); final state "
                 f"{r['final_state']}")
    lines.extend(r["problems"])
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=180, help="how long the pause/resume cycles repeat")
    ap.add_argument("--rest-seconds", type=float, default=20, help="how long the clients poll at rest first")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--notebooks", type=int, default=2)
    ap.add_argument("--mb", type=float, default=20, help="megabytes of numpy data per notebook")
    ap.add_argument("--stuck-after", type=float, default=120,
                    help="seconds in one transition state that count as stuck")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args()
    r = run(args.seconds, args.rest_seconds, args.clients, args.notebooks, args.mb, args.stuck_after)
    print(f"\n{args.notebooks} notebooks x {args.mb:g} MB, {args.seconds:g} s of cycles\n")
    print(table(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    sys.exit(0 if r["checkpoints_lost"] == 0 and r["states_stuck"] == 0 else 1)


if __name__ == "__main__":
    main()
