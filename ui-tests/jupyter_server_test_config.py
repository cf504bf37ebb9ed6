"""The Jupyter server the browser tests run against (started by Playwright's webServer).

Galata's helper gives a token-less server rooted in a temporary folder; the extension's checkpoints
and state go to temporary folders too, so tests never touch ~/.local/share/jupyter.
"""
import os
from tempfile import mkdtemp

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821

c.ServerApp.port = int(os.environ.get("GKEWS_UI_PORT", "8917"))  # noqa: F821  (not 8888: `make lab` may hold it)
c.ServerApp.allow_root = True  # noqa: F821  (CI runs as root)
c.ServerApp.jpserver_extensions = {"jupyter_gkews": True}  # noqa: F821
c.GkewsApp.checkpoint_root = mkdtemp(prefix="gkews-ui-checkpoints-")  # noqa: F821
c.GkewsApp.state_dir = mkdtemp(prefix="gkews-ui-state-")  # noqa: F821
# A cell left running at Pause is interrupted (when the user chose to) after this many seconds, not 60 (a cell may run longer while the pause waits).
c.GkewsApp.busy_timeout = 8.0  # noqa: F821
