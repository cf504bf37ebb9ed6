"""The jupyter-gkews server extension application."""

from __future__ import annotations

import contextvars
import errno
import os
import posixpath
import re
import zlib

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Dict, Float, Int, TraitError, Type, Unicode, default, validate

from .backends import Backend, LocalBackend
from .backends.base import in_range
from .bridge import KernelBridge
from .checkpoints import CheckpointCatalog
from .cleanup import describe, run_cleanup
from .gpus import detect_gpu_count
from .idle import PROFILE_ENV, IdleWatcher, choose_profile, profile_from_environment
from .metrics import SESSION_STATE, UNAVAILABLE, MetricsRecorder
from .projects import project_dir, shared_dirs
from .renames import Renames
from .handlers import handlers, session_handlers
from .lifecycle import Lifecycle
from .lifecycle.paths import session_path
from .states import awaiting_resume
from .kernelchanges import KernelChanges
from .state import StateDirInUse, StateDirNotOurs, StateStore, damaged_events_note

#: Environment variable through which kernels started by this server learn
#: where to keep their checkpoints (read by ``kernel_state``).
CHECKPOINT_ROOT_ENV = "GKEWS_CHECKPOINT_ROOT"
CONTENTS_ROOT_ENV = "GKEWS_CONTENTS_ROOT"
#: ... and the name their checkpoints go under: their session's path (kernel_state.config.notebook_name)
NOTEBOOK_ENV = "GKEWS_NOTEBOOK"
#: Python salts str and bytes hashes per process, so a fresh kernel iterates a set of strings in another order
#: than the one that was paused (a vocabulary numbered from a set came out numbered otherwise): the kernels a
#: server starts share one seed per project folder, unless the server's environment sets one.
HASH_SEED_ENV = "PYTHONHASHSEED"

#: The contents service's events (jupyter_server): a rename moves a notebook's checkpoints, kernel and pause state.
CONTENTS_EVENTS = "https://events.jupyter.org/jupyter_server/contents_service/v1"

#: How every message about a setting that stops the extension ends (the 503 and the log name the setting first).
SETTINGS_FIX = "fix it in jupyter_server_config.py (or on the command line) and restart the server"
#: traitlets' words for a trait ("The 'keep_last' trait of a GkewsApp instance", "... of <x.GkewsApp object at
#: 0x..> instance") as a person writes the setting: c.GkewsApp.keep_last
_TRAIT_OF = re.compile(r"The '(\w+)' trait of (?:an? (\w+)|<[\w.]*?(\w+) object at 0x[0-9a-f]+>) instance")


def project_hash_seed(root: str) -> str:
    """PYTHONHASHSEED for the kernels of a project folder: the same for every server started on it (1 to 2**32-1;
    0 would turn the salting off)."""
    return str(zlib.crc32(os.path.realpath(root).encode()) or 1)


def bad_setting(exc: Exception) -> str:
    """A TraitError's message, naming the setting as c.<Class>.<name>."""
    return _TRAIT_OF.sub(lambda m: f"c.{m[2] or m[3]}.{m[1]}", str(exc)).rstrip(".")


def cannot_write(folder: str) -> OSError | None:
    """Why a folder (maybe not made yet) cannot be written, found without writing there; None when it can."""
    folder = probe = os.path.abspath(folder)
    while not os.path.lexists(probe):  # the folder it would be made in
        probe = os.path.dirname(probe)

    def error(kind, code):
        return kind(code, os.strerror(code) + ("" if probe == folder else f" at {probe}"), folder)
    if not os.path.isdir(probe):
        return error(NotADirectoryError, errno.ENOTDIR)
    if os.statvfs(probe).f_flag & os.ST_RDONLY:
        return error(OSError, errno.EROFS)
    if not os.access(probe, os.W_OK | os.X_OK):
        return error(PermissionError, errno.EACCES)
    return None


