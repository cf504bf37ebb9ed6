"""The idle policy: pause a session nobody has used for a while, with settings that fit the kind of work.

A workload profile says how long a session may sit idle, whether its pause takes a snapshot or only the
application checkpoint, whether a kernel running a cell holds the session (default: yes, so a long
training run is never paused by the policy), and how long a session runs at least before the policy may
pause it. The profile is chosen by name (c.GkewsApp.idle_profile, or GKEWS_PROFILE in the environment,
which is how a Workspace's pod config picks it).

Activity is the users' own: cells run in their kernels, terminals they type in, and notebooks they open
(a new websocket connection). The extension's own calls into kernels never count: the bridge puts the
kernels' last_activity back after each of them. An auto-pause is an ordinary pause of the lifecycle,
with "reason": "idle policy" in its event.
"""
from __future__ import annotations

import math
import os
import time

from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Float, HasTraits, TraitError

from .errors import Conflict
from .states import PauseReason, State, awaiting_resume

PROFILE_ENV = "GKEWS_PROFILE"
DEFAULT_PROFILE = "interactive"


class WorkloadProfile(HasTraits):
    idle_minutes = Float(60.0, help="Minutes without user activity before the session is paused; 0: never.")
    snapshot = Bool(True, help="Take a snapshot (where the backend has one) as well as the checkpoints; "
                               "False: the application checkpoint only.")
    busy_blocks = Bool(True, help="A kernel running a cell keeps the session from being paused by the policy.")
    min_running_minutes = Float(0.0, help="Minutes a session runs at least (since the server started or the "
                                          "last resume) before the policy may pause it.")
    connected_keeps_active = Bool(False, help="A notebook open in a browser keeps the session active, as "
                                              "jupyter_server's cull_connected=False does. Off by default: a "
                                              "tab left open overnight is the case this policy exists for.")

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.trait_names()}


#: The built-in profiles; c.GkewsApp.idle_profiles adds to them or changes them.
BUILTIN_PROFILES = {
    # a long session whose model loads slowly: keep its memory (snapshot) between turns
    "interactive": {"idle_minutes": 60.0, "snapshot": True, "busy_blocks": True, "min_running_minutes": 10.0},
    # a long training run: only a really abandoned session is paused
    "training": {"idle_minutes": 180.0, "snapshot": True, "busy_blocks": True, "min_running_minutes": 30.0},
    # a short scripted experiment: files and a checkpoint are enough, a clean restart is fine
    "scripted": {"idle_minutes": 15.0, "snapshot": False, "busy_blocks": True, "min_running_minutes": 0.0},
    # a small CPU notebook, or a session a person manages by hand
    "off": {"idle_minutes": 0.0},
}


def choose_profile(name: str, overrides: dict) -> tuple[str, WorkloadProfile]:
    """The named profile: a built-in one with the configured overrides, or one defined only in overrides.
    Raises ValueError naming the known profiles or the accepted fields."""
    profiles = {k: dict(v) for k, v in BUILTIN_PROFILES.items()}
    for pname, fields in overrides.items():
        if not isinstance(fields, dict):
            raise ValueError(f"c.GkewsApp.idle_profiles[{pname!r}] must be a dict of fields, e.g. "
                             f"{{'idle_minutes': 30}}")
        profiles.setdefault(pname, {}).update(fields)
    if name not in profiles:
        raise ValueError(f"unknown idle profile {name!r} (from c.GkewsApp.idle_profile or {PROFILE_ENV}); "
                         f"known: {', '.join(sorted(profiles))}. Pick one of them or define it in "
                         f"c.GkewsApp.idle_profiles")
    fields = profiles[name]
    accepted = set(WorkloadProfile.class_trait_names())
    unknown = set(fields) - accepted
    if unknown:
        raise ValueError(f"idle profile {name!r} has unknown field(s) {', '.join(sorted(unknown))}; "
                         f"accepted: {', '.join(sorted(accepted))}")
    for field, value in fields.items():
        _check_field_type(name, field, value)
    try:
        profile = WorkloadProfile(**fields)
    except TraitError as exc:
        raise ValueError(f"idle profile {name!r}: {exc}") from None
    for field in ("idle_minutes", "min_running_minutes"):
        value = getattr(profile, field)
        if not (math.isfinite(value) and value >= 0):  # nan passes no comparison, so `value < 0` let it through
            raise ValueError(f"idle profile {name!r}: {field} must be 0 or more, and finite (got {value!r})")
    return name, profile


def _check_field_type(profile: str, field: str, value) -> None:
    """A field of the wrong type, named with the type it takes and where to change it (traitlets' own message
    names neither the setting nor an example)."""
    is_bool = isinstance(value, bool)
    if isinstance(WorkloadProfile.class_traits()[field], Bool):
        if not is_bool:
            raise ValueError(f"idle profile {profile!r}: {field} must be True or False (got {value!r}); "
                             f"set it in c.GkewsApp.idle_profiles[{profile!r}], e.g. {{{field!r}: False}}")
    elif is_bool or not isinstance(value, (int, float)):
        raise ValueError(f"idle profile {profile!r}: {field} must be a number of minutes (got {value!r}); "
                         f"set it in c.GkewsApp.idle_profiles[{profile!r}], e.g. {{{field!r}: 30}}")


def _stamp(dt) -> float | None:
    return dt.timestamp() if dt is not None else None


