"""The checkpoint store on disk.

    <root>/blobs/<xxh3-128>.safetensors   tensor and array data, shared by all checkpoints
    <root>/blobs/<xxh3-128>.enc           the same, stored smaller (automatic checkpoints; encoded_blob.py)
    <root>/blobs/<xxh3-128>.pkl           one pickled variable (its tensors by reference)
    <root>/notebooks/<key>/notebook.json  which notebook the key stands for
    <root>/notebooks/<key>/manifests/<id>.json
    <root>/tmp/                           files being written; anything here is unfinished
    <root>/gkews-store.json               the marker: this directory is a store, written by us

The store deletes files (garbage collection, retention), so it only works in a directory it can prove is
its own: an empty or new one (it writes the marker), or one with the marker. It never follows a symbolic
link inside itself, and it only ever deletes names of the forms it writes. Everything in it is private to
its owner: files 0600, directories 0700, whatever the umask.

A checkpoint exists once its manifest is renamed into place. Blobs are written under temp names and only
renamed to their content address after they are fsynced, all together just before the manifest (so the
disk works on many files at once): a crash at any moment leaves either the previous set of manifests or
the new one, never half of one, and a blob under its final name is always complete.
"""
from __future__ import annotations

import calendar
import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import config, pins
from .errors import CheckpointError, CheckpointNotFound, CheckpointWriteError, CorruptManifest
from .fsutil import (SymlinkRefused, create_private, fsync_dir, fsync_file, private_dir, remove_quietly, temp_path,
                     write_bytes_durable, write_json_durable, write_json_durable_or_in_place)
from .hashing import digest_bytes
from .safetensors_io import write_blob
from .sizes import human_bytes
from .timestamps import utc_epoch

MANIFEST_FORMAT = "gkews-checkpoint"
_sync_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gkews-fsync")
MANIFEST_VERSION = 1

MARKER = "gkews-store.json"
MARKER_FORMAT = "gkews-checkpoint-store"
LAYOUT = ("blobs", "tmp", "notebooks")
# The names the store writes; garbage collection and delete touch nothing else.
CHECKPOINT_ID = re.compile(r"\d{8}-\d{6}-\d{3}-[0-9a-f]{4}")
BLOB_NAME = re.compile(r"[0-9a-f]{32}\.(safetensors|enc|pkl)")
TEMP_NAME = re.compile(r"[0-9a-f]{32}(\.[a-z]+)?\.tmp")
KEY_NAME = re.compile(r"[0-9a-f]{24}")
# the files of a notebook's folder besides notebook.json and manifests/ (a rename moves them with it)
NOTEBOOK_FILES = ("probes.json", "auto.json")
PIN_NAME = re.compile(r"[0-9a-f]{24}\.json|[0-9a-f]{32}\.tmp")  # kernel_state.pins: written by the server

_WRITE_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                 errno.EFBIG: "the file size limit was reached", errno.EROFS: "the file system is read-only",
                 errno.EACCES: "permission denied", errno.EPERM: "permission denied"}


#: what a write that failed was for, and what that left as it was (write_error)
SAVING = ("write the checkpoint to", "nothing of this checkpoint was kept, and the checkpoints saved before it "
          "(if any) are intact")
CHANGING = ("change the checkpoint store at", "nothing was deleted or moved: the checkpoints are as they were")
MOVING = ("move checkpoints in", "none is lost: those not moved are still listed under the old name")


def write_error(exc: OSError, root: str, doing: tuple[str, str] = SAVING) -> CheckpointWriteError:
    why = _WRITE_ERRNOS.get(exc.errno)
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    usage = _volume_usage(root) if full else None
    why = f"{why} ({exc.strerror or exc})" if why else exc.strerror or str(exc)
    where = f"{why}: {exc.filename}" if isinstance(exc.filename, str) and exc.filename != root else why
    if usage:
        where += f"; {usage['free']} free of {usage['total']} there, {usage['held']}"
    setting = "GKEWS_CHECKPOINT_ROOT (c.GkewsApp.checkpoint_root)"
    room = f"Free space there, or point {setting} at a volume with room"
    if usage and usage["auto"]:  # kernel undo's own checkpoints take part of it: say which knobs keep fewer
        room += (" (or keep fewer automatic checkpoints: GKEWS_AUTO_KEEP_LAST, GKEWS_AUTO_MAX_BYTES; "
                 "%gkews_checkpoint auto off stops them)")
    fix = {errno.ENOSPC: room,
           errno.EDQUOT: room,
           errno.EFBIG: f"Raise the file size limit (ulimit -f), or point {setting} at another volume",
           errno.EROFS: f"Point {setting} at a writable directory (this volume is mounted read-only)",
           errno.EACCES: f"Give this user write access there, or point {setting} at a writable directory",
           errno.EPERM: f"Give this user write access there, or point {setting} at a writable directory",
           }.get(exc.errno, f"Point {setting} at a directory this user can create and write")
    action, outcome = doing
    return CheckpointWriteError(f"could not {action} {root}: {where}. {fix}; {outcome}.")


def _volume_usage(root: str) -> dict | None:
    """A full volume in words: its free and total space, and what the store holds of it (the blobs on disk; how
    many checkpoints, and how many of them kernel undo's). None when that cannot be read: the message goes
    without it. Reads the manifests without the lock (the caller may hold it): an estimate, for a message."""
    try:
        disk = shutil.disk_usage(root)
        store = Store(root)
        held = 0
        with os.scandir(store.blob_dir) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    held += entry.stat(follow_symlinks=False).st_size
        rows = [row for notebook in store.notebooks() for row in store.list(notebook)]
    except (OSError, CheckpointError, ValueError):
        return None
    auto = sum(1 for row in rows if row.get("auto"))
    of_them = f", {auto} of them kernel undo's automatic ones" if auto else ""
    return {"free": human_bytes(disk.free), "total": human_bytes(disk.total), "auto": auto,
            "held": f"the checkpoint store holds {human_bytes(held)} of it in {len(rows)} checkpoint(s){of_them}"}


class NotAStore(CheckpointError):
    """The checkpoint root is not a directory this store can prove it owns, or has a link inside."""


class StoreBusy(CheckpointError):
    """The store's lock could not be taken in time (a save, a restore or a collection holds it)."""


class HistoryExists(CheckpointError):
    """A rename's new path already has checkpoints of its own: nothing is moved over them."""


def retention_limits(keep_last: int | None, max_bytes: int | None, auto: bool) -> tuple[int, int]:
    """The retention settings in force (arguments, else the environment), or the ValueError naming the
    wrong one: a save checks them before it writes anything."""
    if auto:
        return config.auto_keep_last(keep_last), config.auto_max_bytes(max_bytes)
    return config.keep_last(keep_last), config.max_bytes(max_bytes)


