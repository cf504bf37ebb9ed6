"""Run `jupyter gkews <command>` as a person does: a subprocess, on throw-away Jupyter directories."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def jupyter_gkews(*args: str, home: Path, timeout: float = 600, env: dict | None = None,
                  cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The command's exit code and output; its config and data directories are under home (never ~/.jupyter).
    cwd: the folder it runs in (the project folder whose default state and store it reads)."""
    for d in ("config", "data", "runtime"):
        (home / d).mkdir(parents=True, exist_ok=True)
    # only the test's own store; and no PYTEST_CURRENT_TEST, under which ipykernel leaves a kernel's file
    # descriptors uncaptured (a person's kernels capture them: a server's log showed what only that does)
    full_env = {k: v for k, v in os.environ.items() if k not in ("GKEWS_CHECKPOINT_ROOT", "PYTEST_CURRENT_TEST")}
    full_env.update(JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
                    JUPYTER_RUNTIME_DIR=str(home / "runtime"), **(env or {}))
    exe = str(Path(sys.executable).with_name("jupyter-gkews"))
    return subprocess.run([exe, *args], env=full_env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
