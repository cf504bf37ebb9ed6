"""The server's own settings, for commands that run beside it (report, cleanup).

A command reads the same jupyter_server_config files the server reads, so `c.GkewsApp.<trait>` set
there (state_dir, checkpoint_root, keep_last, ...) applies to it too, and `--GkewsApp.<trait>=...` on its
command line overrides it. Defaults come from the GkewsApp traits themselves, never from a copy.
"""
from __future__ import annotations

from jupyter_core.application import JupyterApp

from ..app import GkewsApp


class ServerConfigApp(JupyterApp):
    config_file_name = "jupyter_server_config"
    classes = [GkewsApp]

    def server_settings(self) -> GkewsApp:
        """A GkewsApp holding the configured settings (not started: no server, no kernels)."""
        return GkewsApp(parent=self)
