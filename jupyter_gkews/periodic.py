"""One coroutine run every few seconds on the server's loop, for as long as the server runs."""
from __future__ import annotations

import asyncio


class Periodic:
    def __init__(self, action, interval: float, what: str, log=None):
        self.action, self.interval, self.what, self.log = action, interval, what, log
        self._task: asyncio.Task | None = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.action()
            except Exception:  # keep going next time, whatever this run met
                if self.log:
                    self.log.exception("jupyter_gkews: %s failed", self.what)

    def start(self) -> None:
        """Start (once); an interval of 0 or less means never."""
        if self.interval > 0 and self._task is None:
            self._task = asyncio.create_task(self._loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
