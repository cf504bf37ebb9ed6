"""Where checkpoints live and which notebook a process belongs to."""
import hashlib
import os
import re
import time

DEFAULT_KEEP_LAST = 5
#: Set by the server extension in its own environment, so kernels it starts inherit it.
CONTENTS_ROOT_ENV = "GKEWS_CONTENTS_ROOT"
DEFAULT_AUTO_KEEP_LAST = 50          # automatic checkpoints (kernel undo) kept per notebook
DEFAULT_AUTO_MAX_BYTES = 8 << 30     # and the bytes their distinct blobs may take, per notebook
DEFAULT_AUTO_STAGING_MB = 1024       # warm staging memory kept between automatic checkpoints, per kernel


def _anchor_relative_root() -> None:
    """A relative GKEWS_CHECKPOINT_ROOT is relative to where the process started: made absolute once, at
    import, so that a later %cd does not move the store (the next save started a second one there)."""
    env = os.environ.get("GKEWS_CHECKPOINT_ROOT")
    if env and not os.path.isabs(os.path.expanduser(env)):
        os.environ["GKEWS_CHECKPOINT_ROOT"] = os.path.abspath(os.path.expanduser(env))


_anchor_relative_root()


def _started_in() -> str:
    try:
        return os.getcwd()
    except OSError:  # started in a folder deleted since
        return os.path.expanduser("~")


#: the folder this process started in: a kernel no server started keeps its checkpoints with that project
#: folder's (a later %cd does not move the store)
STARTED_IN = _started_in()


def _jupyter_data_dir() -> str:
    try:
        from jupyter_core.paths import jupyter_data_dir
        return jupyter_data_dir()
    except ImportError:  # a plain Python process without Jupyter
        return os.path.join(os.path.expanduser("~"), ".local", "share", "jupyter")


def project_dir(contents_root: str, data_dir: str | None = None) -> str:
    """Where a project folder's state and checkpoints live unless told: <jupyter data dir>/gkews/projects/
    <folder name>-<12 hex digits of its real path>, the same for every spelling of the folder (a link to it,
    a trailing slash, `~`), readable by name in a listing. Notebooks are named by their path in the folder,
    so two folders' `train.ipynb` are one name: each folder has its own directory."""
    real = os.path.realpath(os.path.expanduser(contents_root))
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(real)).strip("._") or "root"
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return os.path.join(data_dir or _jupyter_data_dir(), "gkews", "projects", f"{name[:40]}-{digest}")


def checkpoint_root(root: str | None = None) -> str:
    """The store: given, else $GKEWS_CHECKPOINT_ROOT (what the server gives the kernels it starts), else the
    project folder's own: the server's contents root, or the folder this process started in."""
    if root:
        return os.path.abspath(os.path.expanduser(root))
    env = os.environ.get("GKEWS_CHECKPOINT_ROOT")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    return os.path.join(project_dir(os.environ.get(CONTENTS_ROOT_ENV) or STARTED_IN), "checkpoints")


def notebook_name(notebook: str | None = None) -> str:
    """The notebook this state belongs to: explicit, or the path jupyter_server gives the kernel, named
    the way the server names it (canonical_notebook), moved by the renames the server told this process
    of since it started (note_rename)."""
    if notebook:
        return canonical_notebook(notebook)
    return follow_renames(canonical_notebook(
        os.environ.get("GKEWS_NOTEBOOK") or os.environ.get("JPY_SESSION_NAME") or "default"))


# The renames of notebooks and folders the server sent this process (kernel_state.api "rename"): the
# environment still names the path the kernel was started for. (order, old, new), applied in order: the
# server stamps each rename when it happens, and two sent together may reach the kernel the other way round.
_renames: list[tuple[float, str, str]] = []


def note_rename(old: str, new: str, order: float | None = None) -> None:
    """The file or folder `old` is called `new` now (paths relative to the contents root)."""
    global _renames
    entry = (float(order) if order is not None else time.time(), _strip(old), _strip(new))
    if entry[1] and entry[2] and entry[1] != entry[2] and entry not in _renames:
        _renames = sorted(_renames + [entry])  # a new list: the auto-checkpoint writer may be reading the old one


def follow_renames(name: str) -> str:
    """Where the notebook `name` is now, after the renames noted in this process (itself if none)."""
    for _order, old, new in _renames:
        if name == old:
            name = new
        elif name.startswith(old + "/"):
            name = new + name[len(old):]
    return name


def _strip(path: str) -> str:
    return canonical_notebook(path).strip("/")


def contents_root() -> str | None:
    """The server's contents root, exported by the jupyter-gkews server extension to its kernels."""
    root = os.environ.get(CONTENTS_ROOT_ENV)
    return os.path.abspath(root) if root else None


