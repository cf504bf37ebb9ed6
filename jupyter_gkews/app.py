"""The jupyter-gkews server extension application."""

from __future__ import annotations

import os

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, Int, Type, Unicode, default

from .backends import Backend, LocalBackend
from .bridge import KernelBridge
from .checkpoints import CheckpointCatalog
from .handlers import handlers
from .lifecycle import Lifecycle
from .state import StateStore

#: Environment variable through which kernels started by this server learn
#: where to keep their checkpoints (read by ``kernel_state``).
CHECKPOINT_ROOT_ENV = "GKEWS_CHECKPOINT_ROOT"


class GkewsApp(ExtensionApp):
    """Pause a GPU notebook session and resume it.

    Configure it in ``jupyter_server_config.py`` as ``c.GkewsApp.<trait>``; docs/configuration.md
    lists every setting.
    """

    name = "jupyter_gkews"
    description = "Pause a GPU notebook, release the accelerator, and resume it."

    checkpoint_root = Unicode(
        help=(
            "Directory that holds the application checkpoints of every "
            "notebook's kernel. It must outlive the Pod, so the default lives "
            "in the user's Jupyter data directory (on the home volume): "
            "<jupyter_data_dir>/gkews/checkpoints. Kernels started by this "
            "server receive it in the environment variable "
            f"{CHECKPOINT_ROOT_ENV}, unless that variable is already set."
        ),
    ).tag(config=True)

    state_dir = Unicode(
        help="Directory of the lifecycle's state (state.json) and event log (events.jsonl). Default: "
        "<jupyter_data_dir>/gkews/state, on the home volume, so a restarted server or Pod knows where it was.",
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
        help="Seconds one call into a kernel (checkpoint, verify, restore) may take before it is reported as failed.",
    )

    keep_last = Int(5, config=True, help="Checkpoints kept per notebook (the newest are kept; at least 1).")

    max_bytes = Int(
        0, config=True,
        help="Byte budget of the checkpoints of one notebook; 0 means no budget. The newest checkpoint "
        "is kept even when it alone is larger.",
    )

    @default("checkpoint_root")
    def _default_checkpoint_root(self) -> str:
        return os.path.join(jupyter_data_dir(), "gkews", "checkpoints")

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "gkews", "state")

    def initialize_settings(self) -> None:
        root = os.path.abspath(os.path.expanduser(self.checkpoint_root))
        self.settings["gkews_checkpoint_root"] = root
        # Kernels inherit the server's environment. An explicit setting made
        # by whoever started the server wins over our default.
        self._exported_root = CHECKPOINT_ROOT_ENV not in os.environ
        if self._exported_root:
            os.environ[CHECKPOINT_ROOT_ENV] = root
        self.log.info(
            "jupyter_gkews: checkpoint root %s (kernels see %s=%s)",
            root,
            CHECKPOINT_ROOT_ENV,
            os.environ[CHECKPOINT_ROOT_ENV],
        )
        if getattr(self.serverapp, "kernel_manager", None) is None:  # constructed alone (tests of the settings)
            return
        backend = self.backend_class(parent=self)
        backend.bind(self.serverapp)
        self.lifecycle = Lifecycle(
            serverapp=self.serverapp, backend=backend,
            bridge=KernelBridge(self.serverapp.kernel_manager, self.kernel_call_timeout, self.log),
            store=StateStore(self.state_dir), checkpoint_root=os.environ[CHECKPOINT_ROOT_ENV],
            busy_timeout=self.busy_timeout, keep_last=self.keep_last, max_bytes=self.max_bytes, log=self.log)
        self.lifecycle.load()  # before the server answers requests: nobody sees a half-recovered state
        self.settings.update(gkews_lifecycle=self.lifecycle, gkews_catalog=CheckpointCatalog(os.environ[CHECKPOINT_ROOT_ENV]))

    def initialize_handlers(self) -> None:
        self.handlers.extend(handlers(""))

    async def _start_jupyter_server_extension(self, serverapp) -> None:
        await self.lifecycle.recover()
        self.log.info("jupyter_gkews: %s backend, state %s", self.lifecycle.backend.name,
                      self.lifecycle.state["state"])

    async def stop_extension(self) -> None:
        lifecycle = getattr(self, "lifecycle", None)
        if lifecycle is not None:
            await lifecycle.shutdown()
        if getattr(self, "_exported_root", False):  # leave the environment as we found it
            os.environ.pop(CHECKPOINT_ROOT_ENV, None)