def _refuse_link(path: str, root: str) -> NotAStore:
    return NotAStore(
        f"{path} is a symbolic link inside the checkpoint store {root}; the store never follows links (one "
        f"could make it write or delete files elsewhere). Replace the link with a real directory holding the "
        f"same files, or point GKEWS_CHECKPOINT_ROOT (c.GkewsApp.checkpoint_root) at the real location; "
        f"nothing was written or deleted.")


def _delete_advice(checkpoint_id: str) -> str:
    return (f"delete it (`%gkews_checkpoint delete {checkpoint_id}` in the notebook, or DELETE "
            f"gkews/checkpoints/{checkpoint_id} on the server) and restore an older one")


def new_checkpoint_id(after: str | None = None) -> str:
    """YYYYMMDD-HHMMSS-mmm-xxxx from the clock (UTC), sorting after `after` (the notebook's newest id).

    Ids order a notebook's checkpoints: newest first is what a plain restore takes and what retention keeps.
    A clock that was ahead once (a checkpoint dated tomorrow) must not make every later save "older": each
    save then deleted itself under keep_last=1, and a restore brought back the stale one. So an id never
    sorts before the newest one already there; the manifest's `created` still says the real time."""
    millis = int(time.time() * 1000)
    if after is not None and CHECKPOINT_ID.fullmatch(after):
        millis = max(millis, _id_millis(after) + 1)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(millis // 1000))
    return f"{stamp}-{millis % 1000:03d}-{secrets.token_hex(2)}"


def id_seconds(checkpoint_id: str) -> float:
    """When a checkpoint's save began (its id's time, to the millisecond; a manifest's `created` has whole
    seconds), in seconds since the epoch."""
    return _id_millis(checkpoint_id) / 1000


def _id_millis(checkpoint_id: str) -> int:
    """The time in an id, in milliseconds since the epoch (UTC)."""
    day, clock, millis = checkpoint_id.split("-")[:3]
    return calendar.timegm(time.strptime(day + clock, "%Y%m%d%H%M%S")) * 1000 + int(millis)


#: store root -> blobs that were in place when this process last synced the blobs directory: a commit that
#: puts no blob in place and names only those (an unchanged model saved again) needs no sync of its own,
#: where one on a virtual disk costs milliseconds. Blobs it did not see synced (another kernel's, one whose
#: writer died between its rename and its sync) get the sync as before.
_DURABLE_BLOBS: dict[str, set[str]] = {}

#: the notebooks this process committed checkpoints of: a kernel told of a rename looks for what it saved
#: under its old name only if it saved any (kernel_state.api.rename)
COMMITTED: set[str] = set()


def _listed(directory: str) -> list[str]:
    """A layout folder's names; none where it is missing (a dry run on an earlier version's store makes none)."""
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _is_manifest(path: str) -> bool:
    """Whether a file is a checkpoint manifest of this store's format."""
    try:
        with open(path, "rb") as f:
            body = json.loads(f.read())
    except (OSError, ValueError):
        return False
    return isinstance(body, dict) and body.get("format") == MANIFEST_FORMAT


class Store:
    def __init__(self, root: str | None = None):
        self.root = config.checkpoint_root(root)
        self.blob_dir = os.path.join(self.root, "blobs")
        self.accept_encoded = False  # a pause's checkpoint is plain safetensors, whatever kernel undo wrote
        self.tmp_dir = os.path.join(self.root, "tmp")
        self.staged: dict[str, str] = {}  # final path -> temp path, written but not yet durable

    # -- layout ---------------------------------------------------------------------------------
    def ensure(self, doing: tuple[str, str] = SAVING) -> None:
        """Make the root a store (or check that it is one) with its private, link-free layout."""
        try:
            self._claim_root()
            for d in LAYOUT:
                private_dir(os.path.join(self.root, d))
        except SymlinkRefused as exc:
            raise _refuse_link(exc.filename, self.root) from None
        except (NotADirectoryError, FileExistsError) as exc:
            raise NotAStore(f"{exc.filename or self.root} is not a directory, so {self.root} cannot be a checkpoint "
                            f"store; point GKEWS_CHECKPOINT_ROOT (c.GkewsApp.checkpoint_root) at an empty or new "
                            f"directory") from None
        except OSError as exc:
            raise write_error(exc, self.root, doing) from None

    def check(self) -> None:
        """Refuse a root that is no store, as a save would, without writing anything (a listing: a folder of
        the user's listed as "no checkpoints" hid that every save there is refused). A root not made yet is
        an empty store."""
        if os.path.isdir(self.root):
            self._refuse_unless_ours()

    def _refuse_unless_ours(self) -> bool:
        """Whether the root has our marker; NotAStore when it holds what the store did not write."""
        marker = os.path.join(self.root, MARKER)
        try:
            st = os.lstat(marker)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise NotAStore(f"{marker} is not a regular file, so {self.root} is not a checkpoint store this "
                                f"version wrote; point GKEWS_CHECKPOINT_ROOT at an empty or new directory")
            self._check_marker(marker)
            return True
        foreign = self._foreign_entries()
        if foreign:
            shown = ", ".join(sorted(foreign)[:5]) + (", ..." if len(foreign) > 5 else "")
            raise NotAStore(
                f"{self.root} is not a gkews checkpoint store: it holds files the store did not write ({shown}) "
                f"and no {MARKER} marker, and the store deletes what it does not reference. Point "
                f"GKEWS_CHECKPOINT_ROOT (c.GkewsApp.checkpoint_root) at an empty or new directory; nothing "
                f"was written or deleted.")
        return False

    def _claim_root(self) -> None:
        """Accept the root if it has our marker; write the marker into an empty (or new) one, or into a store
        of an older version (only our own names in it); refuse anything else, before writing anything."""
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        marker = os.path.join(self.root, MARKER)
        if not self._refuse_unless_ours():
            body = json.dumps({"format": MARKER_FORMAT, "version": 1,
                               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode()
            write_bytes_durable(body, marker, self.root)
        if stat.S_IMODE(os.stat(self.root).st_mode) != 0o700:
            os.chmod(self.root, 0o700)

    def _check_marker(self, marker: str) -> None:
        try:
            with open(marker, "rb") as f:
                ok = json.loads(f.read()).get("format") == MARKER_FORMAT
        except (OSError, ValueError, AttributeError):
            ok = False
        if not ok:  # damaged, or another program's file: the one way to tell is what else the folder holds
            ours = os.path.isdir(os.path.join(self.root, "notebooks"))
            raise NotAStore(f"{marker} is not a gkews store marker, so {self.root} is not taken for a checkpoint "
                            f"store. " + (f"If it is yours (it holds notebooks/ and blobs/), the marker is damaged: "
                                          f"delete {marker} and the store writes a new one, after checking that "
                                          f"the folder holds nothing but its own files; else point "
                                          if ours else "Point ") +
                            "GKEWS_CHECKPOINT_ROOT at an empty or new directory; nothing was written or deleted")

    def _foreign_entries(self) -> list[str]:
        """What in an unmarked root the store cannot prove it wrote (empty for a new root, or for the layout
        of a store written before the marker existed: only our directories, holding only our names)."""
        # ignore a marker written meanwhile by another process, or its temp file
        names = {n for n in os.listdir(self.root) if n != MARKER and not TEMP_NAME.fullmatch(n)}
        if not names:
            return []
        if not names & {"blobs", "notebooks"}:
            return sorted(names)
        foreign = [n for n in names if n not in LAYOUT + ("pins",) and n != ".lock"]
        patterns = {"blobs": BLOB_NAME, "tmp": TEMP_NAME, "notebooks": KEY_NAME, "pins": PIN_NAME}
        for sub in names & set(LAYOUT + ("pins",)):
            path = os.path.join(self.root, sub)
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                foreign.append(sub)
                continue
            foreign += [f"{sub}/{n}" for n in os.listdir(path) if not patterns[sub].fullmatch(n)]
        if foreign:
            return foreign
        # our names alone prove nothing (a cache of md5-named .pkl files in blobs/ has them): an earlier
        # version's store holds checkpoints, each notebook's folder only its own files
        foreign, manifests = self._foreign_in_notebooks()
        if foreign or manifests or not any(os.listdir(os.path.join(self.root, n)) for n in names if n != ".lock"):
            return foreign  # (empty folders of ours: nothing to lose)
        return sorted(names) + ["(and no checkpoint manifest)"]

    def _foreign_in_notebooks(self) -> tuple[list[str], bool]:
        """What in notebooks/<key>/ the store did not write, and whether one of them holds a manifest of ours."""
        foreign, manifests = [], False
        base = os.path.join(self.root, "notebooks")
        keys = os.listdir(base) if os.path.isdir(base) and not os.path.islink(base) else []
        for key in keys:
            key_dir = os.path.join(base, key)
            if not stat.S_ISDIR(os.lstat(key_dir).st_mode):
                foreign.append(f"notebooks/{key}")
                continue
            for name in os.listdir(key_dir):
                if name not in ("notebook.json", "manifests") + NOTEBOOK_FILES and not TEMP_NAME.fullmatch(name):
                    foreign.append(f"notebooks/{key}/{name}")
            mdir = os.path.join(key_dir, "manifests")
            if not os.path.isdir(mdir) or os.path.islink(mdir):
                continue
            for name in os.listdir(mdir):
                if not (name.endswith(".json") and CHECKPOINT_ID.fullmatch(name[:-5])):
                    if not TEMP_NAME.fullmatch(name):
                        foreign.append(f"notebooks/{key}/manifests/{name}")
                elif not manifests:
                    manifests = _is_manifest(os.path.join(mdir, name))
        return foreign, manifests

    def _real_dir(self, path: str) -> bool:
        """True for a directory, False when missing; a link (or a file) where a directory belongs is refused."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(st.st_mode):
            raise _refuse_link(path, self.root)
        if not stat.S_ISDIR(st.st_mode):
            raise NotAStore(f"{path} is not a directory; the checkpoint store {self.root} is damaged")
        return True

    def _readable_dir(self, path: str) -> bool:
        """For listing: a real directory; a link is never followed (writing there says why)."""
        try:
            return self._real_dir(path)
        except NotAStore:
            return False

    def notebook_dir(self, notebook: str) -> str:
        """Where new checkpoints of this notebook go: the key of its canonical name."""
        return os.path.join(self.root, "notebooks", config.notebook_key(config.canonical_notebook(notebook)))

    def manifest_dir(self, notebook: str) -> str:
        return os.path.join(self.notebook_dir(notebook), "manifests")

    def _manifest_dirs(self, notebook: str) -> list[str]:
        """The notebook's manifest directory, then those of the names older versions filed it under."""
        name = config.canonical_notebook(notebook)
        dirs = []
        for alias in [name] + config.legacy_names(name):
            d = os.path.join(self.root, "notebooks", config.notebook_key(alias), "manifests")
            if d not in dirs:
                dirs.append(d)
        return dirs

    def _manifest_path(self, notebook: str, checkpoint_id: str, forwarded: bool = False) -> str | None:
        """The manifest file of this notebook's checkpoint; with forwarded, also one saved under this name
        and moved by a rename since (an id a paused notebook or a pin recorded before the rename)."""
        if not CHECKPOINT_ID.fullmatch(checkpoint_id):
            return None
        dirs = self._manifest_dirs(notebook)
        later = self._forwarded_manifest_dirs(notebook) if forwarded else {}
        for d in dirs + [d for d in later if d not in dirs]:
            path = os.path.join(d, checkpoint_id + ".json")
            if self._readable_dir(os.path.dirname(d)) and self._readable_dir(d) and os.path.isfile(path) and \
                    (d in dirs or _saved_under(path, later[d])):
                return path
        return None

    def notebooks(self) -> list[str]:
        """Every notebook with a directory in the store, by canonical name, each once."""
        base = os.path.join(self.root, "notebooks")
        out = set()
        for key in sorted(os.listdir(base)) if self._readable_dir(base) else []:
            info = self._notebook_info(os.path.join(base, key))
            name = info.get("notebook")
            if not isinstance(name, str):
                continue
            if config.notebook_key(name) != key:  # a move cut short (move_notebook): still the old name's
                name = next((a for a in info.get("renamed_from", []) if config.notebook_key(a) == key), name)
            out.add(config.canonical_notebook(name))
        return sorted(out)

    @staticmethod
    def _notebook_info(key_dir: str) -> dict:
        """notebook.json of a notebook's directory: {"notebook", and "renamed_from" after a rename}; {} if
        there is none (or it cannot be read)."""
        try:
            with open(os.path.join(key_dir, "notebook.json")) as f:
                info = json.load(f)
        except (OSError, ValueError):
            return {}
        if not isinstance(info, dict):
            return {}
        if not (isinstance(info.get("renamed_from"), list) and all(isinstance(a, str) for a in info["renamed_from"])):
            info.pop("renamed_from", None)
        return info

    def _forwarded_manifest_dirs(self, notebook: str) -> dict[str, list[str]]:
        """The manifest directories of the notebooks that were called `notebook` before a rename (their
        notebook.json lists it in renamed_from): where a checkpoint id saved under that name is now. Each with
        the names it had up to that one: a checkpoint saved there under a later name (after the rename) is
        another notebook's to a new notebook at the old path, not one to restore into it."""
        base = os.path.join(self.root, "notebooks")
        name = config.canonical_notebook(notebook)
        out = {}
        for key in sorted(os.listdir(base)) if self._readable_dir(base) else []:
            earlier = self._notebook_info(os.path.join(base, key)).get("renamed_from", []) if \
                KEY_NAME.fullmatch(key) else []
            if name in earlier:
                out[os.path.join(base, key, "manifests")] = earlier[:earlier.index(name) + 1]
        return out

    def blob_path(self, digest: str, ext: str) -> str:
        return os.path.join(self.blob_dir, f"{digest}.{ext}")

    def has_blob(self, digest: str, ext: str) -> bool:
        """A blob under its final name, as a regular file (a link there is not ours and gets replaced).
        With accept_encoded (an automatic checkpoint's save), `<digest>.enc` stands for the safetensors one."""
        exts = (ext, "enc") if ext == "safetensors" and self.accept_encoded else (ext,)
        for name in exts:
            try:
                if stat.S_ISREG(os.lstat(self.blob_path(digest, name)).st_mode):
                    return True
            except FileNotFoundError:
                pass
        return False

    # -- locking: saves share, garbage collection is exclusive -----------------------------------
    @contextlib.contextmanager
    def lock(self, exclusive: bool = False, reading: bool = False, timeout: float | None = None):
        """reading: a restore, which writes nothing, also from a store on a read-only volume (where no
        collection can run either): the existing lock file is opened for reading, or none is taken.
        timeout: seconds to wait for it at most (StoreBusy after that); None waits as long as it takes."""
        if reading:
            fd = None
            for flags in (os.O_RDONLY, os.O_RDWR | os.O_CREAT):  # the lock file as it is, else a new one
                try:
                    fd = os.open(os.path.join(self.root, ".lock"), flags | os.O_NOFOLLOW, 0o600)
                    break
                except OSError:
                    continue
            if fd is None:  # a read-only volume: nothing can collect there either
                yield
                return
        else:
            doing = CHANGING if exclusive else SAVING  # a delete, a cleanup, a move; else a save
            self.ensure(doing)
            path = os.path.join(self.root, ".lock")
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise write_error(exc, self.root, doing) from None  # a read-only volume, say: with the fix
                raise NotAStore(f"{path} is a symbolic link; the checkpoint store never writes through links (one "
                                f"could make it write elsewhere). Delete it ({path}): the store makes its own lock "
                                f"file; nothing was written or deleted.") from None
        try:
            _flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, timeout, self.root)
            yield
        finally:
            os.close(fd)

    # -- writing ----------------------------------------------------------------------------------
    def put_tensors(self, entries, progress=None, position=None, digest=None) -> tuple[str, int, bool]:
        """Stage a safetensors blob; returns (digest, size, newly written). (position, and the digest a
        caller already computed, serve only the automatic checkpoints' staging store: this one always
        names a blob by what it hashed while writing it.)"""
        try:
            tmp, digest, size = write_blob(entries, self.tmp_dir, progress)
        except OSError as exc:
            raise write_error(exc, self.root) from None
        return digest, size, self._stage(tmp, digest, "safetensors")

    def put_bytes(self, data: bytes) -> tuple[str, int, bool]:
        digest = digest_bytes(data)
        final = self.blob_path(digest, "pkl")
        if final in self.staged or self.has_blob(digest, "pkl"):
            return digest, len(data), False
        tmp = temp_path(self.tmp_dir, ".pkl")
        try:
            with os.fdopen(create_private(tmp), "wb") as f:
                f.write(data)
        except OSError as exc:
            remove_quietly(tmp)
            raise write_error(exc, self.root) from None
        self.staged[final] = tmp
        return digest, len(data), True

    def _stage(self, tmp: str, digest: str, ext: str) -> bool:
        final = self.blob_path(digest, ext)
        if final in self.staged or self.has_blob(digest, ext):
            remove_quietly(tmp)
            return False
        self.staged[final] = tmp
        return True

    def commit(self, notebook: str, manifest: dict) -> None:
        """Make the checkpoint exist: every staged blob durable and in place first, then the manifest."""
        mdir = self.manifest_dir(notebook)
        try:
            self.ensure_notebook_dir(notebook)  # a link there is refused before any blob is in place
            private_dir(mdir)
            list(_sync_pool.map(fsync_file, self.staged.values()))
            for final, tmp in self.staged.items():
                os.replace(tmp, final)
            durable = _DURABLE_BLOBS.setdefault(self.root, set())
            if self.staged or not durable.issuperset(manifest["blobs"]):
                fsync_dir(self.blob_dir)
                if len(durable) > _KNOWN_BLOBS:
                    durable.clear()
                durable.update(manifest["blobs"])
            self.staged.clear()
            info = os.path.join(self.notebook_dir(notebook), "notebook.json")
            if not os.path.exists(info):
                write_json_durable({"notebook": config.canonical_notebook(notebook)}, info, self.tmp_dir)
            manifest["checksum"] = manifest_checksum(manifest)
            # in the order it was built (a restore and verify take the variables in the order they were
            # saved: one refers to those before it), on one line: json's C encoder, where indenting takes its
            # Python one (0.37 s against 0.08 s for a manifest of 20,000 tensors)
            data = json.dumps(manifest).encode()
            write_bytes_durable(data, os.path.join(mdir, manifest["id"] + ".json"), self.tmp_dir)
            _remember(digest_bytes(data), manifest)  # the retention and the collection after it read it
            COMMITTED.add(config.canonical_notebook(notebook))
        except SymlinkRefused as exc:
            raise _refuse_link(exc.filename, self.root) from None
        except OSError as exc:
            raise write_error(exc, self.root) from None

    def ensure_notebook_dir(self, notebook: str) -> str:
        """The notebook's own directory, created private; a link in its place is refused."""
        path = self.notebook_dir(notebook)
        try:
            private_dir(path)
        except SymlinkRefused:
            raise _refuse_link(path, self.root) from None
        except OSError as exc:
            raise write_error(exc, self.root) from None
        return path

    # -- renames ----------------------------------------------------------------------------------
    def _key_dirs(self, notebook: str) -> list[str]:
        """The directories of a notebook: its name's key, then those of the names older versions used."""
        return list(dict.fromkeys(os.path.dirname(d) for d in self._manifest_dirs(notebook)))

    @staticmethod
    def _manifest_names(key_dir: str) -> list[str]:
        mdir = os.path.join(key_dir, "manifests")
        try:
            names = os.listdir(mdir) if stat.S_ISDIR(os.lstat(mdir).st_mode) else []
        except FileNotFoundError:
            names = []
        return sorted(n for n in names if n.endswith(".json") and CHECKPOINT_ID.fullmatch(n[:-5]))

    def move_notebook(self, old: str, new: str, *, only_token: str | None = None,
                      timeout: float | None = None) -> dict:
        """The notebook `old` was renamed `new` (itself or a folder above it): its checkpoints, probes and
        kernel-undo choice become new's, and old has none left (a new file there starts with none).

        Under the exclusive lock (at most `timeout` seconds of waiting: StoreBusy), so no save, restore or
        collection sees half of it. The folder is renamed in one step when new has none; otherwise each
        manifest is renamed into new's folder, never over a file there. Refused (HistoryExists, nothing
        moved) when new already has checkpoints of its own. notebook.json of new records the names its
        checkpoints were saved under (`renamed_from`), so that an id saved under old is still found by
        that name (load_manifest) and the stragglers of old (checkpoints written under it after the move)
        may join them later. only_token: move only the checkpoints the process with this identity token
        wrote (a kernel's own stragglers: what it saved under old after the server had moved old's
        checkpoints), under the same rule: never into another notebook's history.
        Returns {"from", "to", "moved": the checkpoint ids moved, newest first}."""
        old, new = config.canonical_notebook(old), config.canonical_notebook(new)
        result = {"from": old, "to": new, "moved": []}
        if old == new or not self._readable_dir(os.path.join(self.root, "notebooks")):
            return result  # no store, so nothing filed under old (and none is made for that)
        # the lock even when nothing is filed under old yet: a save of it may be about to commit
        with self.lock(exclusive=True, timeout=timeout):
            result["moved"] = self._move_locked(old, new, only_token)
        return result

    def move_folder(self, old: str, new: str, *, timeout: float | None = None) -> dict[str, dict]:
        """A rename of the file or folder `old` to `new` (contents-root paths): move_notebook for `old` and for
        every notebook inside the folder `old`, under one lock. {new name: {"moved": ids} or {"error": why}}
        (HistoryExists for one notebook leaves the others moved)."""
        out: dict[str, dict] = {}
        if old == new or not self._readable_dir(os.path.join(self.root, "notebooks")):
            return out
        with self.lock(exclusive=True, timeout=timeout):
            prefix = old.rstrip("/") + "/"
            for name in dict.fromkeys([old] + [n for n in self.notebooks() if n.startswith(prefix)]):
                target = new + name[len(old):]
                try:
                    out[target] = {"from": name, "moved": self._move_locked(name, target, None)}
                except CheckpointError as exc:
                    out[target] = {"from": name, "error": str(exc)}
        return out

    def _move_locked(self, old: str, new: str, only_token: str | None) -> list[str]:
        try:
            return self._move(old, new, only_token)
        except SymlinkRefused as exc:
            raise _refuse_link(exc.filename, self.root) from None
        except OSError as exc:
            raise write_error(exc, self.root, MOVING) from None

    def _move(self, old: str, new: str, only_token: str | None) -> list[str]:
        old, new = config.canonical_notebook(old), config.canonical_notebook(new)
        dst = self.notebook_dir(new)
        sources = [d for d in self._key_dirs(old) if d != dst and self._real_dir(d)]
        plan = [(src, name) for src in sources for name in self._manifest_names(src)
                if only_token is None or _manifest_token(os.path.join(src, "manifests", name)) == only_token]
        if not sources or (only_token is not None and not plan):
            return []
        dst_exists = self._real_dir(dst)
        info = self._notebook_info(dst) if dst_exists else {}
        own = self._manifest_names(dst) if dst_exists else []
        if own and old not in info.get("renamed_from", []) and only_token is None:
            # The server renamed a file onto `new`, so no file is there: these are an earlier notebook's, deleted
            # (or moved outside Jupyter). Refusing left them under the name the renamed notebook's kernel uses from
            # now on: its restore brought back the other notebook's variables and its retention deleted them.
            # They step aside under a name of their own, still listed, and found by their ids under `new`.
            self._set_aside(dst, new, info)
            dst_exists, info, own = False, {}, []
        # never into another notebook's history: only into the one old's moved into
        if own and old not in info.get("renamed_from", []):
            raise HistoryExists(
                f"{new!r} already has {len(own)} checkpoint(s) of its own in {self.root} (of an earlier notebook "
                f"at that path), so the checkpoints of {old!r} were not moved over them: they stay under {old!r} "
                f"(%gkews_checkpoint list --notebook {config.magic_quoted(old)} shows them, restore --notebook "
                f"{config.magic_quoted(old)} --checkpoint ID "
                f"brings one back)")
        lineage = [a for a in dict.fromkeys(
            [a for src in sources for a in self._notebook_info(src).get("renamed_from", [])]
            + info.get("renamed_from", []) + [old]) if a != new]
        record = {"notebook": new, "renamed_from": lineage}
        base = os.path.join(self.root, "notebooks")
        whole = self.notebook_dir(old)
        if only_token is None and not dst_exists and sources == [whole]:
            # first the record, then one rename: a crash in between leaves a folder that notebooks() still
            # calls old (its key is old's) and that a later move takes over. On a full volume the record goes
            # through the blocks of the one there: left under old, the history was a new notebook's at old's path
            # (its retention deleted it)
            write_json_durable_or_in_place(record, os.path.join(whole, "notebook.json"), self.tmp_dir)
            os.rename(whole, dst)
            fsync_dir(base)
            return sorted((name[:-5] for _src, name in plan), reverse=True)
        private_dir(dst)
        if {k: info.get(k) for k in record} != record:
            write_json_durable_or_in_place(record, os.path.join(dst, "notebook.json"), self.tmp_dir)
        mdir = os.path.join(dst, "manifests")
        private_dir(mdir)
        moved = []
        for src, name in plan:
            target = os.path.join(mdir, name)
            if not os.path.lexists(target):  # ids are unique: never over a file
                os.rename(os.path.join(src, "manifests", name), target)
                moved.append(name[:-5])
        fsync_dir(mdir)
        for src in sources:
            if plan:
                with contextlib.suppress(FileNotFoundError):
                    fsync_dir(os.path.join(src, "manifests"))
            if only_token is None:
                for aux in NOTEBOOK_FILES:
                    path = os.path.join(src, aux)
                    if not (os.path.isfile(path) and not os.path.islink(path)):
                        continue
                    if own and os.path.lexists(os.path.join(dst, aux)):
                        remove_quietly(path)  # the moved notebook's own is the one in use
                    else:
                        os.replace(path, os.path.join(dst, aux))
            self._drop_if_empty(src)
        fsync_dir(dst)
        return sorted(moved, reverse=True)

    def _set_aside(self, key_dir: str, name: str, info: dict) -> str:
        """Move the history under `name` (an earlier notebook's) to `<stem> (earlier notebook, DATE)<suffix>`,
        whose notebook.json lists `name` in renamed_from (an id saved under it is still found by that name)."""
        stem, suffix = os.path.splitext(name)
        date = time.strftime("%Y-%m-%d %H%M%S", time.gmtime())
        for n in range(1000):
            aside = config.canonical_notebook(f"{stem} (earlier notebook, {date}{f' {n}' if n else ''}){suffix}")
            target = self.notebook_dir(aside)
            if not os.path.lexists(target):
                break
        else:
            raise HistoryExists(f"{name!r} already has checkpoints of an earlier notebook, and no name to set them "
                                f"aside under is free in {self.root}")
        lineage = [a for a in dict.fromkeys(info.get("renamed_from", []) + [name]) if a != aside]
        write_json_durable({"notebook": aside, "renamed_from": lineage}, os.path.join(key_dir, "notebook.json"),
                           self.tmp_dir)
        os.rename(key_dir, target)
        fsync_dir(os.path.dirname(key_dir))
        return aside

    def _drop_if_empty(self, key_dir: str) -> None:
        """Remove a notebook's folder that holds nothing but its notebook.json and no manifest."""
        mdir = os.path.join(key_dir, "manifests")
        names = set(os.listdir(key_dir))
        if names - {"notebook.json", "manifests"} or ("manifests" in names and os.listdir(mdir)):
            return
        with contextlib.suppress(OSError):
            if "manifests" in names:
                os.rmdir(mdir)
            remove_quietly(os.path.join(key_dir, "notebook.json"))
            os.rmdir(key_dir)
            fsync_dir(os.path.dirname(key_dir))

    # -- reading ----------------------------------------------------------------------------------
    def checkpoint_ids(self, notebook: str) -> list[str]:
        """Committed checkpoints of a notebook, newest first (also those filed under an older name)."""
        ids = set()
        for mdir in self._manifest_dirs(notebook):
            if self._readable_dir(os.path.dirname(mdir)) and self._readable_dir(mdir):
                ids.update(n[:-5] for n in os.listdir(mdir) if n.endswith(".json") and CHECKPOINT_ID.fullmatch(n[:-5]))
        return sorted(ids, reverse=True)

    def load_manifest(self, notebook: str, checkpoint_id: str | None = None, lean: bool = False) -> dict:
        """The newest checkpoint of the notebook, or the one named: also one saved under this name before a
        rename moved it (move_notebook), which a paused notebook, a pin or a message may still name so.
        lean: only what retention reads (read_manifest_file)."""
        ids = self.checkpoint_ids(notebook)
        if checkpoint_id is not None and checkpoint_id not in ids and isinstance(checkpoint_id, str):
            path = self._manifest_path(notebook, checkpoint_id, forwarded=True)
            if path is not None:
                return self.read_manifest_file(path, lean)
        if not ids and checkpoint_id is not None:  # the id named (a paused notebook's): not "save one"
            raise CheckpointNotFound(f"checkpoint {checkpoint_id!r} does not exist for notebook {notebook!r}: it has "
                                     f"no checkpoint in {self.root} (deleted since, or another store)")
        if not ids:
            raise CheckpointNotFound(
                f"no checkpoint for notebook {notebook!r} in {self.root}; save one with %gkews_checkpoint save")
        if checkpoint_id is None:
            checkpoint_id = ids[0]
        elif checkpoint_id not in ids:
            raise CheckpointNotFound(
                f"checkpoint {checkpoint_id!r} does not exist for notebook {notebook!r}; "
                f"%gkews_checkpoint list shows the ones that do")
        path = self._manifest_path(notebook, checkpoint_id, forwarded=True)
        if path is None:  # deleted since it was listed
            raise CheckpointNotFound(f"checkpoint {checkpoint_id!r} does not exist for notebook {notebook!r}")
        return self.read_manifest_file(path, lean)

    @staticmethod
    def read_manifest_file(path: str, lean: bool = False) -> dict:
        """The manifest, checked. lean: only `auto`, `created`, `blobs`, `partial` and `keeps` (what retention
        and the collection read at every save, in every manifest of the store), shared and not to be changed:
        the same bytes are not parsed again."""
        name = os.path.basename(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
            digest = digest_bytes(data)
            if lean and digest in _LEAN:
                return _LEAN[digest]
            manifest = json.loads(data)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise CorruptManifest(f"manifest {name} cannot be read ({exc}); {_delete_advice(name[:-5])}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            raise CorruptManifest(f"manifest {name} is not a gkews checkpoint manifest")
        if manifest.get("version") != MANIFEST_VERSION:
            raise CorruptManifest(f"manifest {name} has format version {manifest.get('version')}; this "
                                  f"kernel_state reads version {MANIFEST_VERSION}: upgrade jupyter-gkews")
        checksum = manifest.get("checksum")
        if checksum is None:  # written before manifests had one (development builds of 2026-11-29)
            raise CorruptManifest(f"manifest {name} has no checksum: a development build before manifests carried "
                                  f"one wrote it, and a damaged offset in it could not be told; "
                                  f"{_delete_advice(name[:-5])}")
        known = _VERIFIED.get(digest) == checksum  # these very bytes, verified
        if not known and checksum != manifest_checksum(manifest):
            # a flipped digit in an offset, a shape or a name would otherwise restore a wrong value silently
            raise CorruptManifest(f"manifest {name} does not match its checksum: it was modified or damaged; "
                                  f"{_delete_advice(name[:-5])}")
        for field, kind in (("variables", dict), ("storages", dict), ("tensors", dict), ("arrays", dict),
                            ("blobs", dict), ("skipped", dict), ("modules", dict), ("id", str)):
            if not isinstance(manifest.get(field), kind):
                raise CorruptManifest(f"manifest {name} lacks a valid {field!r} field")
        _remember(digest, manifest)
        return _LEAN[digest] if lean else manifest

    def list(self, notebook: str) -> list[dict]:
        rows = []
        for cid in self.checkpoint_ids(notebook):
            try:
                m = self.load_manifest(notebook, cid)
            except CorruptManifest as exc:
                rows.append({"id": cid, "error": str(exc)})
                continue
            except CheckpointNotFound:  # deleted since it was listed (retention of a save under way)
                continue
            row = summary(m)
            # a manifest keeps the name it was saved under; since a rename, the notebook is called so
            row["notebook"] = config.canonical_notebook(notebook)
            rows.append(row)
        return rows

    def delete(self, notebook: str, checkpoint_id: str) -> None:
        """Delete one checkpoint by its id (never a path), then the blobs only it needed."""
        if not isinstance(checkpoint_id, str) or not CHECKPOINT_ID.fullmatch(checkpoint_id):
            raise CheckpointNotFound(f"{checkpoint_id!r} is not a checkpoint id (ids look like {new_checkpoint_id()}); "
                                     f"%gkews_checkpoint list shows this notebook's checkpoints")
        with self.lock(exclusive=True):
            path = self._manifest_path(notebook, checkpoint_id)
            if path is None:
                raise CheckpointNotFound(f"checkpoint {checkpoint_id!r} does not exist for notebook {notebook!r}")
            pins.refuse_if_pinned(self.root, checkpoint_id)  # a paused notebook resumes from it
            os.unlink(path)
            fsync_dir(os.path.dirname(path))
            # its last checkpoint gone: no empty folder left for `notebooks()` and the cleanup to count
            self._drop_if_empty(os.path.dirname(os.path.dirname(path)))
            self._collect()

    def withdraw(self, notebook: str, checkpoint_id: str) -> None:
        """Remove the manifest of a checkpoint this process has just committed, keeping its blobs: the save
        made in its place names them (readback.py). Caller holds the exclusive lock."""
        path = self._manifest_path(notebook, checkpoint_id)
        if path is not None:
            os.unlink(path)
            fsync_dir(os.path.dirname(path))

    # -- retention and garbage collection ---------------------------------------------------------
    def apply_retention(self, notebook: str, keep_last: int | None = None, max_bytes: int | None = None,
                        auto: bool = False) -> dict:
        out = self.enforce_retention([notebook], keep_last, max_bytes, auto=auto)
        return {"deleted": out["deleted"].get(notebook, []), "bytes_freed": out["bytes_freed"],
                "blobs_kept": out["blobs_kept"]}

    def enforce_retention(self, notebooks, keep_last: int | None = None, max_bytes: int | None = None,
                          max_age: float = 0, dry_run: bool = False, auto: bool = False) -> dict:
        """Delete the checkpoints of these notebooks that retention lets go, then every blob no manifest
        references. Only complete (readable) checkpoints count: the newest of them is always kept, and a
        damaged manifest is never chosen here (it is deleted by name). max_age in seconds, 0: no limit.
        With dry_run nothing is deleted and the same answer is given.

        Saved and automatic (kernel undo) checkpoints are two separate sets, each with its own limits:
        auto=True applies the automatic ones' (config.auto_keep_last, config.auto_max_bytes) to them alone."""
        keep, budget = retention_limits(keep_last, max_bytes, auto)
        if not max_age >= 0:  # negative (or NaN): a cutoff in the future would make every checkpoint "old"
            raise ValueError(f"max_age_days must be 0 (no age limit) or positive (got {max_age / 86400:g})")
        # a folder that is no store yet has nothing to clean: it is left as it was (a mistyped root became a
        # store, marker, lock file and mode 0700, under a dry run); one holding other files is refused
        if not os.path.isdir(self.root) or (not self._refuse_unless_ours() and not os.listdir(self.root)):
            return {"deleted": {}, "bytes_freed": 0, "blobs_kept": None}
        if dry_run:  # the cleanup refuses a link where a folder of the layout belongs (ensure): so does its dry run
            for d in LAYOUT:
                self._real_dir(os.path.join(self.root, d))
        # a dry run waits for the saves under way, as the cleanup does, but writes nothing: run alongside one, it
        # counted the save's temp files and its blobs not named by a manifest yet as bytes to free
        with self.lock(exclusive=True, reading=dry_run):
            deleted, dropped = {}, set()
            for notebook in notebooks:
                doomed = self._expired(notebook, keep, budget, max_age, auto)
                if doomed:
                    deleted[notebook] = doomed
                    dropped.update(self._manifest_path(notebook, cid) for cid in doomed)
            freed = sum(os.path.getsize(p) for p in dropped)
            if not dry_run:
                for path in dropped:
                    remove_quietly(path)
                for mdir in {os.path.dirname(p) for p in dropped}:
                    fsync_dir(mdir)
            collected, kept = self._collect(dropped=dropped, dry_run=dry_run)
        return {"deleted": deleted, "bytes_freed": freed + collected, "blobs_kept": kept}

    def _expired(self, notebook: str, keep: int, budget: int, max_age: float, auto: bool = False) -> list[str]:
        manifests, others = {}, {}
        for cid in self.checkpoint_ids(notebook):
            try:
                manifest = self.load_manifest(notebook, cid, lean=True)
            except CorruptManifest:
                continue
            if bool(manifest.get("auto")) == auto:  # the other set's limits are not these
                manifests[cid] = manifest
            else:
                others[cid] = manifest
        kept = list(manifests)  # newest first
        # saves of some variables (`save NAMES`, --exclude) after the newest whole one: that one stays, else
        # five `save results` would retire the only checkpoint holding the model
        whole = next((cid for cid in kept if not manifests[cid].get("partial")), None)
        doomed = kept[keep:]
        kept = kept[:keep]
        if max_age:
            cutoff = time.time() - max_age
            old = [cid for cid in kept[1:] if _created_epoch(manifests[cid]) < cutoff]
            doomed += old
            kept = [cid for cid in kept if cid not in old]
        if whole in doomed:
            doomed.remove(whole)
            kept.append(whole)
        # the only copy of what a restore could not bring back, while a checkpoint kept says so (and so on down)
        needed = {k for cid in kept + list(others) for k in (manifests.get(cid) or others[cid]).get("keeps", ())}
        while needed & set(doomed):
            for cid in needed & set(doomed):
                doomed.remove(cid)
                kept.append(cid)
            needed |= {k for cid in kept for k in manifests[cid].get("keeps", ())}

        def size():
            blobs: dict[str, int] = {}
            for cid in kept:
                blobs.update(manifests[cid]["blobs"])
            return sum(blobs.values())
        while budget and len(kept) > 1 and size() > budget:
            droppable = [cid for cid in kept[1:] if cid != whole and cid not in needed]
            if not droppable:
                break
            kept.remove(droppable[-1])
            doomed.append(droppable[-1])
        return pins.without_pinned(self.root, doomed)

    def _collect(self, dropped: set[str] = frozenset(), dry_run: bool = False) -> tuple[int, str | None]:
        """Delete blobs that no manifest (other than those in dropped) references, and stale temp files;
        return the bytes freed (or that would be, with dry_run) and, when no blob could be collected, why.
        Caller holds the exclusive lock (so the layout was checked: the root is ours and blobs/, tmp/ are
        real directories).

        Only regular files under the names the store writes are removed; anything else is left alone."""
        doomed = [os.path.join(self.tmp_dir, n) for n in _listed(self.tmp_dir) if TEMP_NAME.fullmatch(n)]
        referenced: set[str] | None = set()
        nb_root = os.path.join(self.root, "notebooks")
        try:
            for key in os.listdir(nb_root):
                mdir = os.path.join(nb_root, key, "manifests")
                if not (KEY_NAME.fullmatch(key) and self._real_dir(os.path.join(nb_root, key))
                        and self._real_dir(mdir)):
                    continue
                for name in os.listdir(mdir):
                    if not (name.endswith(".json") and CHECKPOINT_ID.fullmatch(name[:-5])) \
                            or os.path.join(mdir, name) in dropped:
                        continue
                    where = os.path.join(mdir, name)
                    referenced.update(self.read_manifest_file(where, lean=True)["blobs"])
        except (CorruptManifest, NotAStore) as exc:
            referenced = None  # cannot tell what every checkpoint needs: keep every blob until that is fixed
            at = f" ({where})" if isinstance(exc, CorruptManifest) else ""
            kept = (f"no unused blob was removed: {exc}{at}; which blobs the checkpoints need cannot be told "
                    f"until that is fixed")
        if referenced is not None:
            names = [n for n in _listed(self.blob_dir) if BLOB_NAME.fullmatch(n)]
            referenced |= self._bases(n for n in names if n.endswith(".enc") and n[:-4] in referenced)
            doomed += [os.path.join(self.blob_dir, n) for n in names if n.split(".", 1)[0] not in referenced]
        freed = 0
        for path in doomed:
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    continue  # a link or a directory under our name: not something we wrote
                freed += st.st_size if st.st_nlink == 1 else 0  # another link keeps the bytes
                if not dry_run:
                    os.unlink(path)
            except OSError:  # gone meanwhile, or not ours to remove: the next collection tries again
                pass
        return freed, (kept if referenced is None else None)

    def _bases(self, encoded_names) -> set[str]:
        """The blobs these encoded blobs are XORed with: kept while they are (their manifests may not
        name them: a later checkpoint that found a blob unchanged names that blob alone)."""
        from .encoded_blob import base_of
        return {b for b in (base_of(os.path.join(self.blob_dir, n)) for n in encoded_names) if b}


def _saved_under(path: str, names: list[str]) -> bool:
    """Whether a manifest was saved under one of names (a damaged one is let through: its reader names the damage)."""
    try:
        with open(path, "rb") as f:
            saved_as = json.loads(f.read()).get("notebook")
    except (OSError, ValueError, AttributeError):
        return True
    return not isinstance(saved_as, str) or config.canonical_notebook(saved_as) in names


def _manifest_token(path: str) -> str | None:
    """The identity token of the process that wrote this manifest (None when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return (json.loads(f.read()).get("identity") or {}).get("token")
    except (OSError, ValueError, AttributeError):
        return None


def _flock(fd: int, mode: int, timeout: float | None, root: str) -> None:
    if timeout is None:
        fcntl.flock(fd, mode)
        return
    deadline, pause = time.monotonic() + timeout, 0.01
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise StoreBusy(f"the checkpoint store {root} stayed busy for {timeout:.0f} s (a save, a restore "
                                f"or a cleanup holds it); nothing was changed, try again once it is done") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


#: what this process knows of the manifests it verified or wrote, by the xxh3 of their bytes (about 1 ms for
#: 10 MB): their checksum, and the lean view retention reads. Each save reads the notebook's manifests
#: (retention) and every manifest of the store (the collection); checking and parsing them again cost more
#: than the save of 20,000 tiny tensors itself (0.36 s to check one manifest of them, 0.14 s to parse it).
#: Bounded by the blobs the lean views list (a few MB; in a kernel, beside the user's state): the oldest go
#: first. A lock: kernel undo's writer thread commits too.
_VERIFIED: dict[str, str] = {}
_LEAN: dict[str, dict] = {}
_KNOWN_BLOBS = 100_000
_known = {"listed": 0}
_known_lock = threading.Lock()


def _remember(digest: str, manifest: dict) -> None:
    """What to know of the manifest whose bytes have this digest (hashed once, by the caller)."""
    view = {"auto": manifest.get("auto"), "created": manifest.get("created"), "blobs": dict(manifest["blobs"]),
            "partial": bool(manifest.get("named") or manifest.get("excluded")),
            # the checkpoints holding variables a restore could not bring back (checkpoint._carry_unrestored)
            "keeps": sorted({r["kept_in"] for r in manifest["skipped"].values()
                             if isinstance(r, dict) and isinstance(r.get("kept_in"), str)})}
    with _known_lock:
        old = _LEAN.pop(digest, None)
        _known["listed"] += len(view["blobs"]) + 1 - (len(old["blobs"]) + 1 if old else 0)
        _LEAN[digest], _VERIFIED[digest] = view, manifest["checksum"]
        while _known["listed"] > _KNOWN_BLOBS and len(_LEAN) > 1:
            oldest = next(iter(_LEAN))
            _known["listed"] -= len(_LEAN.pop(oldest)["blobs"]) + 1
            _VERIFIED.pop(oldest, None)


def manifest_checksum(manifest: dict) -> str:
    """The xxh3-128 of the manifest's content without its own checksum field, independent of key order."""
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return digest_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _created_epoch(manifest: dict) -> float:
    try:
        return utc_epoch(manifest["created"])
    except (KeyError, TypeError, ValueError):
        return time.time()  # no readable date: never old


def summary(manifest: dict) -> dict:
    return {
        "id": manifest["id"],
        "created": manifest.get("created"),
        "notebook": manifest.get("notebook"),
        "bytes": sum(manifest["blobs"].values()),
        "variables": len(manifest["variables"]) + len(manifest["modules"]),
        "skipped": len(manifest["skipped"]),
        "identity": manifest.get("identity", {}),
        "auto": bool(manifest.get("auto")),
        "label": manifest.get("label"),
        # a save of some variables: which (`save NAMES`) or which it left out (--exclude)
        **({"only": sorted(manifest["variables"])} if manifest.get("named") else {}),
        **({"excluded": list(manifest["excluded"])} if manifest.get("excluded") else {}),
    }


def variable_blobs(manifest: dict, name: str) -> set[str]:
    """The blobs a variable's restore reads in this checkpoint: its pickle, and the blobs (a whole one, a pack,
    or chunks) of its storages and of the storages those are views of."""
    record = manifest["variables"].get(name) or {}
    found = {record["pickle"]} if record.get("pickle") else set()
    storages, todo, seen = manifest.get("storages") or {}, list(record.get("storages") or []), set()
    while todo:
        skey = todo.pop()
        if skey in seen or not isinstance(storages.get(skey), dict):
            continue
        seen.add(skey)
        storage = storages[skey]
        if storage.get("blob"):
            found.add(storage["blob"])
        found.update(chunk[0] for chunk in storage.get("chunks") or [])
        if isinstance(storage.get("view_of"), dict):
            todo.append(storage["view_of"].get("storage"))
    return found
