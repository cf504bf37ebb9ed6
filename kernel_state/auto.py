"""Kernel undo: an automatic checkpoint after every cell, written behind the user's back.

When it is on, an IPython post_run_cell hook takes, after every cell that completes, an incremental
checkpoint of the namespace as it is at the end of that cell, labelled with the cell's execution count
and the first line of its source. It is the normal save (checkpoint.stage) split in two:

- in the foreground, before the next cell may run: finding what changed (torch storages by version
  counter, numpy buffers and chunks by content hash, as every save does), copying the changed bytes
  into staging memory and pickling the variables. That copy is what makes the checkpoint exactly the
  state at the end of its cell, even when the next cell mutates the same arrays in place;
- on one daemon thread: writing those bytes, fsync, the manifest, then the automatic checkpoints'
  retention. If the writer is still busy when the next cell ends, the snapshots coalesce: the newest
  replaces the queued one (taking over the bytes it still needs), and none is ever half-written, since
  a checkpoint exists only once its manifest is renamed into place.

It pauses itself while a save or restore runs (a pause or resume of the server), never delays a kernel
shutdown (the writer is a daemon; its unfinished temp files are collected like any other) or an
interrupt (an interrupted snapshot is dropped), and reports a failing save once until one succeeds.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import socket
import threading
import time

from . import checkpoint, config, counter, encoded_blob, pending_names
from .compare import held_through
from .dirty_pages import TRACKER
from .errors import CheckpointError, CheckpointNotFound, CheckpointWriteError
from .sizes import human_bytes
from .fsutil import write_json_durable
from .hashing import new_hasher
from .identity import STARTED, TOKEN
from .priority import background_priority
from .safetensors_io import build_header, read_base
from .staging_pool import StagingPool
from .store import Store, summary, write_error

ENV_SWITCH = "GKEWS_AUTO_CHECKPOINT"  # "1": on from the kernel's start (c.AutoCheckpoint.enabled too)


POOL = StagingPool()


def _staged_copy(mv, hasher=None) -> memoryview:
    """A private copy of bytes the user's next cell may change (a device storage's through pinned
    buffers), hashed into `hasher` (if any) as it is made."""
    if hasattr(mv, "host_copy"):
        copy = mv.host_copy()
        if hasher is not None:
            hasher.update(copy)
        return copy
    return POOL.copy(mv, hasher)


class StagingStore(Store):
    """The store a foreground capture writes into: new blobs are copied into memory, not written.

    `new` maps each blob's final path to what the writer has to put there; a blob already on disk, or
    still pending in the writer, counts as present, so it is neither copied nor written twice."""

    def __init__(self, root: str, pending):
        super().__init__(root)
        self.pending = pending
        self.new: dict[str, tuple] = {}
        self.staged = self.new  # Capture looks for blobs of this checkpoint here
        self.copied = 0

    def _present(self, final: str) -> bool:
        return final in self.new or self.pending(final) or _on_disk(final) is not None

    def has_blob(self, digest: str, ext: str) -> bool:
        if pending_names.is_pending(digest):  # staged by an earlier snapshot the writer has not named yet
            return digest in self.new or self.pending(digest)
        return self._present(self.blob_path(digest, ext))

    def put_bytes(self, data: bytes) -> tuple[str, int, bool]:
        from .hashing import digest_bytes
        digest = digest_bytes(data)
        final = self.blob_path(digest, "pkl")
        if self._present(final):
            return digest, len(data), False
        self.new[final] = ("bytes", bytes(data))
        return digest, len(data), True

    def put_tensors(self, entries, progress=None, position=None, digest=None) -> tuple[str, int, bool]:
        """position: where these bytes live in the process (a storage, a chunk of an array), so the
        writer can store them as a delta of what it last wrote from there. digest: the name the caller's
        hash of the live bytes gave (a numpy buffer or chunk, hashed to find what changed); the copy is
        hashed as it is made all the same, and named by that. A single torch storage without one gets a
        placeholder the writer replaces (pending_names.py)."""
        header = build_header([(n, d, s, mv.nbytes) for n, d, s, mv in entries])
        size = len(header) + sum(mv.nbytes for *_, mv in entries)
        if digest is not None and self._present(self.blob_path(digest, "safetensors")):
            return digest, size, False
        hasher = None
        if digest is not None or position is None or len(entries) != 1:
            hasher = new_hasher()
            hasher.update(header)
        # The name is that of the copy, which is what will be written: a thread of the notebook (a data
        # loader) may write the array between the caller's hash and this copy, and a copy filed under the
        # older hash failed every restore, and was taken for those bytes by every later checkpoint of them.
        # The callers take the name returned (Capture._write_buffer, _write_chunks).
        copies = [(n, d, s, _staged_copy(mv, hasher)) for n, d, s, mv in entries]
        if hasher is not None:
            digest = hasher.hexdigest()
            if self._present(self.blob_path(digest, "safetensors")):
                return digest, size, False
        key = pending_names.new() if digest is None else self.blob_path(digest, "safetensors")
        self.copied += size - len(header)
        self.new[key] = ("tensors", copies, position)
        return digest or key, size, True


class Snapshot:
    """One staged automatic checkpoint: its manifest and the blobs the writer still has to write."""

    def __init__(self, root: str, notebook: str, manifest: dict, blobs: dict, stage_seconds: float, copied: int):
        self.root, self.notebook, self.manifest, self.blobs = root, notebook, manifest, blobs
        self.stage_seconds, self.copied = stage_seconds, copied

    def take_over(self, older: "Snapshot") -> None:
        """This snapshot replaces `older`, which will never be written: keep the bytes of it we refer to."""
        needed = self.manifest["blobs"]
        for final, payload in older.blobs.items():
            if os.path.basename(final).split(".", 1)[0] in needed:
                self.blobs.setdefault(final, payload)


class Abandoned(Exception):
    pass


def _cell_of(snap) -> int | None:
    return ((snap.manifest.get("label") or {}).get("cell")) if snap is not None else None


class Writer:
    """The background thread: writes one snapshot at a time, the newest queued one next."""

    def __init__(self):
        self._cond = threading.Condition()
        self._next: Snapshot | None = None
        self._current: Snapshot | None = None
        self._thread: threading.Thread | None = None
        self.abandon = False
        self.coalesced = 0
        self.written = 0
        self.last: dict | None = None
        self.error: str | None = None
        self.write_seconds: list[float] = []
        # what became of each cell's snapshot, for rewind's message when it has no checkpoint (any more)
        self.cells_written: set[int] = set()
        self.cells_coalesced: set[int] = set()
        self.cells_failed: dict[int, str] = {}
        self._open = threading.Event()
        self._open.set()

    def hold(self) -> None:
        """Tests: the writer takes the next snapshot but writes it only after release()."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def pending(self, final: str) -> bool:
        with self._cond:
            return any(s is not None and final in s.blobs for s in (self._current, self._next))

    def submit(self, snap: Snapshot) -> None:
        with self._cond:
            if self._next is not None:
                snap.take_over(self._next)  # coalesce: the newest wins
                self.coalesced += 1
                self.cells_coalesced.add(_cell_of(self._next))
            self._next = snap
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gkews-auto-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def busy(self) -> bool:
        with self._cond:
            return self._next is not None or self._current is not None

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._next is None and self._current is None, timeout)

    def _run(self) -> None:
        background_priority()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._next is not None)
                snap, self._next, self._current = self._next, None, self._next
            self._open.wait()
            try:
                started = time.perf_counter()
                self._write(snap)
                seconds = time.perf_counter() - started
                with self._cond:
                    self.written += 1
                    self.cells_written.add(_cell_of(snap))
                    self.write_seconds = (self.write_seconds + [seconds])[-200:]
                    self.last = {**summary(snap.manifest), "write_seconds": round(seconds, 4),
                                 "stage_seconds": snap.stage_seconds}
                    self.error = None
                POOL.give(_staging_of(snap))  # written: its buffers can take the next snapshot's bytes
            except Abandoned:
                return
            except BaseException as exc:  # reported once by the hook; the next snapshot retries its bytes
                with self._cond:
                    self.error = str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"
                    self.cells_failed[_cell_of(snap)] = self.error
                    if self._next is not None:
                        self._next.take_over(snap)
            finally:
                with self._cond:
                    self._current = None
                    self._cond.notify_all()

    def _write(self, snap: Snapshot) -> None:
        store = Store(snap.root)
        store.ensure()
        try:
            with store.lock():
                blobs = self._name(store, snap)
                keyframes = {}
                for final, (kind, payload, *position) in blobs.items():
                    if self.abandon:
                        raise Abandoned()
                    if _on_disk(final):
                        continue
                    if kind == "bytes":
                        store.put_bytes(payload)
                    else:
                        self._put_tensors(store, snap.manifest, final, payload, position[0], keyframes)
                missing = [d for d in snap.manifest["blobs"] if not any(
                    p in store.staged or os.path.exists(p) for p in map(store.blob_path, (d,) * 3, BLOB_EXTS))]
                if missing:  # deleted since it was found unchanged (a delete by id, or another retention)
                    raise CheckpointWriteError(
                        f"{len(missing)} blob(s) this checkpoint shares with older ones were deleted meanwhile; "
                        f"the next cell's checkpoint writes them again")
                if self.abandon:
                    raise Abandoned()
                # staged before a rename the server told this kernel of since: filed under the new name (a
                # rename's move waits for this lock, so one committed under the old name just before moves too)
                snap.notebook = config.follow_renames(snap.notebook)
                store.commit(snap.notebook, snap.manifest)
                KEYFRAMES.update(keyframes)
        except BaseException:
            for tmp in store.staged.values():  # an unfinished write leaves nothing behind
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise
        store.apply_retention(snap.notebook, auto=True)

    def _name(self, store: Store, snap: Snapshot) -> dict:
        """Hash the copies staged under a placeholder, and put the names in the manifest; returns the
        blobs to write by their final paths."""
        blobs = {}
        for key, payload in snap.blobs.items():
            if pending_names.is_pending(key):
                if self.abandon:
                    raise Abandoned()
                if pending_names.resolve(key) == key:  # not named yet (else: taken over after a failure)
                    hasher = new_hasher()
                    hasher.update(build_header([(n, d, s, mv.nbytes) for n, d, s, mv in payload[1]]))
                    for entry in payload[1]:
                        hasher.update(entry[3])
                    pending_names.named(key, hasher.hexdigest())
                key = store.blob_path(pending_names.resolve(key), "safetensors")
            blobs.setdefault(key, payload)
        unknown = pending_names.resolve_manifest(snap.manifest)
        if unknown:  # staged by a snapshot that was never written and not taken over: never committed
            raise CheckpointWriteError(f"{len(unknown)} staged tensor(s) of an earlier automatic checkpoint "
                                       f"were lost with it; the next cell's checkpoint copies them again")
        return blobs

    @staticmethod
    def _put_tensors(store: Store, manifest: dict, final: str, payload, position, keyframes: dict) -> None:
        """One tensor's bytes as an encoded blob (XORed with what was last written from the same place,
        when that is on disk) if that saves a tenth; else as a plain safetensors blob."""
        digest = os.path.basename(final).split(".", 1)[0]
        if position is None or len(payload) != 1 or payload[0][3].nbytes < ENCODE_FROM:
            store.put_tensors(payload)
            return
        _name, dtype, shape, data = payload[0]
        base = KEYFRAMES.get((store.root, position))
        base_view = _base_bytes(store, base, data.nbytes) if base else None
        if base_view is None:
            base = None
        try:
            encoded = encoded_blob.write(store.tmp_dir, dtype, shape, data, base, base_view)
        except OSError as exc:
            raise write_error(exc, store.root) from None
        if encoded is None:
            store.put_tensors(payload)
            keyframes[(store.root, position)] = digest
            return
        tmp, size = encoded
        store._stage(tmp, digest, "enc")
        manifest["blobs"][digest] = size
        if base:  # named here too, so the retention's byte count sees it
            manifest["blobs"][base] = os.path.getsize(_on_disk(store.blob_path(base, "safetensors")))
        else:
            keyframes[(store.root, position)] = digest


