"""The commands README.md and docs/ give work on a fresh clone: every benchmark at its smallest size, and
every `jupyter gkews` subcommand's --help."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gkews.cli import GkewsCommand

REPO = Path(__file__).resolve().parent.parent


BIN = Path(sys.executable).parent  # the venv's bin: `jupyter gkews` is its jupyter-gkews script
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
       "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}


def run(args: list[str], cwd: Path = REPO, timeout: float = 280, code: int = 0) -> subprocess.CompletedProcess:
    command = args if args[0] == "jupyter" else [sys.executable, *args]
    done = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == code, (f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                                     f"{done.stderr[-3000:]}")
    return done


@pytest.mark.parametrize("command", sorted(GkewsCommand.subcommands))
def test_every_subcommand_explains_itself(command):
    done = run(["jupyter", "gkews", command, "--help"], timeout=120)
    assert "--help-all" in done.stdout, done.stdout


def test_the_command_without_a_subcommand_names_them():
    done = run(["jupyter", "gkews"], timeout=120, code=2)
    assert all(name in done.stderr for name in GkewsCommand.subcommands), done.stderr


def test_an_unknown_command_is_named():
    done = run(["jupyter", "gkews", "bogus"], timeout=120, code=2)
    assert "unknown command 'bogus'" in done.stderr and "Commands: cleanup, pause" in done.stderr, done.stderr


@pytest.mark.parametrize("command", sorted(GkewsCommand.subcommands))
def test_a_mistyped_option_or_a_stray_argument_is_refused_not_ignored(command, tmp_path):
    """traitlets only warned of an unknown option ("it will have no effect") and kept a stray argument, and
    the command ran without them: `report --sinse=...` reported the whole log, `resume-test my.ipynb` tested
    a notebook of its own. Both exit 2 now, naming what was not understood; JupyterApp's own options work."""
    done = run(["jupyter", "gkews", command, "--sinse=2026-12-01"], cwd=tmp_path, timeout=120, code=2)
    assert f"jupyter gkews {command}: error: unknown option --sinse" in done.stderr, done.stderr
    done = run(["jupyter", "gkews", command, "my.ipynb"], cwd=tmp_path, timeout=120, code=2)
    assert f"jupyter gkews {command}: unexpected argument 'my.ipynb'" in done.stderr, done.stderr
    done = run(["jupyter", "gkews", command, "--debug", "--help"], cwd=tmp_path, timeout=120)
    assert "--help-all" in done.stdout, done.stdout


def test_a_setting_given_twice_is_a_wrong_option(tmp_path):
    """An alias and its long form together (`--checkpoint-root=A --GkewsApp.checkpoint_root=B`) ended with a
    CRITICAL "Bad config encountered during initialization" line and exit code 1; it is a wrong option: 2."""
    done = run(["jupyter", "gkews", "cleanup", "--dry-run", f"--checkpoint-root={tmp_path}",
                f"--GkewsApp.checkpoint_root={tmp_path}"], cwd=tmp_path, timeout=120, code=2)
    assert "jupyter gkews cleanup: error: GkewsApp.checkpoint_root=" in done.stderr, done.stderr
    assert "checkpoint_root only accepts one value, got 2" in done.stderr and "CRITICAL" not in done.stderr


@pytest.mark.parametrize("command", sorted(GkewsCommand.subcommands))
def test_a_mistyped_option_without_a_value_is_named_unknown(command, tmp_path):
    """`cleanup --dryrun` (a flag typo, no `=value`) said "argument --dryrun: expected one argument", as
    though the option existed and lacked its value. It is named unknown, as `--dryrun=1` is."""
    done = run(["jupyter", "gkews", command, "--dryrun"], cwd=tmp_path, timeout=120, code=2)
    assert (f"jupyter gkews {command}: error: unknown option --dryrun: `--help` lists this command's options"
            in done.stderr), done.stderr
    done = run(["jupyter", "gkews", command, "--dryrun", "--debug"], cwd=tmp_path, timeout=120, code=2)
    assert "unknown option --dryrun" in done.stderr, done.stderr


