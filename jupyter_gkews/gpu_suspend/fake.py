"""A GPU and its driver checkpoint API simulated in a JSON file, for machines without a GPU.

Selected with c.LocalBackend.gpu_api = "fake"; the file is named by $GKEWS_FAKE_GPU. Tests and the
benchmark's smoke mode write which real processes "hold" device memory and what other users hold, and may
make the driver refuse the API or fail a restore; the server's suspend then runs its real policy (real
kernels, real server, real state file) against it. Every change is a locked read-modify-write, since the test
process and the server process both write the file.

    {"devices": {"0": total_bytes}, "processes": {"<pid>": {"device": 0, "bytes": n, "state": "running"}},
     "others": [{"pid": p, "device": 0, "bytes": n}], "refuse": null | CUresult, "restore_error": {"<pid>": CUresult},
     "calls": [["checkpoint", pid], ...]}
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os

from .driver import OUT_OF_MEMORY, DriverError, GpuUnavailable
from .nvml import GpuProcess
from .procs import start_time

ENV = "GKEWS_FAKE_GPU"
INVALID_VALUE, OPERATING_SYSTEM, ILLEGAL_STATE = 1, 304, 401


@contextlib.contextmanager
def edit(path: str):
    """Locked read-modify-write of the fake's file (shared by tests and the server)."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            data = {}
        for key, value in (("devices", {"0": 80 * 1024 ** 3}), ("processes", {}), ("others", []),
                           ("refuse", None), ("restore_error", {}), ("calls", [])):
            data.setdefault(key, value)
        try:
            yield data
        finally:  # a call that fails is recorded too, and so is what it broke
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)


def read(path: str) -> dict:
    with edit(path) as data:
        return data


class FakeGpu:
    """Both halves: a CheckpointDriver and a GpuMemory."""

    def __init__(self, path: str | None = None):
        self.path = path or os.environ.get(ENV, "")
        if not self.path:
            raise GpuUnavailable(f"the fake GPU needs its file: set ${ENV}")

    def _proc(self, data: dict, call: str, pid: int) -> dict:
        data["calls"].append([call, pid])
        if data["refuse"]:
            raise DriverError(call, pid, int(data["refuse"]))
        proc = data["processes"].get(str(pid))
        if proc is None or start_time(pid) is None:
            raise DriverError(call, pid, INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE")
        return proc

    def _move(self, call: str, pid: int, before: tuple[str, ...], after: str) -> None:
        with edit(self.path) as data:
            proc = self._proc(data, call, pid)
            if proc["state"] not in before:
                raise DriverError(call, pid, ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE")
            proc["state"] = after

    # -- CheckpointDriver ----------------------------------------------------------------------------
    def state(self, pid: int) -> str:
        with edit(self.path) as data:
            return self._proc(data, "state", pid)["state"]

    def lock(self, pid: int, timeout_s: float) -> None:
        self._move("lock", pid, ("running",), "locked")

    def checkpoint(self, pid: int) -> None:
        self._move("checkpoint", pid, ("locked",), "checkpointed")

    def restore(self, pid: int) -> None:
        with edit(self.path) as data:
            proc = self._proc(data, "restore", pid)
            if proc["state"] != "checkpointed" or proc.get("broken"):
                raise DriverError("restore", pid, OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM")
            code = data["restore_error"].get(str(pid))
            if code is None and _free(data)[proc["device"]] < proc["bytes"]:
                code = OUT_OF_MEMORY
            if code is not None:
                proc["broken"] = True  # like the real driver: a failed restore never succeeds later
                raise DriverError("restore", pid, int(code))
            proc["state"] = "locked"

    def unlock(self, pid: int) -> None:
        self._move("unlock", pid, ("locked",), "running")

    # -- GpuMemory ---------------------------------------------------------------------------------------
    def processes(self) -> list[GpuProcess]:
        data = read(self.path)
        out = [GpuProcess(int(pid), p["device"], p["bytes"]) for pid, p in data["processes"].items()
               if p["state"] != "checkpointed" and start_time(int(pid)) is not None]
        return out + [GpuProcess(o["pid"], o["device"], o["bytes"]) for o in data["others"]]

    def free(self) -> dict[int, int]:
        return _free(read(self.path))


def _free(data: dict) -> dict[int, int]:
    free = {int(d): int(total) for d, total in data["devices"].items()}
    for pid, p in data["processes"].items():
        if p["state"] != "checkpointed" and start_time(int(pid)) is not None:
            free[p["device"]] -= p["bytes"]
    for o in data["others"]:
        free[o["device"]] -= o["bytes"]
    return free
