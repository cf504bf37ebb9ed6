"""How many GPUs this session holds: the default of c.GkewsApp.gpu_count, which the report and the
metrics multiply paused hours by. Read from the environment the container runtime sets, else nvidia-smi."""
from __future__ import annotations

import os
import shutil
import subprocess


def _listed(value: str) -> int:
    """The devices a list names, as CUDA counts them: up to the first entry that is neither an index nor a
    GPU or MIG UUID (`0,1,bad,3` is two devices; `-1` is none)."""
    count = 0
    for item in value.split(","):
        item = item.strip()
        if not (item.isdigit() or item.upper().startswith(("GPU-", "MIG-"))):
            break
        count += 1
    return count


def _nvidia_smi() -> int:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def detect_gpu_count(environ=None) -> int:
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        return _listed(env["CUDA_VISIBLE_DEVICES"])
    nvidia = env.get("NVIDIA_VISIBLE_DEVICES")
    if nvidia is not None:
        if nvidia.strip().lower() in ("", "none", "void"):
            return 0
        if nvidia.strip().lower() != "all":
            return _listed(nvidia)
    return _nvidia_smi()
