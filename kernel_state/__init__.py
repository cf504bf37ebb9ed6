"""kernel_state: checkpoint a Python namespace (variables, tensors, models) and prove it came back.

Works in a plain Python process, a test or a Jupyter kernel; torch is optional. In IPython it adds the
%gkews_checkpoint magic (loaded automatically in kernels of an environment where jupyter-gkews is installed).
"""
from .checkpoint import delete, list_checkpoints, probe, restore, save, status, verify
from .errors import CheckpointError, CheckpointNotFound, CheckpointWriteError, CorruptBlob, CorruptManifest
from .identity import identity

__all__ = ["save", "restore", "verify", "probe", "list_checkpoints", "delete", "status", "identity",
           "CheckpointError", "CheckpointNotFound", "CheckpointWriteError", "CorruptBlob", "CorruptManifest"]


def load_ipython_extension(ipython):
    from .magic import CheckpointMagics
    ipython.register_magics(CheckpointMagics)
    from . import auto
    if auto.enabled_by_setting(ipython):
        try:
            auto.AUTO.on(ipython, remember=False)
        except ValueError as exc:  # a wrong GKEWS_AUTO_* setting: said, and the rest of the extension loads
            import sys
            auto.SETTING_PROBLEM = f"{exc}; automatic checkpoints stayed off at the kernel's start"
            print(f"gkews: {auto.SETTING_PROBLEM}", file=sys.stderr)
    from .hold import hold_at_start
    hold_at_start()  # last: a kernel a resume starts runs no cell before its restore
