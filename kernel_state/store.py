"""The checkpoint store on disk.

    <root>/blobs/<xxh3-128>.safetensors   tensor and array data, shared by all checkpoints
    <root>/blobs/<xxh3-128>.pkl           one pickled variable (its tensors by reference)
    <root>/notebooks/<key>/notebook.json  which notebook the key stands for
    <root>/notebooks/<key>/manifests/<id>.json
    <root>/tmp/                           files being written; anything here is unfinished

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
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

from . import config
from .errors import CheckpointNotFound, CheckpointWriteError, CorruptManifest
from .fsutil import fsync_dir, fsync_file, remove_quietly, temp_path, write_json_durable
from .hashing import digest_bytes
from .safetensors_io import write_blob

MANIFEST_FORMAT = "gkews-checkpoint"
_sync_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gkews-fsync")
MANIFEST_VERSION = 1

_WRITE_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                 errno.EFBIG: "the file size limit was reached", errno.EROFS: "the file system is read-only",
                 errno.EACCES: "permission denied", errno.EPERM: "permission denied"}


def write_error(exc: OSError, root: str) -> CheckpointWriteError:
    why = _WRITE_ERRNOS.get(exc.errno, exc.strerror or str(exc))
    return CheckpointWriteError(
        f"could not write the checkpoint to {root}: {why} ({exc.strerror or exc}). Free space there, or "
        f"point GKEWS_CHECKPOINT_ROOT (c.GkewsApp.checkpoint_root) at a volume with room; "
        f"the previous checkpoint is intact.")


def new_checkpoint_id() -> str:
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{stamp}-{int(now * 1000) % 1000:03d}-{secrets.token_hex(2)}"


class Store:
    def __init__(self, root: str | None = None):
        self.root = config.checkpoint_root(root)
        self.blob_dir = os.path.join(self.root, "blobs")
        self.tmp_dir = os.path.join(self.root, "tmp")
        self.staged: dict[str, str] = {}  # final path -> temp path, written but not yet durable

    # -- layout ---------------------------------------------------------------------------------
    def ensure(self) -> None:
        try:
            for d in (self.blob_dir, self.tmp_dir, os.path.join(self.root, "notebooks")):
                os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise write_error(exc, self.root) from None

    def notebook_dir(self, notebook: str) -> str:
        return os.path.join(self.root, "notebooks", config.notebook_key(notebook))

    def manifest_dir(self, notebook: str) -> str:
        return os.path.join(self.notebook_dir(notebook), "manifests")

    def blob_path(self, digest: str, ext: str) -> str:
        return os.path.join(self.blob_dir, f"{digest}.{ext}")

    def has_blob(self, digest: str, ext: str) -> bool:
        return os.path.exists(self.blob_path(digest, ext))

    # -- locking: saves share, garbage collection is exclusive -----------------------------------
    @contextlib.contextmanager
    def lock(self, exclusive: bool = False):
        self.ensure()
        fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    # -- writing ----------------------------------------------------------------------------------
    def put_tensors(self, entries, progress=None) -> tuple[str, int, bool]:
        """Stage a safetensors blob; returns (digest, size, newly written)."""
        try:
            tmp, digest, size = write_blob(entries, self.tmp_dir, progress)
        except OSError as exc:
            raise write_error(exc, self.root) from None
        return digest, size, self._stage(tmp, digest, "safetensors")

    def put_bytes(self, data: bytes) -> tuple[str, int, bool]:
        digest = digest_bytes(data)
        final = self.blob_path(digest, "pkl")
        if final in self.staged or os.path.exists(final):
            return digest, len(data), False
        tmp = temp_path(self.tmp_dir, ".pkl")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
        except OSError as exc:
            remove_quietly(tmp)
            raise write_error(exc, self.root) from None
        self.staged[final] = tmp
        return digest, len(data), True

    def _stage(self, tmp: str, digest: str, ext: str) -> bool:
        final = self.blob_path(digest, ext)
        if final in self.staged or os.path.exists(final):
            remove_quietly(tmp)
            return False
        self.staged[final] = tmp
        return True

    def commit(self, notebook: str, manifest: dict) -> None:
        """Make the checkpoint exist: every staged blob durable and in place first, then the manifest."""
        mdir = self.manifest_dir(notebook)
        try:
            list(_sync_pool.map(fsync_file, self.staged.values()))
            for final, tmp in self.staged.items():
                os.replace(tmp, final)
            self.staged.clear()
            fsync_dir(self.blob_dir)
            os.makedirs(mdir, exist_ok=True)
            info = os.path.join(self.notebook_dir(notebook), "notebook.json")
            if not os.path.exists(info):
                write_json_durable({"notebook": notebook}, info, self.tmp_dir)
            manifest["checksum"] = manifest_checksum(manifest)
            write_json_durable(manifest, os.path.join(mdir, manifest["id"] + ".json"), self.tmp_dir)
        except OSError as exc:
            raise write_error(exc, self.root) from None

    # -- reading ----------------------------------------------------------------------------------
    def checkpoint_ids(self, notebook: str) -> list[str]:
        """Committed checkpoints of a notebook, newest first."""
        try:
            names = os.listdir(self.manifest_dir(notebook))
        except FileNotFoundError:
            return []
        return sorted((n[:-5] for n in names if n.endswith(".json")), reverse=True)

    def load_manifest(self, notebook: str, checkpoint_id: str | None = None) -> dict:
        ids = self.checkpoint_ids(notebook)
        if not ids:
            raise CheckpointNotFound(
                f"no checkpoint for notebook {notebook!r} in {self.root}; save one with %gkews_checkpoint save")
        if checkpoint_id is None:
            checkpoint_id = ids[0]
        elif checkpoint_id not in ids:
            raise CheckpointNotFound(
                f"checkpoint {checkpoint_id!r} does not exist for notebook {notebook!r}; "
                f"%gkews_checkpoint list shows the ones that do")
        return self.read_manifest_file(os.path.join(self.manifest_dir(notebook), checkpoint_id + ".json"))

    @staticmethod
    def read_manifest_file(path: str) -> dict:
        name = os.path.basename(path)
        try:
            with open(path, "rb") as f:
                manifest = json.loads(f.read())
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise CorruptManifest(f"manifest {name} cannot be read ({exc}); delete it with "
                                  f"%gkews_checkpoint delete {name[:-5]} and restore an older one") from None
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            raise CorruptManifest(f"manifest {name} is not a gkews checkpoint manifest")
        if manifest.get("version") != MANIFEST_VERSION:
            raise CorruptManifest(f"manifest {name} has format version {manifest.get('version')}; this "
                                  f"kernel_state reads version {MANIFEST_VERSION}: upgrade jupyter-gkews")
        if manifest.get("checksum") != manifest_checksum(manifest):
            # a flipped digit in an offset, a shape or a name would otherwise restore a wrong value silently
            raise CorruptManifest(f"manifest {name} does not match its checksum: it was modified or damaged; "
                                  f"delete it with %gkews_checkpoint delete {name[:-5]} and restore an older one")
        for field, kind in (("variables", dict), ("storages", dict), ("tensors", dict), ("arrays", dict),
                            ("blobs", dict), ("skipped", dict), ("modules", dict), ("id", str)):
            if not isinstance(manifest.get(field), kind):
                raise CorruptManifest(f"manifest {name} lacks a valid {field!r} field")
        return manifest

    def list(self, notebook: str) -> list[dict]:
        rows = []
        for cid in self.checkpoint_ids(notebook):
            try:
                m = self.load_manifest(notebook, cid)
            except CorruptManifest as exc:
                rows.append({"id": cid, "error": str(exc)})
                continue
            rows.append(summary(m))
        return rows

    def delete(self, notebook: str, checkpoint_id: str) -> None:
        path = os.path.join(self.manifest_dir(notebook), checkpoint_id + ".json")
        if not os.path.exists(path):
            raise CheckpointNotFound(f"checkpoint {checkpoint_id!r} does not exist for notebook {notebook!r}")
        with self.lock(exclusive=True):
            os.unlink(path)
            fsync_dir(os.path.dirname(path))
            self._collect()

    # -- retention and garbage collection ---------------------------------------------------------
    def apply_retention(self, notebook: str, keep_last: int | None = None, max_bytes: int | None = None,
                        auto: bool = False) -> dict:
        out = self.enforce_retention([notebook], keep_last, max_bytes, auto=auto)
        return {"deleted": out["deleted"].get(notebook, []), "bytes_freed": out["bytes_freed"]}

    def enforce_retention(self, notebooks, keep_last: int | None = None, max_bytes: int | None = None,
                          max_age: float = 0, dry_run: bool = False, auto: bool = False) -> dict:
        """Delete the checkpoints of these notebooks that retention lets go, then every blob no manifest
        references. Only complete (readable) checkpoints count: the newest of them is always kept, and a
        damaged manifest is never chosen here (it is deleted by name). max_age in seconds, 0: no limit.
        With dry_run nothing is deleted and the same answer is given.

        Saved and automatic (kernel undo) checkpoints are two separate sets, each with its own limits:
        auto=True applies the automatic ones' (config.auto_keep_last, config.auto_max_bytes) to them alone."""
        keep = config.auto_keep_last(keep_last) if auto else config.keep_last(keep_last)
        budget = config.auto_max_bytes(max_bytes) if auto else config.max_bytes(max_bytes)
        with self.lock(exclusive=True):
            deleted, dropped = {}, set()
            for notebook in notebooks:
                doomed = self._expired(notebook, keep, budget, max_age, auto)
                if doomed:
                    deleted[notebook] = doomed
                    dropped.update(os.path.join(self.manifest_dir(notebook), cid + ".json") for cid in doomed)
            freed = sum(os.path.getsize(p) for p in dropped)
            if not dry_run:
                for path in dropped:
                    remove_quietly(path)
                for mdir in {os.path.dirname(p) for p in dropped}:
                    fsync_dir(mdir)
            freed += self._collect(dropped=dropped, dry_run=dry_run)
        return {"deleted": deleted, "bytes_freed": freed}

    def _expired(self, notebook: str, keep: int, budget: int, max_age: float, auto: bool = False) -> list[str]:
        manifests = {}
        for cid in self.checkpoint_ids(notebook):
            try:
                manifest = self.load_manifest(notebook, cid)
            except CorruptManifest:
                continue
            if bool(manifest.get("auto")) == auto:  # the other set's limits are not these
                manifests[cid] = manifest
        kept = list(manifests)  # newest first
        doomed = kept[keep:]
        kept = kept[:keep]
        if max_age:
            cutoff = time.time() - max_age
            old = [cid for cid in kept[1:] if _created_epoch(manifests[cid]) < cutoff]
            doomed += old
            kept = [cid for cid in kept if cid not in old]

        def size():
            blobs: dict[str, int] = {}
            for cid in kept:
                blobs.update(manifests[cid]["blobs"])
            return sum(blobs.values())
        while budget and len(kept) > 1 and size() > budget:
            doomed.append(kept.pop())
        return doomed

    def _collect(self, dropped: set[str] = frozenset(), dry_run: bool = False) -> int:
        """Delete blobs that no manifest (other than those in dropped) references, and stale temp files;
        return the bytes freed (or that would be, with dry_run). Caller holds the exclusive lock."""
        referenced: set[str] = set()
        nb_root = os.path.join(self.root, "notebooks")
        for key in os.listdir(nb_root) if os.path.isdir(nb_root) else []:
            mdir = os.path.join(nb_root, key, "manifests")
            for name in os.listdir(mdir) if os.path.isdir(mdir) else []:
                if not name.endswith(".json") or os.path.join(mdir, name) in dropped:
                    continue
                try:
                    referenced.update(self.read_manifest_file(os.path.join(mdir, name))["blobs"])
                except CorruptManifest:
                    return 0  # cannot tell what it needs: keep every blob until it is deleted
        freed = 0
        doomed = [os.path.join(self.blob_dir, n) for n in os.listdir(self.blob_dir)
                  if n.split(".", 1)[0] not in referenced]
        doomed += [os.path.join(self.tmp_dir, n) for n in os.listdir(self.tmp_dir)]
        for path in doomed:
            try:
                freed += os.path.getsize(path)
                if not dry_run:
                    os.unlink(path)
            except OSError:  # gone meanwhile, or not ours to remove: the next collection tries again
                pass
        return freed


def manifest_checksum(manifest: dict) -> str:
    """The xxh3-128 of the manifest's content without its own checksum field, independent of key order."""
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return digest_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _created_epoch(manifest: dict) -> float:
    try:
        return float(calendar.timegm(time.strptime(manifest["created"], "%Y-%m-%dT%H:%M:%SZ")))
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
    }