def _staging_of(snap: Snapshot):
    for kind, payload, *_position in snap.blobs.values():
        if kind == "tensors":
            yield from (entry[3] for entry in payload)


BLOB_EXTS = ("safetensors", "enc", "pkl")
ENCODE_FROM = 1 << 20  # tensors and chunks from this size on may be stored encoded
# (store root, position) -> the last blob written from there without a base: the next one's base
KEYFRAMES: dict[tuple, str] = {}


def _on_disk(final: str) -> str | None:
    """The file a blob is stored in: `<X>.safetensors`, or `<X>.enc` for an encoded one."""
    if os.path.exists(final):
        return final
    if final.endswith(".safetensors"):
        encoded = final[:-len("safetensors")] + "enc"
        if os.path.exists(encoded):
            return encoded
    return None


def _base_bytes(store: Store, base: str, nbytes: int) -> memoryview | None:
    """The tensor bytes of a keyframe still on disk, or None (collected meanwhile, another size, or the
    same contents written since as another place's delta: a base may not have a base)."""
    try:
        view = read_base(store.blob_dir, base)
    except CheckpointError:
        return None
    return view if view.nbytes == nbytes else None


class AutoCheckpoint:
    """The per-kernel switch, the post_run_cell hook and what status reports."""

    def __init__(self):
        self.enabled = False
        self.shell = None
        self.notebook: str | None = None
        self.root: str | None = None
        self.writer = Writer()
        self.suspended = 0
        self.stage_seconds: list[float] = []
        self.skipped_cells = 0
        self.raised_cells: set[int] = set()  # for rewind's message: a cell that raised has no checkpoint
        self.rewind_undos: dict[int, int] = {}  # ... unless a rewind checkpointed the state it replaced: its cell
        self.interrupted_cells: set[int] = set()  # cells whose checkpoint an interrupt dropped while it was staged
        self.reported_error: str | None = None
        self.stage_error: str | None = None
        self.last_stage: dict | None = None  # cell, foreground seconds, bytes copied (into warm memory), hashed

    # -- switching ------------------------------------------------------------------------------------
    def on(self, shell=None, notebook: str | None = None, root: str | None = None, remember: bool = True) -> dict:
        shell = shell or checkpoint.current_shell()
        if shell is None:
            raise ValueError("auto-checkpointing needs an IPython kernel: it runs after every cell")
        settings_problem(raise_it=True)  # a wrong GKEWS_AUTO_* is said here, before anything is switched
        if remember:  # first: a root that is no checkpoint store is refused before anything is switched
            remember_choice(True, notebook, root)
        if self.shell is not None and self.shell is not shell:
            self.off()
        self.shell, self.notebook, self.root = shell, notebook, root
        if not self.enabled:
            shell.events.register("post_run_cell", self.post_run_cell)
            self.enabled = True
        return self.status()

    def off(self, notebook: str | None = None, root: str | None = None) -> dict:
        if self.enabled and self.shell is not None:
            with contextlib.suppress(ValueError):
                self.shell.events.unregister("post_run_cell", self.post_run_cell)
        self.enabled = False
        POOL.clear()
        with contextlib.suppress(CheckpointError):  # a root that is no store: no choice to remember there
            remember_choice(False, notebook or self.notebook, root or self.root)
        return self.status()

    def pause(self) -> dict:
        """The server, around a pause or a resume: no automatic checkpoint until unpause()."""
        self.suspended += 1
        POOL.clear()  # a pause gives memory back
        return self.status()

    def unpause(self) -> dict:
        self.suspended = max(0, self.suspended - 1)
        return self.status()

    @contextlib.contextmanager
    def paused(self):
        """No automatic checkpoint starts while a pause's save or a resume's restore runs."""
        self.suspended += 1
        try:
            yield
        finally:
            self.suspended -= 1

    # -- after every cell -----------------------------------------------------------------------------
    def post_run_cell(self, result) -> None:
        if not self.enabled:
            return
        if self.suspended or checkpoint._activity.get("operation") is not None:
            self.skipped_cells += 1
            return
        self._report_failure_once()
        if result.execution_count is None:
            return  # an empty cell: nothing ran, no new state
        if not result.success:
            self.raised_cells.add(result.execution_count)
            return  # a cell that raised did not complete: its end is no state to come back to
        source = (getattr(result.info, "raw_cell", "") or "").strip()
        label = {"cell": result.execution_count, "source": source.splitlines()[0][:120] if source else ""}
        try:
            self.snapshot(label)
            self.stage_error = None
        except KeyboardInterrupt:
            self.skipped_cells += 1  # an interrupt is never delayed: this cell gets no checkpoint
            self.interrupted_cells.add(result.execution_count)
        except Exception as exc:
            self.stage_error = str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"
            self._report_failure_once()

    def snapshot(self, label: dict) -> Snapshot:
        """Stage the namespace as it is now and hand it to the writer; returns without touching the disk."""
        started, reused = time.perf_counter(), POOL.reused
        ns = self.shell.user_ns
        nb = config.notebook_name(self.notebook)
        store = StagingStore(self.root, self.writer.pending)
        staged = checkpoint.stage(ns, self.shell, store, nb, probes=False, extra={"auto": True, "label": label})
        staged.capture.remember()  # the staged bytes count as written: pending, then on disk
        seconds = round(time.perf_counter() - started, 4)
        self.stage_seconds = (self.stage_seconds + [seconds])[-200:]
        self.last_stage = {"cell": label.get("cell"), "seconds": seconds, "copied": store.copied,
                           "warm": POOL.reused - reused, "hashed": staged.capture.hashed}
        snap = Snapshot(store.root, nb, staged.manifest, store.new, seconds, store.copied)
        self.writer.submit(snap)
        return snap

    def _report_failure_once(self) -> None:
        error = self.stage_error or self.writer.error
        if error and error != self.reported_error:
            import sys
            print(f"gkews: automatic checkpoints are failing: {error}\n"
                  f"  (said once; %gkews_checkpoint auto status shows the state, "
                  f"%gkews_checkpoint auto off stops them)", file=sys.stderr)
        self.reported_error = error

    # -- reporting ------------------------------------------------------------------------------------
    def status(self) -> dict:
        w = self.writer
        stage = sorted(self.stage_seconds)
        write = sorted(w.write_seconds)
        return {"enabled": self.enabled, "paused": bool(self.suspended), "writing": w._current is not None,
                "queued": w._next is not None,
                "written": w.written, "coalesced": w.coalesced, "skipped_cells": self.skipped_cells,
                "last": w.last, "last_stage": self.last_stage, "error": self.stage_error or w.error,
                "stage_seconds": {"p50": _quantile(stage, 0.5), "max": stage[-1] if stage else None},
                "write_seconds": {"p50": _quantile(write, 0.5), "max": write[-1] if write else None},
                "keep_last": _setting(config.auto_keep_last), "max_bytes": _setting(config.auto_max_bytes),
                "staging": {"pooled": POOL.bytes, "reused": POOL.reused, "limit": _setting(config.auto_staging_bytes)},
                "dirty_pages": TRACKER.status(),
                "setting_problem": settings_problem() or (None if self.enabled else SETTING_PROBLEM)}

    def shutdown(self) -> None:
        """atexit: never wait for the writer; it stops before its next file and removes its temp files."""
        self.writer.abandon = True


