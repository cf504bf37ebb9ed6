"""Checks a user makes after installing jupyter-gkews into an environment.

They run against the installed environment (``make install`` / ``make test``):
the jupyter commands come from the same bin directory as ``sys.executable``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
JUPYTER = str(BIN / "jupyter")


def _run_jupyter(*args: str) -> str:
    env = dict(os.environ)
    # Make sure the environment's own tools come first, as they do for a user
    # who activated it.
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [JUPYTER, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"jupyter {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    # Both commands write their listing to stderr (through logging) in some
    # versions and to stdout in others.
    return proc.stdout + proc.stderr


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_server_extension_enabled_and_ok():
    out = _strip_ansi(_run_jupyter("server", "extension", "list"))
    assert re.search(r"jupyter_gkews\s+enabled", out), out
    # The validation line that follows: "- Validating jupyter_gkews..." then
    # "jupyter_gkews <version> OK".
    assert re.search(r"jupyter_gkews\s+\S+\s+OK", out), out


def test_labextension_enabled_and_ok():
    out = _strip_ansi(_run_jupyter("labextension", "list"))
    assert re.search(r"jupyter-gkews\s+v?\S+\s+enabled\s+OK", out), out


def test_ipython_kernel_config_is_shipped():
    """The wheel's shared data puts the kernel config where IPython reads it."""
    path = Path(sys.prefix) / "etc" / "ipython" / "ipython_kernel_config.json"
    assert path.is_file(), f"{path} is missing"
    config = json.loads(path.read_text())
    assert "kernel_state" in config["IPKernelApp"]["extensions"]
    # And IPython really searches that directory for kernel config files.
    from IPython.core.application import ENV_CONFIG_DIRS

    assert str(path.parent) in [os.path.abspath(p) for p in ENV_CONFIG_DIRS]


def test_server_config_enables_extension_on_install():
    path = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "jupyter_gkews.json"
    assert path.is_file(), f"{path} is missing"
    assert json.loads(path.read_text())["ServerApp"]["jpserver_extensions"]["jupyter_gkews"] is True


def test_extension_points():
    import jupyter_gkews
    from jupyter_gkews.app import GkewsApp

    assert jupyter_gkews.__version__ not in ("", "dev")
    assert jupyter_gkews._jupyter_server_extension_points() == [
        {"module": "jupyter_gkews", "app": GkewsApp}
    ]
    assert jupyter_gkews._jupyter_labextension_paths() == [
        {"src": "labextension", "dest": "jupyter-gkews"}
    ]
    labext = Path(jupyter_gkews.__file__).parent / "labextension"
    assert (labext / "package.json").is_file()
    assert (labext / "static" / "style.js").is_file()


@pytest.fixture(autouse=True)
def _restore_checkpoint_root_env(monkeypatch):
    """GkewsApp writes GKEWS_CHECKPOINT_ROOT into os.environ; undo it after each test
    so that no other test (kernel_state's) sees a value this module left behind."""
    monkeypatch.setenv("GKEWS_CHECKPOINT_ROOT", "placeholder")
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT")


@pytest.fixture
def jp_server_config(tmp_path_factory):
    root = tmp_path_factory.mktemp("gkews-checkpoints")
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gkews": True}},
        "GkewsApp": {"checkpoint_root": str(root)},
    }


def test_server_extension_loads(jp_serverapp, jp_server_config):
    from jupyter_gkews.app import GkewsApp

    manager = jp_serverapp.extension_manager
    ext = manager.extensions["jupyter_gkews"]
    assert ext.enabled
    assert manager.linked_extensions["jupyter_gkews"] is True
    point = ext.extension_points["jupyter_gkews"]
    assert point.linked
    assert isinstance(point.app, GkewsApp)
    # Loading the extension ran initialize_settings, which published its settings.
    assert point.app.checkpoint_root == jp_server_config["GkewsApp"]["checkpoint_root"]
    assert jp_serverapp.web_app.settings["gkews_checkpoint_root"] == os.path.abspath(
        jp_server_config["GkewsApp"]["checkpoint_root"]
    )
    # Kernels started by this server inherit the root through the environment.
    assert os.environ["GKEWS_CHECKPOINT_ROOT"] == os.path.abspath(
        jp_server_config["GkewsApp"]["checkpoint_root"]
    )


@pytest.fixture
def env_root(tmp_path, monkeypatch):
    """$GKEWS_CHECKPOINT_ROOT set when the server starts (a Pod's env), beside a configured root."""
    monkeypatch.setenv("GKEWS_CHECKPOINT_ROOT", str(tmp_path / "from-env"))
    return str(tmp_path / "from-env")


def test_a_checkpoint_root_from_the_environment_is_the_one_published(env_root, jp_serverapp):
    """The server and its kernels use $GKEWS_CHECKPOINT_ROOT; its settings (and its log) name that one, not the
    configured root it does not use."""
    assert jp_serverapp.web_app.settings["gkews_checkpoint_root"] == env_root
    assert jp_serverapp.web_app.settings["gkews_lifecycle"].checkpoint_root == env_root


def test_the_default_directories_are_the_project_folders_own(tmp_path, monkeypatch):
    """Each project folder (a server's root_dir) has its own state and store under the Jupyter data directory:
    the same for every spelling of the folder, another for another folder."""
    from jupyter_core.paths import jupyter_data_dir

    from jupyter_gkews.app import GkewsApp

    (tmp_path / "proj A").mkdir()
    (tmp_path / "projB").mkdir()
    os.symlink(tmp_path / "proj A", tmp_path / "link")
    monkeypatch.chdir(tmp_path / "proj A")
    app = GkewsApp()
    project = os.path.dirname(app.checkpoint_root)
    assert os.path.dirname(project) == os.path.join(jupyter_data_dir(), "gkews", "projects")
    assert os.path.basename(project).startswith("proj_A-")
    assert app.checkpoint_root == os.path.join(project, "checkpoints")
    assert app.state_dir == os.path.join(project, "state")
    monkeypatch.chdir(tmp_path / "link")
    assert GkewsApp().state_dir == app.state_dir
    monkeypatch.chdir(tmp_path / "projB")
    assert GkewsApp().state_dir != app.state_dir and GkewsApp().checkpoint_root != app.checkpoint_root


def test_checkpoint_root_env_set_only_when_absent(tmp_path, monkeypatch):
    from jupyter_gkews.app import GkewsApp

    app = GkewsApp(checkpoint_root=str(tmp_path / "mine"))
    app.initialize_settings()
    assert os.environ["GKEWS_CHECKPOINT_ROOT"] == str(tmp_path / "mine")

    monkeypatch.setenv("GKEWS_CHECKPOINT_ROOT", str(tmp_path / "preset"))
    app.initialize_settings()
    assert os.environ["GKEWS_CHECKPOINT_ROOT"] == str(tmp_path / "preset")