@pytest.mark.parametrize("command", sorted(GkewsCommand.subcommands))
def test_a_setting_the_command_does_not_have_is_refused(command, tmp_path):
    """`cleanup --GkewsApp.keep_lst=100` (a typo of keep_last) was a warning, and the cleanup ran with
    keep_last=5; `resume-test --GkewsApp.busy_timeout=-1`, a setting it never reads, passed silently."""
    done = run(["jupyter", "gkews", command, "--Nosuch.setting=1"], cwd=tmp_path, timeout=120, code=2)
    assert f"jupyter gkews {command}: unknown option --Nosuch.setting: this command has no Nosuch settings" \
        in done.stderr, done.stderr
    app = GkewsCommand.subcommands[command][0].rsplit(".", 1)[1]  # the command's own class: a setting it lacks
    done = run(["jupyter", "gkews", command, f"--{app}.keep_lst=1"], cwd=tmp_path, timeout=120, code=2)
    assert f"jupyter gkews {command}: unknown option --{app}.keep_lst" in done.stderr, done.stderr
    assert "this command has no" not in done.stderr, done.stderr


def test_a_mistyped_server_setting_names_the_one_meant(tmp_path):
    done = run(["jupyter", "gkews", "cleanup", f"--checkpoint-root={tmp_path}", "--dry-run",
                "--GkewsApp.keep_lst=100"], cwd=tmp_path, timeout=120, code=2)
    assert "unknown option --GkewsApp.keep_lst (did you mean --GkewsApp.keep_last?)" in done.stderr, done.stderr
    done = run(["jupyter", "gkews", "resume-test", "--GkewsApp.busy_timeout=-1"], cwd=tmp_path, timeout=120, code=2)
    assert "this command has no GkewsApp settings" in done.stderr, done.stderr
    # the settings a command does read still work: the backend's, and GkewsApp's
    done = run(["jupyter", "gkews", "report", "--LocalBackend.capacity_timeout=5", "--GkewsApp.keep_last=3",
                "--state-dir=/nonexistent"], cwd=tmp_path, timeout=120, code=2)
    assert "no event log at /nonexistent/events.jsonl" in done.stderr, done.stderr


def test_report_takes_jupyters_own_options():
    """`jupyter gkews report --debug` was refused ("argument --debug: expected one argument")."""
    done = run(["jupyter", "gkews", "report", "--debug", "--log-level=DEBUG", "--state-dir=/nonexistent"],
               timeout=120, code=2)
    assert "no event log at /nonexistent/events.jsonl" in done.stderr, done.stderr


BENCHMARKS = {  # the smallest size of each documented benchmark, and what its report must say
    "bench_checkpoint": (["benchmarks/bench_checkpoint.py", "--smoke"], "kernel_state.restore cold"),
    "bench_lifecycle": (["benchmarks/bench_lifecycle.py", "--notebooks", "1", "--mb", "1", "--cycles", "3",
                         "--clients", "2", "--requests", "2"], "concurrent clients"),
    "load_status": (["benchmarks/load_status.py", "--seconds", "3", "--rest-seconds", "1", "--clients", "2",
                     "--notebooks", "1", "--mb", "1"], "checkpoints lost: 0"),
    "bench_gpu_suspend": (["benchmarks/bench_gpu_suspend.py", "--smoke", "--cycles", "1"],
                          "smoke: simulated driver on the CPU"),
    "peers.undo": (["-m", "benchmarks.peers.undo", "--smoke"], "stored after 12 cells"),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_runs_at_its_smallest_size(name, tmp_path):
    args, says = BENCHMARKS[name]
    json_path = tmp_path / "figures.json"
    done = run(args + ["--json", str(json_path)], timeout=540)
    assert says in done.stdout, done.stdout[-2000:]
    assert json_path.stat().st_size > 0


@pytest.mark.timeout(600)
def test_the_peers_benchmark_runs_on_a_fresh_clone(tmp_path):
    """`python -m benchmarks.peers` from a clone without benchmarks/results/ (ignored by git)."""
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "benchmarks", clone / "benchmarks", ignore=shutil.ignore_patterns("results", "__pycache__"))
    (clone / "tests").mkdir()
    for helper in ("kernels.py", "contenthash.py"):
        shutil.copy(REPO / "tests" / helper, clone / "tests" / helper)
    done = run(["-m", "benchmarks.peers", "--smoke"], cwd=clone, timeout=540)
    assert "== kernel_state (ours)" in done.stdout, done.stdout[-2000:]
    assert not (clone / "benchmarks" / "results").exists() or not any(
        p.name.startswith("gkews-bench-peers-") for p in (clone / "benchmarks" / "results").iterdir())