#: the type of the session whose kernel is being started (get_kernel_env is not given it)
_STARTING_TYPE: contextvars.ContextVar = contextvars.ContextVar("gkews_starting_session_type", default=None)
#: JupyterLab starts a session at <folder>/<uuid4>, and moves it to the notebook's path once its kernel is up
_PLACEHOLDER = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def kernel_notebook_path(path: str, name: str | None, session_type: str | None) -> str:
    """The notebook a kernel saves under: its session's path, except a notebook session JupyterLab starts at
    its placeholder path (<folder>/<uuid4>), whose notebook is <folder>/<name>: the kernel saved its own
    checkpoints (the magic, kernel undo) under the placeholder, which no list, restore or resume knows."""
    folder, last = posixpath.split(path)
    if session_type == "notebook" and name and "/" not in name and _PLACEHOLDER.fullmatch(last):
        return posixpath.join(folder, name)
    return path


class GkewsApp(ExtensionApp):
    """Pause a GPU notebook session and resume it.

    Configure it in ``jupyter_server_config.py`` as ``c.GkewsApp.<trait>``; docs/configuration.md
    lists every setting.
    """

    name = "jupyter_gkews"
    description = "Pause a GPU notebook, release the accelerator, and resume it."

    # None, not "", before the default is computed: traitlets cross-validates only a change, and "" must be refused
    checkpoint_root = Unicode(
        None, allow_none=True,
        help=(
            "Directory that holds the application checkpoints of every "
            "notebook's kernel. It must outlive the Pod, so the default lives "
            "in the user's Jupyter data directory (on the home volume), one per "
            "project folder (the server's root_dir): "
            "<jupyter_data_dir>/gkews/projects/<folder>-<hash>/checkpoints. Kernels "
            "started by this server receive it in the environment variable "
            f"{CHECKPOINT_ROOT_ENV}, unless that variable is already set."
        ),
    ).tag(config=True)

    state_dir = Unicode(
        None, allow_none=True,
        help="Directory of the lifecycle's state (state.json) and event log (events.jsonl). Default: "
        "<jupyter_data_dir>/gkews/projects/<folder>-<hash>/state, one per project folder (the server's "
        "root_dir), on the home volume, so a restarted server or Pod knows where it was.",
    ).tag(config=True)

    backend_class = Type(
        default_value=LocalBackend, klass=Backend, config=True,
        help="How the environment is snapshotted, released and brought back. The default, "
        "jupyter_gkews.backends.LocalBackend, needs no cluster: pause shuts the kernels down after "
        "their checkpoints, resume starts them again and restores them.",
    )

    busy_timeout = Float(
        60.0, config=True,
        help="Seconds a pause waits for a kernel that is running a cell. After that the notebook is "
        "reported busy and left running (never interrupted silently), unless the pause request asks "
        "to interrupt it.",
    )

    kernel_call_timeout = Float(
        1800.0, config=True,
        help="Seconds one call into a kernel (checkpoint, verify, restore) may take before it is reported as "
        "failed, and the longest a checkpointed kernel is held during a pause. A kernel that dies ends its call "
        "within seconds, whatever this says.",
    )

    keep_last = Int(5, config=True, help="Checkpoints kept per notebook (the newest are kept; at least 1).")

    max_bytes = Int(
        0, config=True,
        help="Byte budget of the checkpoints of one notebook; 0 means no budget. The newest checkpoint "
        "is kept even when it alone is larger.",
    )

    # -- operations: idle policy, GPU accounting, cleanup ---------------------------------------------
    idle_profile = Unicode(
        config=True,
        help=f"The workload profile of the idle policy: interactive (60 min, snapshot), training (180 min), "
        f"scripted (15 min, checkpoint only), off, or one defined in idle_profiles. Default: the environment "
        f"variable {PROFILE_ENV} (a Workspace's pod config sets it), else interactive.",
    )

    idle_profiles = Dict(
        config=True,
        help="Profiles to add or change: {name: {field: value}}, fields idle_minutes, snapshot, busy_blocks, "
        "min_running_minutes, connected_keeps_active (see docs/operations.md).",
    )

    idle_check_interval = Float(30.0, config=True, help="Seconds between two looks of the idle policy.")

    gpu_count = Int(
        config=True,
        help="GPUs this session holds while it runs; paused hours times this are the GPU hours released. "
        "Default: counted from CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES, else `nvidia-smi -L`, else 0.",
    )

    cleanup_interval = Float(
        6 * 3600.0, config=True,
        help="Seconds between two runs of the checkpoint and snapshot cleanup inside the server; 0: never "
        "(then run `jupyter gkews cleanup`).",
    )

    max_age_days = Float(
        0.0, config=True,
        help="Checkpoints older than this many days are removed by the cleanup (the newest complete one of "
        "each notebook never is); 0: no age limit.",
    )

    # -- what each setting accepts: refused when the server starts (a 503 naming it), not at first use --------
    @validate("keep_last")
    def _at_least_one(self, proposal):
        return in_range(proposal, 1)

    @validate("busy_timeout", "gpu_count")
    def _at_least_zero(self, proposal):
        return in_range(proposal, 0)

    @validate("kernel_call_timeout")
    def _more_than_zero(self, proposal):
        return in_range(proposal, 0, strict=True)

    @validate("idle_check_interval")
    def _a_tenth_of_a_second_or_more(self, proposal):
        return in_range(proposal, 0.1)  # 1e-9 was taken, and the checks kept a CPU core busy

    @validate("max_bytes", "max_age_days", "cleanup_interval")  # a negative age: every checkpoint but the newest "old"
    def _zero_or_more(self, proposal):
        zero = {"max_bytes": "no budget", "max_age_days": "no age limit", "cleanup_interval": "never"}
        return in_range(proposal, 0, zero=zero[proposal["trait"].name])

    @validate("checkpoint_root", "state_dir")
    def _a_directory(self, proposal) -> str:
        name = proposal["trait"].name
        if not (proposal["value"] or "").strip():  # os.path.abspath("") is the server's working directory
            raise TraitError(f"c.GkewsApp.{name} is empty: give a directory, or remove the setting to use the "
                             f"default {getattr(self, '_default_' + name)()}")
        return proposal["value"]

    @default("idle_profile")
    def _default_idle_profile(self) -> str:
        return profile_from_environment()

    @default("gpu_count")
    def _default_gpu_count(self) -> int:
        return detect_gpu_count()

    async def cleanup(self, dry_run: bool = False) -> dict:
        """The same cleanup as `jupyter gkews cleanup`, with this server's settings and backend."""
        lifecycle = getattr(self, "lifecycle", None)
        return await run_cleanup(
            lifecycle.checkpoint_root if lifecycle is not None else os.path.expanduser(self.checkpoint_root),
            lifecycle.backend if lifecycle is not None else None, keep_last=self.keep_last,
            max_bytes=self.max_bytes, max_age_days=self.max_age_days, dry_run=dry_run)

    def _start_operations(self) -> None:
        try:
            name, profile = choose_profile(self.idle_profile, self.idle_profiles)
        except ValueError as exc:  # never pause on a guess: say what is wrong and leave the session alone
            self.log.error("jupyter_gkews: the idle policy is off: %s", exc)
            name, profile = choose_profile("off", {})
        self.idle_watcher = IdleWatcher(lifecycle=self.lifecycle, serverapp=self.serverapp, name=name,
                                        profile=profile, interval=self.idle_check_interval, log=self.log)
        self.idle_watcher.start()
        self.log.info("jupyter_gkews: idle profile %s %s", name, profile.as_dict())

        async def cleanup():
            self.log.info("jupyter_gkews: cleanup: %s", describe(await self.cleanup()).splitlines()[-1])
        if self.cleanup_interval > 0:  # 0: never
            self.periodic_cleanup = PeriodicCallback(cleanup, self.cleanup_interval * 1000)
            self.periodic_cleanup.start()

    def _stop_operations(self) -> None:
        for part in ("idle_watcher", "periodic_cleanup"):
            if getattr(self, part, None) is not None:
                getattr(self, part).stop()

    @default("checkpoint_root")
    def _default_checkpoint_root(self) -> str:
        return os.path.join(project_dir(self.contents_root()), "checkpoints")

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return os.path.join(project_dir(self.contents_root()), "state")

    def contents_root(self) -> str:
        """The project folder the defaults above belong to (projects.py): the server's root_dir, as its
        configuration sets it, else the folder the server (or a command beside it) runs in, where
        `jupyter lab` serves. (A command's serverapp is an unconfigured stand-in: the configuration first.)"""
        configured = (self.config.get("ServerApp") or {}).get("root_dir")
        if configured:
            return os.path.abspath(os.path.expanduser(configured))
        return self.serverapp.root_dir if self.serverapp is not None else os.getcwd()

    def _note_shared_dirs(self) -> None:
        """Earlier versions kept every project folder's state and checkpoints in one place: a pause made
        before the upgrade is there, and this server (on its own folder's directories) does not see it."""
        configured = self.config.get("GkewsApp") or {}
        if "state_dir" in configured or "checkpoint_root" in configured or CHECKPOINT_ROOT_ENV in os.environ:
            return
        for shared in shared_dirs():
            setting = "state_dir" if os.path.basename(shared) == "state" else "checkpoint_root"
            self.log.warning("jupyter_gkews: %s holds what an earlier version kept there for every project folder; "
                             "this server keeps %s's in %s. To use that one instead (to resume a pause made "
                             "before the upgrade), set c.GkewsApp.%s = %r", shared, self.contents_root(),
                             getattr(self, setting), setting, shared)

    #: why the settings cannot be used (set by _link_jupyter_server_extension or initialize_settings)
    _bad_setting: str | None = None

    def _link_jupyter_server_extension(self, serverapp) -> None:
        """Read the settings. One bad value makes traitlets put EVERY setting of that configuration back to the
        trait's static default (state_dir '': the working directory; the local backend on GKE), and
        jupyter_server then loads the extension anyway: remember why, so that initialize_settings turns it
        off instead of acting on those defaults."""
        try:
            super()._link_jupyter_server_extension(serverapp)
        except Exception as exc:
            if serverapp.reraise_server_extension_failures:
                raise
            self.serverapp = serverapp
            self._bad_setting = bad_setting(exc)

    def initialize_settings(self) -> None:
        if self._bad_setting is None:
            try:
                backend = self.backend_class(parent=self)  # reads c.<Backend>.<setting>: a bad one stops here
            except TraitError as exc:
                self._bad_setting = bad_setting(exc)
        if self._bad_setting is not None:  # before anything is exported, claimed or written
            self._unavailable(f"a setting cannot be used: {self._bad_setting}; {SETTINGS_FIX}")
            return
        self._note_shared_dirs()
        configured = os.path.abspath(os.path.expanduser(self.checkpoint_root))
        # Kernels inherit the server's environment. An explicit setting made
        # by whoever started the server wins over our default.
        self._exported_root = CHECKPOINT_ROOT_ENV not in os.environ
        if self._exported_root:
            os.environ[CHECKPOINT_ROOT_ENV] = configured
            self.log.info("jupyter_gkews: checkpoint root %s (kernels see %s=%s)", configured, CHECKPOINT_ROOT_ENV,
                          configured)
        else:  # the root the server and its kernels use is that one: say so, not the unused setting
            self.log.info("jupyter_gkews: checkpoint root %s, from $%s set when the server started (it wins over "
                          "c.GkewsApp.checkpoint_root, %s)", os.environ[CHECKPOINT_ROOT_ENV], CHECKPOINT_ROOT_ENV,
                          configured)
        self.settings["gkews_checkpoint_root"] = os.environ[CHECKPOINT_ROOT_ENV]
        # One notebook name for kernels and server: kernel_state turns the absolute path a kernel is given
        # (JPY_SESSION_NAME) into the path relative to the root our REST API uses (kernel_state.config).
        kernels = getattr(self.serverapp, "kernel_manager", None)
        os.environ[CONTENTS_ROOT_ENV] = getattr(kernels, "root_dir", None) or self.serverapp.root_dir
        if getattr(self.serverapp, "kernel_manager", None) is None:  # constructed alone (tests of the settings)
            return
        self._name_kernels_by_session_path()
        backend.bind(self.serverapp)
        store = StateStore(self.state_dir)
        self.lifecycle = Lifecycle(
            serverapp=self.serverapp, backend=backend,
            bridge=KernelBridge(self.serverapp.kernel_manager, self.kernel_call_timeout, self.log),
            store=store, checkpoint_root=os.environ[CHECKPOINT_ROOT_ENV],
            busy_timeout=self.busy_timeout, keep_last=self.keep_last, max_bytes=self.max_bytes, log=self.log,
            gpu_count=self.gpu_count, kernel_changes=KernelChanges(self.serverapp.kernel_manager))
        self.lifecycle.listeners.append(
            MetricsRecorder(self.gpu_count, earlier_events=lambda: store.events(limit=100_000)))
        try:
            store.claim()  # one server per state directory
            self.lifecycle.load()  # before the server answers requests: nobody sees a half-recovered state
            damaged = store.read_events(limit=1)[1]
            if damaged:
                self.log.warning("jupyter_gkews: %s", damaged_events_note(store.events_path, damaged))
            cannot = cannot_write(os.environ[CHECKPOINT_ROOT_ENV])
            if cannot is not None:
                if not any(awaiting_resume(nb) for nb in self.lifecycle.state["notebooks"]):
                    raise cannot  # every pause would fail after waiting for the kernels: say it now
                # a paused notebook's checkpoint can still be read back: the resume goes on, the next pause fails
                self.log.error("jupyter_gkews: %s", self._unwritable(store, cannot))
        except (OSError, StateDirInUse, StateDirNotOurs) as exc:
            store.release_claim()
            self._unavailable(self._unwritable(store, exc) if isinstance(exc, OSError) else str(exc))
            return
        except Exception as exc:  # a state no check foresaw (a hand edit, a bug): off with the reason, never 404
            store.release_claim()
            self.log.exception("jupyter_gkews: the state in %s could not be loaded", store.directory)
            self._unavailable(
                f"the state in {store.directory} could not be loaded ({type(exc).__name__}: {exc}; the server log "
                f"has the details). Put back what was changed in {store.state_path}, or move that directory aside "
                f"to start afresh: the checkpoints stay in {os.environ[CHECKPOINT_ROOT_ENV]}, and "
                f"`%gkews_checkpoint restore` brings a notebook's back")
            return
        SESSION_STATE.state(str(self.lifecycle.state["state"]))  # before any event: the state it starts in
        self.settings.update(gkews_lifecycle=self.lifecycle,
                             gkews_catalog=CheckpointCatalog(os.environ[CHECKPOINT_ROOT_ENV]))
        self.renames = Renames(serverapp=self.serverapp, bridge=self.lifecycle.bridge,
                               checkpoint_root=os.environ[CHECKPOINT_ROOT_ENV], timeout=self.kernel_call_timeout,
                               log=self.log, notebooks=lambda: self.lifecycle.state["notebooks"])
        self.settings["gkews_renames"] = self.renames
        if getattr(self.serverapp, "event_logger", None) is not None:
            self.serverapp.event_logger.add_listener(schema_id=CONTENTS_EVENTS, listener=self._contents_changed)

    def _name_kernels_by_session_path(self) -> None:
        """A kernel saves under its session's path, the name the server pauses and lists it under. jupyter_server
        gives it only <folder>/<session name> (JPY_SESSION_NAME): "Console 1" for every first console of a page
        load, whose checkpoints then mixed with each other's. kernel_state reads NOTEBOOK_ENV first."""
        sm = self.serverapp.session_manager
        plain = sm.get_kernel_env
        seed = project_hash_seed(os.environ[CONTENTS_ROOT_ENV])

        plain_start = sm.start_kernel_for_session

        def get_kernel_env(path, name=None):
            env = plain(path, name)
            if path:
                env[NOTEBOOK_ENV] = session_path(kernel_notebook_path(path, name, _STARTING_TYPE.get()))
            env.setdefault(HASH_SEED_ENV, seed)  # a kernel the resume starts hashes as the paused one did
            return env

        async def start_kernel_for_session(*args, **kwargs):
            started = _STARTING_TYPE.set(kwargs.get("type", args[3] if len(args) > 3 else None))
            try:
                return await plain_start(*args, **kwargs)
            finally:
                _STARTING_TYPE.reset(started)
        sm.get_kernel_env, sm.start_kernel_for_session = get_kernel_env, start_kernel_for_session

    def _unwritable(self, store: StateStore, exc: OSError) -> str:
        """Which directory could not be written (the state directory, or the checkpoint root, which holds the
        pins), why, and the fix."""
        root = os.path.abspath(self.lifecycle.checkpoint_root)
        failed = exc.filename if isinstance(exc.filename, str) else ""

        def under(folder: str) -> bool:
            return (os.path.abspath(failed) + os.sep).startswith(os.path.abspath(folder) + os.sep)
        if failed and under(root) and not under(store.directory):  # the pins (state_dir may be inside the root)
            what = f"the checkpoint root {root}"
            setting = ("c.GkewsApp.checkpoint_root" if self._exported_root else
                       f"${CHECKPOINT_ROOT_ENV} (set when the server started: it wins over c.GkewsApp.checkpoint_root)")
        else:
            what = f"the state directory {store.directory}"
            setting = "c.GkewsApp.state_dir (and checkpoint_root, which holds the pins)"
        return (f"{what} cannot be written ({exc.strerror or exc}{': ' + failed if failed else ''}); fix it (free "
                f"space, permissions) or point {setting} at a writable directory, then restart the server")

    def _unavailable(self, why: str) -> None:
        """Pause and resume are off: say so loudly, and let every route answer 503 with the reason."""
        message = f"jupyter-gkews is off: pause and resume are unavailable: {why}"
        self.log.critical("jupyter_gkews: %s", message)
        SESSION_STATE.state(UNAVAILABLE)  # /metrics still answers: it must not say "active"
        self.lifecycle = None
        self.settings["gkews_unavailable"] = message

    def initialize_handlers(self) -> None:
        self.handlers.extend(handlers("") + session_handlers(""))

    async def _start_jupyter_server_extension(self, serverapp) -> None:
        if getattr(self, "lifecycle", None) is None:
            return  # _unavailable said why (or constructed alone)
        await self.lifecycle.recover()
        self._start_operations()
        self.log.info("jupyter_gkews: %s backend, state %s", self.lifecycle.backend.name,
                      self.lifecycle.state["state"])

    async def _contents_changed(self, logger, schema_id: str, data: dict) -> None:
        """A rename: the notebook's sessions, its checkpoints, and the name its kernel saves under (now and
        after a restart) follow it (renames.py), also when no client moves the session; a paused notebook
        resumes at its new path (Lifecycle.notebook_renamed). A delete: a paused notebook
        is lost, whatever is created at its path later (Lifecycle.notebook_deleted)."""
        if getattr(self, "lifecycle", None) is None:
            return
        if data.get("action") == "rename":
            old, new = data["source_path"].strip("/"), data["path"].strip("/")
            self.renames.renamed(old, new)  # first, before any await: renames are followed in their order
            await self.lifecycle.notebook_renamed(old, new)
        elif data.get("action") == "delete":
            await self.lifecycle.notebook_deleted(data["path"].strip("/"))

    async def stop_extension(self) -> None:
        self._stop_operations()
        if getattr(self, "renames", None) is not None:
            self.renames.stop()
        lifecycle = getattr(self, "lifecycle", None)
        if lifecycle is not None:
            await lifecycle.backend.server_stopping(lifecycle)  # before the server shuts its kernels down
            await lifecycle.shutdown()
            lifecycle.store.release_claim()
        if getattr(self, "_exported_root", False):  # leave the environment as we found it
            os.environ.pop(CHECKPOINT_ROOT_ENV, None)
        os.environ.pop(CONTENTS_ROOT_ENV, None)
