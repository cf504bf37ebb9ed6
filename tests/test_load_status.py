"""A short run of benchmarks/load_status.py: 50 status clients while pause/resume cycles repeat (~30 s:
at least three cycles, and 10 s).

Asserts what a user relies on, not speed: every status request answered 200, no checkpoint lost (each
resume restores exactly the checkpoint its pause reported, with the value from before the pause), no
state stuck in a transition. The latency figures are printed; the benchmark runs the long version.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import load_status  # noqa: E402


def test_status_clients_during_pause_resume_cycles(tmp_path):
    r = load_status.run(seconds=10, rest_seconds=3, clients=50, notebooks=1, mb=5, stuck_after=90,
                        base=tmp_path, min_cycles=3)
    print(load_status.table(r))
    assert r["rest"]["errors"] == 0 and r["cycling"]["errors"] == 0, r
    assert r["cycles"] >= 3, r
    assert r["checkpoints_lost"] == 0 and r["states_stuck"] == 0, r["problems"]
    assert r["final_state"] == "active"
    # the clients saw the transitions they were polling through
    assert r["cycling"]["requests"] > r["cycles"] * 50
