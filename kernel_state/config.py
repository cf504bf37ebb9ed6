"""Where checkpoints live and which notebook a process belongs to."""
import hashlib
import os

DEFAULT_KEEP_LAST = 5
DEFAULT_AUTO_KEEP_LAST = 50          # automatic checkpoints (kernel undo) kept per notebook
DEFAULT_AUTO_MAX_BYTES = 8 << 30     # and the bytes their distinct blobs may take, per notebook


def checkpoint_root(root: str | None = None) -> str:
    if root:
        return os.path.abspath(os.path.expanduser(root))
    env = os.environ.get("GKEWS_CHECKPOINT_ROOT")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    try:
        from jupyter_core.paths import jupyter_data_dir
        base = jupyter_data_dir()
    except ImportError:  # a plain Python process without Jupyter
        base = os.path.join(os.path.expanduser("~"), ".local", "share", "jupyter")
    return os.path.join(base, "gkews", "checkpoints")


def notebook_name(notebook: str | None = None) -> str:
    """The notebook this state belongs to: explicit, or the path jupyter_server gives the kernel."""
    return notebook or os.environ.get("GKEWS_NOTEBOOK") or os.environ.get("JPY_SESSION_NAME") or "default"


def notebook_key(notebook: str) -> str:
    """A stable directory name for a notebook: a hash, never the raw path."""
    return hashlib.sha256(notebook.encode("utf-8")).hexdigest()[:24]


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number; set it to e.g. {default}") from None


def keep_last(value: int | None = None) -> int:
    n = value if value is not None else _int_env("GKEWS_KEEP_LAST", DEFAULT_KEEP_LAST)
    if n < 1:
        raise ValueError(f"keep_last must be at least 1 (got {n}): the newest checkpoint is always kept")
    return n


def max_bytes(value: int | None = None) -> int:
    """Byte budget per notebook; 0 means no budget."""
    n = value if value is not None else _int_env("GKEWS_MAX_BYTES", 0)
    if n < 0:
        raise ValueError(f"max_bytes must be 0 (no budget) or positive (got {n})")
    return n


def auto_keep_last(value: int | None = None) -> int:
    n = value if value is not None else _int_env("GKEWS_AUTO_KEEP_LAST", DEFAULT_AUTO_KEEP_LAST)
    if n < 1:
        raise ValueError(f"GKEWS_AUTO_KEEP_LAST must be at least 1 (got {n}): the newest automatic checkpoint "
                         f"is always kept; turn auto-checkpointing off instead")
    return n


def auto_max_bytes(value: int | None = None) -> int:
    """Byte budget of the automatic checkpoints per notebook; 0 means no budget."""
    n = value if value is not None else _int_env("GKEWS_AUTO_MAX_BYTES", DEFAULT_AUTO_MAX_BYTES)
    if n < 0:
        raise ValueError(f"GKEWS_AUTO_MAX_BYTES must be 0 (no budget) or positive (got {n})")
    return n
