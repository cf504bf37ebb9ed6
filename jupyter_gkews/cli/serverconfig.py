"""The server's own settings, for commands that run beside it (report, cleanup).

A command reads the same jupyter_server_config files the server reads, so `c.GkewsApp.<trait>` set
there (state_dir, checkpoint_root, keep_last, ...) applies to it too, and `--GkewsApp.<trait>=...` on its
command line overrides it. Defaults come from the GkewsApp traits themselves, never from a copy.
"""
from __future__ import annotations

import os
import sys

from traitlets import TraitError

from ..app import CHECKPOINT_ROOT_ENV, GkewsApp, bad_setting
from ..backends import LocalBackend
from .strict import StrictApp

#: how to name the store, in the messages of a command that found none
ROOT_FIX = (f"run this command in the folder the server serves (by default each folder has its own store), or "
            f"give the server's with --checkpoint-root=DIR (the server uses ${CHECKPOINT_ROOT_ENV} when it was "
            f"started with it, else c.GkewsApp.checkpoint_root)")


class ServerConfigApp(StrictApp):
    config_file_name = "jupyter_server_config"
    classes = [GkewsApp]

    def settings_classes(self) -> list[type]:
        # and the backends' (c.LocalBackend.<setting>, c.GkeBackend.<setting>), which GkewsApp builds
        from ..backends.gke import GkeBackend
        return super().settings_classes() + [LocalBackend, GkeBackend]

    def server_settings(self) -> GkewsApp:
        """A GkewsApp holding the configured settings (not started: no server, no kernels). A setting of the
        wrong type or out of range ends the command with exit code 2 and the reason, not a traceback."""
        try:
            return GkewsApp(parent=self)
        except TraitError as exc:
            self._refuse(exc)

    def backend(self, settings: GkewsApp):
        """The configured backend, not bound to a server; a bad c.<Backend>.<setting> ends the command likewise."""
        try:
            return settings.backend_class(parent=settings)
        except TraitError as exc:
            self._refuse(exc)

    def _refuse(self, exc: TraitError) -> None:
        print(f"jupyter gkews {self.name.split('-')[-1]}: {bad_setting(exc)}; fix it on the command line or in "
              f"jupyter_server_config.py", file=sys.stderr)
        self.exit(2)

    def checkpoint_root(self, settings: GkewsApp) -> str:
        """The store the server uses: --checkpoint-root given to this command, else $GKEWS_CHECKPOINT_ROOT
        (which the server prefers over its configuration, app.py), else c.GkewsApp.checkpoint_root."""
        given = self.cli_config.get("GkewsApp", {}).get("checkpoint_root")
        root = given or os.environ.get(CHECKPOINT_ROOT_ENV) or settings.checkpoint_root
        return os.path.abspath(os.path.expanduser(root))
