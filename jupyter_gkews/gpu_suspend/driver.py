"""The five driver calls of NVIDIA's process checkpoint API, behind a small interface.

A restore that failed for lack of device memory is not retryable on current drivers (measured with driver
580: the next restore returns CUDA_ERROR_OPERATING_SYSTEM and the process hangs at its next CUDA call), so
callers check free memory first and, on any restore error, give the process up.
"""
from __future__ import annotations

import os
from typing import Protocol

#: CUresult codes we name in messages (the driver's own names come from cuGetErrorName when it is there)
OUT_OF_MEMORY = 2
NOT_SUPPORTED = 801
NOT_PERMITTED = 800
STATES = {0: "running", 1: "locked", 2: "checkpointed", 3: "failed"}
EXTRA_HINT = 'install the extra: pip install "jupyter-gkews[gpu]" (cuda-bindings and nvidia-ml-py)'


class GpuUnavailable(Exception):
    """The suspend cannot be used on this machine; the message says why and what to do."""


class DriverError(Exception):
    """A checkpoint call returned an error; code is the CUresult."""

    def __init__(self, call: str, pid: int, code: int, name: str = ""):
        self.call, self.pid, self.code, self.name = call, pid, code, name or f"CUresult {code}"
        super().__init__(f"{call} for pid {pid} returned {self.name} ({code})")

    @property
    def out_of_memory(self) -> bool:
        return self.code == OUT_OF_MEMORY


class CheckpointDriver(Protocol):
    def state(self, pid: int) -> str:
        """running, locked, checkpointed or failed."""

    def lock(self, pid: int, timeout_s: float) -> None: ...

    def checkpoint(self, pid: int) -> None: ...

    def restore(self, pid: int) -> None: ...

    def unlock(self, pid: int) -> None: ...


class CudaCheckpointDriver:
    """The real driver through NVIDIA's `cuda-bindings` (module cuda.bindings.driver). Needs driver 550+
    (570+ for processes whose children hold contexts too); the caller needs no CUDA context of its own."""

    def __init__(self):
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise GpuUnavailable(f"the NVIDIA driver bindings are not installed ({exc}); {EXTRA_HINT}") from None
        self._d = driver
        if not hasattr(driver, "cuCheckpointProcessLock"):
            raise GpuUnavailable("this cuda-bindings has no checkpoint API (cuCheckpointProcess*); "
                                 'upgrade it: pip install -U "cuda-bindings>=12.8"')
        try:
            (err,) = driver.cuInit(0)
        except Exception as exc:  # no libcuda at all: the binding raises while loading it
            raise GpuUnavailable(f"no NVIDIA driver could be loaded: {exc}") from None
        if int(err) != 0:
            raise GpuUnavailable(f"cuInit failed with {self._name(err)} ({int(err)}): no usable GPU driver here")
        err, version = driver.cuDriverGetVersion()
        self.version = int(version) if int(err) == 0 else 0
        if self.version and self.version < 12040:
            raise GpuUnavailable(f"the NVIDIA driver supports CUDA {self.version // 1000}.{self.version % 1000 // 10}; "
                                 "the checkpoint API needs driver 550 (CUDA 12.4) or later, 570+ for process trees")
        try:  # a driver without the API lacks the symbol (GpuUnavailable); any answer about our own pid is fine
            self.state(os.getpid())
        except DriverError:
            pass

    def _name(self, err) -> str:
        try:
            e, name = self._d.cuGetErrorName(err)
            return name.decode() if int(e) == 0 and name else f"CUresult {int(err)}"
        except Exception:
            return f"CUresult {int(err)}"

    def _check(self, call: str, pid: int, result) -> tuple:
        err = result[0]
        if int(err) != 0:
            raise DriverError(call, pid, int(err), self._name(err))
        return result[1:]

    def _call(self, name: str, pid: int, *args):
        try:
            return self._check(name, pid, getattr(self._d, name)(pid, *args))
        except (RuntimeError, AttributeError) as exc:  # the loaded libcuda lacks the symbol: driver too old
            raise GpuUnavailable(f"{name} is not in this NVIDIA driver ({exc}); the checkpoint API needs "
                                 "driver 550 or later, 570+ for process trees") from None

    def state(self, pid: int) -> str:
        (state,) = self._call("cuCheckpointProcessGetState", pid)
        return STATES.get(int(state), f"unknown ({int(state)})")

    def lock(self, pid: int, timeout_s: float) -> None:
        args = self._d.CUcheckpointLockArgs()
        args.timeoutMs = max(0, int(timeout_s * 1000))
        self._call("cuCheckpointProcessLock", pid, args)

    def checkpoint(self, pid: int) -> None:
        self._call("cuCheckpointProcessCheckpoint", pid, None)

    def restore(self, pid: int) -> None:
        self._call("cuCheckpointProcessRestore", pid, None)

    def unlock(self, pid: int) -> None:
        self._call("cuCheckpointProcessUnlock", pid, None)


def refusal(exc: DriverError) -> str | None:
    """A message when an error means "this environment refuses the API" rather than "this process failed"."""
    if exc.code in (NOT_SUPPORTED, NOT_PERMITTED):
        return (f"the driver refused the checkpoint API ({exc.name}): the GPU is virtualised or sandboxed "
                "(gVisor, some VMs) or the driver is older than 550")
    return None