def canonical_notebook(notebook: str) -> str:
    """One name per notebook for the kernel and the server: the path relative to the contents root.

    jupyter_server gives a kernel its notebook's absolute path (JPY_SESSION_NAME) while its REST API and the
    extension use the path relative to the contents root; an absolute path under that root becomes the
    relative one ('/'-separated). Anything else (no server, a path outside the root) is kept as given.
    """
    root = contents_root()
    if not root or not os.path.isabs(notebook):
        return notebook
    for base, path in ((root, os.path.normpath(notebook)),
                       (os.path.realpath(root), os.path.realpath(notebook))):
        rel = os.path.relpath(path, base)
        if rel != os.curdir and rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return rel.replace(os.sep, "/")
    return notebook


def legacy_names(notebook: str) -> list[str]:
    """Names earlier versions filed a notebook's checkpoints under from inside its kernel: the absolute path
    jupyter_server gave the kernel. Lookups search them too, so those checkpoints stay reachable."""
    root = contents_root()
    if not root or os.path.isabs(notebook) or notebook == "default":
        return []
    raw = os.path.join(os.environ.get(CONTENTS_ROOT_ENV, root), notebook)
    return list(dict.fromkeys([raw, os.path.normpath(raw), os.path.join(root, notebook)]))


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
        what = "keep_last" if value is not None else "GKEWS_KEEP_LAST"
        raise ValueError(f"{what} must be at least 1 (got {n}): the newest checkpoint is always kept")
    return n


def max_bytes(value: int | None = None) -> int:
    """Byte budget per notebook; 0 means no budget."""
    n = value if value is not None else _int_env("GKEWS_MAX_BYTES", 0)
    if n < 0:
        what = "max_bytes" if value is not None else "GKEWS_MAX_BYTES"
        raise ValueError(f"{what} must be 0 (no budget) or positive (got {n})")
    return n


DEFAULT_STAGING_MB = 256
CUDA_LOADERS = ("pinned", "safetensors")
DIRECT_IO_MODES = ("write", "read", "both", "none")


def staging_bytes(value: int | None = None) -> int:
    """Host memory a save or restore of device tensors may use for its pinned buffers, whatever the
    tensors' size (GKEWS_DEVICE_STAGING_MB)."""
    mb = value if value is not None else _int_env("GKEWS_DEVICE_STAGING_MB", DEFAULT_STAGING_MB)
    if mb < 8:
        raise ValueError(f"GKEWS_DEVICE_STAGING_MB must be at least 8 (got {mb}): the pipeline needs "
                         f"several buffers of at least 2 MiB; the default is {DEFAULT_STAGING_MB}")
    return mb << 20


def _choice(name: str, default: str, choices) -> str:
    value = os.environ.get(name) or default
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(choices)}; unset it for {default!r}")
    return value


def cuda_loader() -> str:
    """How large tensors come back to a GPU: `pinned` (our ring of pinned buffers) or `safetensors`
    (the safetensors library's CUDA loader, with our hash check beside it)."""
    return _choice("GKEWS_CUDA_LOADER", "pinned", CUDA_LOADERS)


def direct_io() -> str:
    """Which device-streamed transfers bypass the page cache (O_DIRECT): write, read, both or none."""
    return _choice("GKEWS_DIRECT_IO", "write", DIRECT_IO_MODES)


def auto_keep_last(value: int | None = None) -> int:
    n = value if value is not None else _int_env("GKEWS_AUTO_KEEP_LAST", DEFAULT_AUTO_KEEP_LAST)
    if n < 1:
        raise ValueError(f"GKEWS_AUTO_KEEP_LAST must be at least 1 (got {n}): the newest automatic checkpoint "
                         f"is always kept; turn auto-checkpointing off instead")
    return n


def auto_staging_bytes(value: int | None = None) -> int:
    """Warm staging memory kernel undo keeps between snapshots (staging_pool.py); 0 keeps none."""
    mb = value if value is not None else _int_env("GKEWS_AUTO_STAGING_MB", DEFAULT_AUTO_STAGING_MB)
    if mb < 0:
        raise ValueError(f"GKEWS_AUTO_STAGING_MB must be 0 (keep none) or positive (got {mb}); "
                         f"the default is {DEFAULT_AUTO_STAGING_MB}")
    return mb << 20


def auto_max_bytes(value: int | None = None) -> int:
    """Byte budget of the automatic checkpoints per notebook; 0 means no budget."""
    n = value if value is not None else _int_env("GKEWS_AUTO_MAX_BYTES", DEFAULT_AUTO_MAX_BYTES)
    if n < 0:
        raise ValueError(f"GKEWS_AUTO_MAX_BYTES must be 0 (no budget) or positive (got {n})")
    return n


def magic_quoted(path: str) -> str:
    """A path as the magic's command line (a shell's split) takes it back whole: one with a space, a quote or a
    backslash in double quotes."""
    if path and not any(c.isspace() or c in "\"'\\" for c in path):
        return path
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'