class IdleWatcher:
    """Looks at the users' activity every `interval` seconds and asks the lifecycle to pause when the
    profile says the session has been idle long enough."""

    def __init__(self, *, lifecycle, serverapp, name: str, profile: WorkloadProfile, interval: float, log=None):
        self.lifecycle, self.serverapp, self.log = lifecycle, serverapp, log
        self.name, self.profile, self.interval = name, profile, interval
        self.started = time.time()
        self._connections: dict[str, int] = {}
        self._connection_activity = self.started
        self._periodic: PeriodicCallback | None = None
        self._notice_connects()

    # -- what the users did ---------------------------------------------------------------------------
    def _user_kernels(self) -> list:
        km = self.serverapp.kernel_manager
        return [km.get_kernel(kid) for kid in km.list_kernel_ids()]

    def _terminals(self) -> list:
        manager = self.serverapp.web_app.settings.get("terminal_manager")
        return list(getattr(manager, "terminals", {}).values()) if manager is not None else []

    def _notice_connects(self) -> None:
        """Every websocket opened to a kernel is activity, as it opens: a page reloaded between two checks
        closes one and opens one, and the count compared below stays the same."""
        km = getattr(self.serverapp, "kernel_manager", None)
        notify = getattr(km, "notify_connect", None)
        if notify is None:
            return

        def notify_connect(kernel_id, *args, **kwargs):
            self._connection_activity = time.time()
            return notify(kernel_id, *args, **kwargs)
        km.notify_connect = notify_connect

    def _watch_connections(self, now: float) -> int:
        """A notebook connecting (a new websocket) is activity; returns how many are connected."""
        km = self.serverapp.kernel_manager
        counts = {kid: km.kernel_model(kid).get("connections", 0) for kid in km.list_kernel_ids()}
        if any(n > self._connections.get(kid, 0) for kid, n in counts.items()):
            self._connection_activity = now
        self._connections = counts
        return sum(counts.values())

    def last_activity(self, now: float | None = None) -> float:
        """The newest moment a user did something: a cell, a terminal, a notebook connecting, a resume."""
        now = time.time() if now is None else now
        self._watch_connections(now)
        times = [self.started, self._connection_activity]
        times += [_stamp(getattr(k, "last_activity", None)) or 0 for k in self._user_kernels()]
        times += [_stamp(getattr(t, "last_activity", None)) or 0 for t in self._terminals()]
        timeline = self.lifecycle.state.get("timeline") or {}
        times.append(timeline.get("resume_requested") or 0)  # asking for a resume is a user's act
        return max(times)

    def verdict(self, now: float | None = None) -> tuple[bool, str]:
        """(pause now?, why or why not): what the next check would do, in words."""
        now = time.time() if now is None else now
        p = self.profile
        if p.idle_minutes <= 0:
            return False, f"profile {self.name!r} never pauses"
        state = self.lifecycle.state
        # a pause that failed releasing nothing (every kernel was busy: busy_blocks False) left the session
        # running as it was: the policy comes back once it is idle, or the GPU would stay held for good
        runs_on = state["state"] == State.FAILED and not any(awaiting_resume(nb) for nb in state["notebooks"])
        if (state["state"] != State.ACTIVE and not runs_on) or self.lifecycle.busy:
            return False, f"the session is {state['state']}"
        kernels = self._user_kernels()
        if not kernels:
            return False, "no kernel is running"
        busy = any(getattr(k, "execution_state", "") == "busy" for k in kernels)
        if runs_on and busy:
            return False, "the last pause failed and a kernel is still running a cell"
        if p.busy_blocks and busy:
            return False, "a kernel is running a cell"
        connected = self._watch_connections(now)
        if p.connected_keeps_active and connected:
            return False, f"{connected} notebook connection(s) open"
        running_since = max(self.started, (state.get("timeline") or {}).get("restore_done") or 0)
        if now - running_since < p.min_running_minutes * 60:
            return False, f"running for less than {p.min_running_minutes:g} min"
        idle = now - self.last_activity(now)
        if idle < p.idle_minutes * 60:
            return False, f"idle for {idle:.0f} s of {p.idle_minutes * 60:.0f} s"
        return True, f"idle for {idle:.0f} s (profile {self.name!r}: {p.idle_minutes:g} min)"

    # -- the loop -------------------------------------------------------------------------------------
    async def check(self) -> bool:
        """One look; True when it started a pause."""
        now = time.time()
        due, why = self.verdict(now)
        if not due:
            return False
        if self.log:
            self.log.info("jupyter_gkews: idle policy pauses the session: %s", why)
        try:
            await self.lifecycle.request_pause(reason=PauseReason.IDLE_POLICY, snapshot=self.profile.snapshot,
                                               last_activity=round(self.last_activity(now), 3))
        except Conflict as exc:  # a person's pause or resume got there first, or nothing runs
            if self.log:
                self.log.info("jupyter_gkews: idle policy did not pause: %s", exc)
            return False
        return True

    def start(self) -> None:
        """Watch for as long as the server runs (a profile that never pauses does not watch)."""
        if self.profile.idle_minutes > 0 and self.interval > 0:
            self._periodic = PeriodicCallback(self.check, self.interval * 1000)  # awaits each check; logs errors
            self._periodic.start()

    def stop(self) -> None:
        if self._periodic is not None:
            self._periodic.stop()


def profile_from_environment(default: str = DEFAULT_PROFILE) -> str:
    return os.environ.get(PROFILE_ENV) or default