def _setting(read):
    """A GKEWS_AUTO_* value, or None where it is wrong (status still answers; settings_problem says why)."""
    try:
        return read()
    except ValueError:
        return None


def settings_problem(raise_it: bool = False) -> str | None:
    """What is wrong with the GKEWS_AUTO_* settings (the first one), or None."""
    for read in (config.auto_keep_last, config.auto_max_bytes, config.auto_staging_bytes):
        try:
            read()
        except ValueError as exc:
            if raise_it:
                raise
            return str(exc)
    return None


def _quantile(values: list, q: float):
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


AUTO = AutoCheckpoint()
atexit.register(AUTO.shutdown)


def _choice_path(notebook: str | None, root: str | None) -> tuple[Store, str]:
    store = Store(root)
    return store, os.path.join(store.notebook_dir(config.notebook_name(notebook)), "auto.json")


def remember_choice(enabled: bool, notebook: str | None = None, root: str | None = None) -> None:
    """A notebook's on/off from the magic or the page outlives its kernel (a pause and resume, a restart)."""
    store, path = _choice_path(notebook, root)
    try:
        store.ensure()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json_durable({"enabled": enabled}, path, store.tmp_dir)
    except OSError:
        pass  # the switch still holds for this kernel; only the next one would not know


def remembered_choice(notebook: str | None = None, root: str | None = None) -> bool | None:
    try:
        with open(_choice_path(notebook, root)[1]) as f:
            return bool(json.load(f)["enabled"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


#: what enabled_by_setting could not use, for `auto status` (None: nothing)
SETTING_PROBLEM: str | None = None


def enabled_by_setting(shell) -> bool:
    """At a kernel's start: this notebook's last choice (the magic or the page), else GKEWS_AUTO_CHECKPOINT=1,
    else c.AutoCheckpoint.enabled = True in IPython's config. Never raises: the magic must load."""
    choice = remembered_choice()
    if choice is not None:
        return choice
    global SETTING_PROBLEM
    env = os.environ.get(ENV_SWITCH, "").strip().lower()
    if env:
        if env not in ("1", "true", "on", "yes", "0", "false", "off", "no"):
            import sys
            # the stderr of a kernel's start reaches the server's log only: `auto status` says it too
            SETTING_PROBLEM = (f"{ENV_SWITCH}={env!r} is neither 1 (on) nor 0 (off), so automatic checkpoints "
                               f"stayed off at the kernel's start; set it to 1 or 0, or use %gkews_checkpoint auto on")
            print(f"gkews: {SETTING_PROBLEM}", file=sys.stderr)
            return False
        return env in ("1", "true", "on", "yes")
    cfg = getattr(shell, "config", None)
    section = cfg.get("AutoCheckpoint") if cfg is not None else None
    return bool(section.get("enabled", False)) if section is not None else False


# -- rewind ---------------------------------------------------------------------------------------------
def find_cell(cell: int, *, notebook: str | None = None, root: str | None = None,
              running_cell: int | None = None) -> dict:
    """The newest automatic checkpoint labelled with execution count `cell` in this kernel's numbering: a
    cell this process ran, else one of an earlier process whose numbering it continues (it was resumed
    from that process's checkpoint: counter.CONTINUES). A cell [N] of any other process (the one before a
    restart, which numbered its cells from [1] too) is never taken: the error names it, and its id."""
    store = Store(root)
    nb = config.notebook_name(notebook)
    cells, continued, elsewhere = [], None, None
    for cid in store.checkpoint_ids(nb):  # newest first
        try:
            manifest = store.load_manifest(nb, cid)
        except CheckpointError:
            continue
        label = manifest.get("label") or {}
        if not manifest.get("auto") or not isinstance(label.get("cell"), int):
            continue
        identity = manifest.get("identity")
        if not counter.in_numbering(identity, label["cell"]):
            if label["cell"] == cell and elsewhere is None:
                elsewhere = manifest
            continue
        if label["cell"] == cell:
            if (identity or {}).get("token") == TOKEN:
                return manifest  # this process's own cell [N] first
            continued = continued or manifest
        cells.append(label["cell"])
    if continued is not None:
        return continued
    have = ", ".join(f"[{c}]" for c in sorted(set(cells))) or "none"
    if elsewhere is not None:
        other = elsewhere.get("identity") or {}
        if still_running(other):  # not a restart: a second kernel of the notebook, with its own numbering
            raise CheckpointNotFound(
                f"no automatic checkpoint after cell [{cell}] of this kernel: cell [{cell}] ran in "
                f"{_other_kernel(other)}; rewind N goes back only to this kernel's own cells (cells with one: "
                f"{have}; {_why_none(cell, running_cell)}). To bring back the state at the end of that kernel's "
                f"cell [{cell}] anyway: %gkews_checkpoint rewind --checkpoint {elsewhere['id']}")
        raise CheckpointNotFound(
            f"no automatic checkpoint after cell [{cell}] of this kernel: cell [{cell}] ran in "
            f"{_other_kernel(other)}; this kernel numbers its cells from [1] again, and "
            f"rewind N goes back only to its own cells (cells with one: {have}). To bring back the state at "
            f"the end of that earlier cell [{cell}] anyway: %gkews_checkpoint rewind --checkpoint {elsewhere['id']}")
    how = _why_none(cell, running_cell)
    raise CheckpointNotFound(f"no automatic checkpoint after cell [{cell}] for notebook {nb!r} (cells with one: "
                             f"{have}); {how}")


def _why_none(cell: int, running_cell: int | None = None) -> str:
    """Why this kernel has no automatic checkpoint after its cell [cell], for rewind's message (running_cell:
    the cell that asks, the magic's own)."""
    if cell == running_cell:
        return (f"cell [{cell}] is this cell, still running: its automatic checkpoint is taken when it ends; "
                "rewind to it from the next cell")
    count = getattr(AUTO.shell or checkpoint.current_shell(), "execution_count", None)  # the next cell's number
    if cell < 1 or isinstance(count, int) and cell >= count:
        return f"this kernel has not run a cell [{cell}]" + (f" (its last is [{count - 1}])" if
                                                             isinstance(count, int) and count > 1 else "")
    w = AUTO.writer
    before_rewind = AUTO.rewind_undos.get(cell)
    if cell in w.cells_written or before_rewind is not None:
        which = f" (the state before the rewind to cell [{before_rewind}])" if before_rewind is not None else ""
        return f"its automatic checkpoint{which} was deleted since: {_kept_by_retention()}, or it was deleted by hand"
    if any((e.get("from") or 1) <= cell < e["below"] for e in counter.continued()):
        # numbered by the process this one was resumed from: whether it wrote one then is not known here
        return (f"cell [{cell}] ran before the resume, in the kernel this one was restored from, and its automatic "
                f"checkpoint is not in the store: deleted since ({_kept_by_retention()}, or by hand), or none was "
                f"taken after it then")
    if cell in AUTO.raised_cells:
        return f"cell [{cell}] raised an exception: a cell that did not complete leaves no state to come back to"
    if cell in AUTO.interrupted_cells:
        return ("an interrupt came while its checkpoint was being taken, which dropped it (an interrupt is "
                "never held back)")
    if cell in w.cells_failed:
        return f"its automatic checkpoint could not be written: {w.cells_failed[cell]}"
    if cell in w.cells_coalesced:
        return ("it ended while the previous checkpoint was still being written, and the next cell's "
                "checkpoint replaced its own")
    if not AUTO.enabled:
        return "turn them on with %gkews_checkpoint auto on"
    return "none was taken after it (automatic checkpoints were off then, or a save or restore was running)"


def _kept_by_retention() -> str:
    """What automatic checkpoints keep, and the settings that keep more."""
    limit = config.auto_max_bytes()
    return (f"automatic checkpoints keep the newest {config.auto_keep_last()}"
            f"{f' within {human_bytes(limit)}' if limit else ''} (raise GKEWS_AUTO_KEEP_LAST or "
            f"GKEWS_AUTO_MAX_BYTES to keep more)")


def _clock(epoch) -> str:
    """A moment in UTC, as the checkpoint list's times are: the time of day, with the date when it is not
    today's."""
    if not isinstance(epoch, (int, float)):
        return "?"
    when = time.gmtime(epoch)
    same_day = time.strftime("%Y-%m-%d", when) == time.strftime("%Y-%m-%d", time.gmtime())
    return time.strftime("%H:%M:%S UTC" if same_day else "%Y-%m-%d %H:%M:%S UTC", when)


def _other_kernel(identity: dict | None) -> str:
    """How an error or the list names the process that wrote an automatic checkpoint of another numbering."""
    identity = identity or {}
    started = identity.get("started")
    if not identity.get("token"):
        return "an earlier kernel (a checkpoint of an older version, which did not record its process)"
    if isinstance(started, (int, float)) and started > STARTED:
        return f"another kernel process (pid {identity.get('pid', '?')}, started at {_clock(started)})"
    if still_running(identity):  # two kernels of one notebook (a second tab's, a console's): no restart
        return (f"another kernel of this notebook that still runs (pid {identity['pid']}, started at "
                f"{_clock(started)})")
    return (f"an earlier kernel (pid {identity.get('pid', '?')}, started at {_clock(started)}), before this "
            f"kernel's restart at {_clock(STARTED)}")


def still_running(identity: dict) -> bool:
    """Whether the process that wrote a checkpoint runs on this host now: its pid is alive and that process
    started when the checkpoint says (a pid is reused; /proc gives a process's start in clock ticks since
    boot)."""
    pid, started = identity.get("pid"), identity.get("started")
    if identity.get("hostname") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid() or \
            not isinstance(started, (int, float)):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    # the process starts a moment before kernel_state is imported in it
    return 0 <= started - (boot + ticks / os.sysconf("SC_CLK_TCK")) < 60


def find_checkpoint(checkpoint_id: str, cell: int | None = None, *, notebook: str | None = None,
                    root: str | None = None) -> dict:
    """An automatic checkpoint named by its id (of any kernel process), and labelled [cell] if one is given."""
    manifest = Store(root).load_manifest(config.notebook_name(notebook), checkpoint_id)
    label = manifest.get("label") or {}
    if not manifest.get("auto"):
        raise CheckpointNotFound(f"checkpoint {checkpoint_id} is a saved checkpoint, not an automatic one (the end "
                                 f"of a cell): %gkews_checkpoint restore --checkpoint {checkpoint_id} brings it back")
    if cell is not None and label.get("cell") != cell:
        raise CheckpointNotFound(f"checkpoint {checkpoint_id} is the automatic checkpoint after cell "
                                 f"[{label.get('cell')}], not after cell [{cell}]")
    return manifest


def rewind(cell: int | None, namespace=None, *, notebook: str | None = None, root: str | None = None,
           undo_cell: int | None = None, checkpoint_id: str | None = None, running_cell: int | None = None) -> dict:
    """Bring the namespace back to the end of cell `cell` of this kernel (find_cell), or to the automatic
    checkpoint `checkpoint_id` (of any kernel process: one before a restart too), after checkpointing the state
    it replaces, labelled with `undo_cell` (default: the last cell that ran), so `rewind undo_cell` undoes
    this one."""
    if cell is None and checkpoint_id is None:
        raise ValueError("rewind needs a cell number (or the id of an automatic checkpoint)")
    started = time.perf_counter()
    ns, shell = checkpoint._namespace(namespace)
    AUTO.writer.wait_idle()  # the checkpoint of that cell may still be being written
    if checkpoint_id is not None:
        target = find_checkpoint(checkpoint_id, cell, notebook=notebook, root=root)
    else:
        target = find_cell(cell, notebook=notebook, root=root, running_cell=running_cell)
    cell = (target.get("label") or {}).get("cell")
    earlier = counter.earlier_kernel(target)
    count = getattr(shell, "execution_count", None)  # the next cell's number, outside a cell
    now = undo_cell if undo_cell is not None else count - 1 if isinstance(count, int) else None
    with AUTO.paused():
        try:
            undo = checkpoint.save(ns, notebook=notebook, root=root, retention=False, auto_label={
                "cell": now, "source": f"(before rewind to cell [{cell}])", "before_rewind": cell})
        except CheckpointWriteError as exc:  # the undo first: without it the rewind could not be taken back
            raise CheckpointWriteError(
                f"the rewind to the end of cell [{cell}] was not done, and nothing was changed: it first "
                f"checkpoints the state it replaces, so that it can be undone, and {exc}") from None
        if isinstance(now, int):
            AUTO.rewind_undos[now] = cell
        store = Store(root)
        before = store.load_manifest(config.notebook_name(notebook), undo["id"])
        kept = set(target["variables"]) | set(target["modules"]) | set(target["skipped"])
        # defined after that cell: a rewind takes it away (the undo checkpoint has it), in the step that puts
        # the restored values in place; a module imported since stays bound, as it stays loaded
        removed = [n for n in before["variables"] if n not in kept]
        result = checkpoint.restore(ns, notebook=notebook, root=root, checkpoint=target["id"], remove=removed)
        # a name of IPython's own (In, Out, _oh) the user rebound after that cell: IPython's object is what that
        # cell ended with (no checkpoint holds it), not no name at all
        own = getattr(shell, "user_ns_hidden", None) or {}
        ipython_own = [n for n in removed if n in own]
        for name in ipython_own:
            ns[name] = own[name]
        removed = [n for n in removed if n not in own]
        store.apply_retention(config.notebook_name(notebook), auto=True)  # now that the target is read
    changed, came_back, unchanged = [], [], []
    # what no checkpoint can hold (an open file, a generator) is in no undo either
    unsaved = set(before["skipped"])
    for name in result["restored"]:
        old, new = before["variables"].get(name), target["variables"].get(name)
        if name in unsaved:
            changed.append(name)
        elif name not in before["variables"] and name not in before["modules"]:
            came_back.append(name)
        elif old is not None and new is not None and _same_value(before, old, target, new):
            unchanged.append(name)
        elif old is None and name in before["modules"] and before["modules"][name] == target["modules"].get(name):
            unchanged.append(name)
        else:
            changed.append(name)
    # a variable holding another's objects (`history = log`) reads as the same reference: it changed with it
    held = held_through([before["variables"], target["variables"]], set(changed) | set(came_back) | set(removed))
    changed += [n for n in unchanged if n in held]
    unchanged = [n for n in unchanged if n not in held]
    came_back.extend(ipython_own)
    gone = sorted(unsaved & set(result["restored"]))
    if gone:
        result["warnings"].append(
            f"{', '.join(gone)} held what no checkpoint can ({_skip_kinds(before, gone)}): the rewind replaced "
            f"{'it' if len(gone) == 1 else 'them'} with the value of cell [{cell}], and undoing it cannot bring "
            "that back")
    left = sorted(unsaved - set(result["restored"]) - set(target["variables"]))
    if left:
        result["warnings"].append(f"left as they are, since no checkpoint holds them: {', '.join(left)}")
    return {"cell": cell, "checkpoint": target["id"], "label": target.get("label"), "earlier_kernel": earlier,
            "undo": undo["id"],
            "undo_cell": now, "changed": changed, "came_back": came_back, "removed": removed,
            "unchanged": unchanged, "failed": result["failed"], "skipped_at_save": result["skipped_at_save"],
            "warnings": result["warnings"], "seconds": result["seconds"],
            "total_seconds": round(time.perf_counter() - started, 4)}  # with the wait and the undo checkpoint


def _skip_kinds(manifest: dict, names: list[str]) -> str:
    """What the save said each of these is: "f: an open file (/data/log.txt)", "g: a generator"."""
    kinds = []
    for name in names:
        reason = str((manifest["skipped"].get(name) or {}).get("reason", ""))
        live = re.search(r"object: (.+?) is a live resource", reason)
        pickled = re.search(r"cannot pickle '([^']+)' object", reason)
        kinds.append(f"{name}: {live.group(1)}" if live else f"{name}: a {pickled.group(1)}" if pickled else name)
    return ", ".join(kinds)


def _same_value(ma: dict, a: dict, mb: dict, b: dict) -> bool:
    """Two saved variables hold the same value: same value digest and the same tensor/array contents."""
    if a.get("digest", a["pickle"]) != b.get("digest", b["pickle"]):
        return False
    fa = [ma["storages"][s].get("fingerprint") for s in a["storages"]]
    fb = [mb["storages"][s].get("fingerprint") for s in b["storages"]]
    return fa == fb
