"""Restarts and shutdowns asked of the server's kernels (REST, the page, a session deleted or given another
kernel), counted per kernel id as they begin.

A resume restores a notebook into a kernel and then lets it go: a restart or a shutdown asked meanwhile ends
the process that holds the restored state, and may finish only after the resume did. Comparing the count
before and after tells the resume so, where the kernel's process id would still be the old one.
"""
from __future__ import annotations

import functools
import inspect


class KernelChanges:
    def __init__(self, kernel_manager):
        self._count: dict[str, int] = {}
        for name in ("restart_kernel", "shutdown_kernel"):
            setattr(kernel_manager, name, self._counting(getattr(kernel_manager, name)))

    def count(self, kernel_id: str) -> int:
        return self._count.get(kernel_id, 0)

    def _counting(self, method):
        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def counted(kernel_id, *args, **kwargs):
                self._count[kernel_id] = self.count(kernel_id) + 1
                return await method(kernel_id, *args, **kwargs)
        else:
            @functools.wraps(method)
            def counted(kernel_id, *args, **kwargs):
                self._count[kernel_id] = self.count(kernel_id) + 1
                return method(kernel_id, *args, **kwargs)
        return counted
