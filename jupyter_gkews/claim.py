"""The claim of a transition: one pause, resume or recovery at a time.

    async with Claim(lifecycle, "pause", PAUSE_FROM) as claim:
        ...checks that may refuse (the claim is given back if they raise)...
        claim.hand_over()  # the transition continues in a background task, which releases it

The check and the taking happen synchronously, before the first await, so two requests arriving together
cannot both pass: exactly one gets it, the other gets Conflict. The holder is any object with a `state`
document and a `_busy` flag (Lifecycle), which only a Claim writes.

`release` is idempotent: a transition frees its claim the moment its last state is published (whoever reads
"paused" may resume at once), and the task that ran it releases it again when it ends, whatever happened;
only the first counts, so a late release never frees the claim a newer transition took meanwhile.
"""
from __future__ import annotations

from .errors import Conflict


class Claim:
    def __init__(self, holder, action: str, allowed):
        self.holder, self.action, self.allowed = holder, action, tuple(allowed)
        self._handed_over = False
        self._released = False

    def take(self) -> "Claim":
        state = self.holder.state
        if self.holder._busy:  # named by the claim that runs: the state may not show it yet (starting)
            running = getattr(self.holder, "_claimed_for", None) or f"{state['state']} transition"
            step = f"phase {state['phase']}" if state["phase"] else "it has just begun"  # no phase is shown yet
            refused = Conflict(f"cannot {self.action}: a {running} is running ({step}); wait for it to finish")
            refused.starting = not state["phase"]  # its first state is being written: the answer waits for it
            raise refused
        if state["state"] not in self.allowed:
            raise Conflict(f"cannot {self.action} while the session is {state['state']}")
        self.holder._busy = True
        self.holder._claimed_for = self.action.split()[0]  # pause, resume
        return self

    def hand_over(self) -> None:
        """Keep the claim past the `async with`: whoever continues the transition releases it."""
        self._handed_over = True

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.holder._busy = False

    async def __aenter__(self) -> "Claim":
        return self.take()  # no await before this: nothing can run between the check and the take

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None or not self._handed_over:
            self.release()
        return False
