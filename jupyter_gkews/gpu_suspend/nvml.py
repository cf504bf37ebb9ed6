"""Who holds which device memory, and how much is free: NVML through NVIDIA's `nvidia-ml-py` (pynvml).

The driver API moves memory; NVML is how we see that it moved (a suspended process no longer appears among a
device's compute processes) and whether a restore would fit before we try it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .driver import EXTRA_HINT, GpuUnavailable


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    device: int
    used: int  # bytes; 0 when NVML cannot tell (some containers)


class GpuMemory(Protocol):
    def processes(self) -> list[GpuProcess]:
        """Every process holding a CUDA context, per device."""

    def free(self) -> dict[int, int]:
        """Free bytes per device index."""


class NvmlMemory:
    def __init__(self):
        try:
            import pynvml
        except ImportError as exc:
            raise GpuUnavailable(f"NVML's Python binding is not installed ({exc}); {EXTRA_HINT}") from None
        self._n = pynvml
        try:
            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except pynvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML is not usable here ({exc}): no NVIDIA driver or no GPU") from None
        if not self._handles:
            raise GpuUnavailable("NVML sees no GPU")

    def processes(self) -> list[GpuProcess]:
        try:
            return [GpuProcess(int(p.pid), i, int(p.usedGpuMemory or 0)) for i, h in enumerate(self._handles)
                    for p in self._n.nvmlDeviceGetComputeRunningProcesses(h)]
        except self._n.NVMLError as exc:
            raise GpuUnavailable(f"NVML cannot list the GPU's processes: {exc}") from None

    def free(self) -> dict[int, int]:
        try:
            return {i: int(self._n.nvmlDeviceGetMemoryInfo(h).free) for i, h in enumerate(self._handles)}
        except self._n.NVMLError as exc:
            raise GpuUnavailable(f"NVML cannot read the GPU's free memory: {exc}") from None
