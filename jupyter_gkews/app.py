"""The jupyter-gkews server extension application."""

from __future__ import annotations

import os

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from traitlets import Unicode, default

#: Environment variable through which kernels started by this server learn
#: where to keep their checkpoints (read by ``kernel_state``).
CHECKPOINT_ROOT_ENV = "GKEWS_CHECKPOINT_ROOT"


class GkewsApp(ExtensionApp):
    """Pause a GPU notebook session and resume it.

    Configure it in ``jupyter_server_config.py`` as ``c.GkewsApp.<trait>``.
    The REST API, the lifecycle and the backends are added by later work.
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

    @default("checkpoint_root")
    def _default_checkpoint_root(self) -> str:
        return os.path.join(jupyter_data_dir(), "gkews", "checkpoints")

    def initialize_settings(self) -> None:
        root = os.path.abspath(os.path.expanduser(self.checkpoint_root))
        self.settings["gkews_checkpoint_root"] = root
        # Kernels inherit the server's environment. An explicit setting made
        # by whoever started the server wins over our default.
        if CHECKPOINT_ROOT_ENV not in os.environ:
            os.environ[CHECKPOINT_ROOT_ENV] = root
        self.log.info(
            "jupyter_gkews: checkpoint root %s (kernels see %s=%s)",
            root,
            CHECKPOINT_ROOT_ENV,
            os.environ[CHECKPOINT_ROOT_ENV],
        )
