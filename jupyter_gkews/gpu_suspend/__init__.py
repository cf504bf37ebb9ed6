"""Local GPU suspend: move a live kernel's device memory to host memory through NVIDIA's driver checkpoint
API, give the GPU back, and later put the memory back into the same process.

driver.py reaches the driver (cuda-bindings), nvml.py asks NVML who holds which device memory, procs.py reads
process facts from /proc, fake.py stands in for both on machines without a GPU (tests, benchmark smoke runs).
The per-kernel policy (what to suspend, when to fall back) lives in backends/local.py.
"""
from __future__ import annotations

from .driver import CheckpointDriver, DriverError, GpuUnavailable
from .nvml import GpuMemory, GpuProcess

GIB = 1024 ** 3


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


__all__ = ["CheckpointDriver", "DriverError", "GpuUnavailable", "GpuMemory", "GpuProcess", "GIB", "gib"]
