"""Restarts and shutdowns asked of the server's kernels (REST, the page, a session deleted or given another
kernel), counted per kernel id as they begin.

A resume restores a notebook into a kernel and then lets it go: a restart or a shutdown asked meanwhile ends
the process that holds the restored state, and may finish only after the resume did. Comparing the count
before and after tells the resume so, where the kernel's process id would still be the old one.
"""
from __future__ import annotations

import asyncio
import functools
import inspect


class KernelChanges:
    def __init__(self, kernel_manager):
        self._count: dict[str, int] = {}
        self._under_way: dict[str, int] = {}  # kernel id -> its restarts and shutdowns not finished yet
        for name in ("restart_kernel", "shutdown_kernel"):
            setattr(kernel_manager, name, self._counting(getattr(kernel_manager, name)))

    def count(self, kernel_id: str) -> int:
        return self._count.get(kernel_id, 0)

    async def settled(self, kernel_ids: list[str], timeout: float = 120) -> None:
        """Until no restart or shutdown of these kernels is under way (at most timeout seconds): the pause's
        release shuts kernels down, and jupyter_client's shutdown of a kernel mid-restart fails."""
        deadline = asyncio.get_running_loop().time() + timeout
        while any(self._under_way.get(k) for k in kernel_ids) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)

    def _counting(self, method):
        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def counted(kernel_id, *args, **kwargs):
                self._count[kernel_id] = self.count(kernel_id) + 1
                self._under_way[kernel_id] = self._under_way.get(kernel_id, 0) + 1
                try:
                    return await method(kernel_id, *args, **kwargs)
                finally:
                    self._under_way[kernel_id] -= 1
        else:
            @functools.wraps(method)
            def counted(kernel_id, *args, **kwargs):
                self._count[kernel_id] = self.count(kernel_id) + 1
                return method(kernel_id, *args, **kwargs)
        return counted
