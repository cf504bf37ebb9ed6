"""jupyter-gkews: pause a GPU notebook and resume it.

This package is the Jupyter server extension. The in-kernel half (the
``%gkews_checkpoint`` magic and the checkpoint store) is the separate package
``kernel_state``; the frontend is the labextension built into
``jupyter_gkews/labextension``.
"""

try:
    from ._version import __version__
except ImportError:  # running from a source tree that was never built
    import warnings

    warnings.warn(
        "Importing 'jupyter_gkews' outside a proper installation "
        "(jupyter_gkews/_version.py is missing); run `pip install -e .`.",
        stacklevel=2,
    )
    __version__ = "dev"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-gkews"}]


def _jupyter_server_extension_points():
    from .app import GkewsApp

    return [{"module": "jupyter_gkews", "app": GkewsApp}]


__all__ = ["__version__"]
