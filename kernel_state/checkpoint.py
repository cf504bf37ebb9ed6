"""The operations: save, restore, verify, probe, list, delete, status. Plain dicts in, plain dicts out."""
from __future__ import annotations

import contextlib
import gc
import json
import os
import pickle
import platform
import re
import sys
import time
import types

from . import (byvalue, config, counter, module_objects, module_sources, randomstate, readback, settings,
               torch_modules)
from .capture import Capture, Deferred, VariableSkipped, defined_interactively
from .compare import dtype_key, held_through, value_digest as compare_value_digest
from .errors import CheckpointError, CheckpointWriteError, DamagedProbes
from .fingerprint import cpu_fingerprint, memory_view, storage_fingerprint
from .fsutil import remove_quietly, write_json_durable
from .hashing import digest_bytes
from .history import defining_cell
from .identity import TOKEN, identity
from .restore import restore_namespace
from .store import (MANIFEST_FORMAT, MANIFEST_VERSION, Store, new_checkpoint_id, retention_limits, summary,
                    write_error)

IPYTHON_NAMES = {"In", "Out", "exit", "quit", "get_ipython"}
# IPython's output and input history (_, __, ___, _7, _i, _ii, _i7, _ih, _oh, _dh, _exit_code) and dunders
IPYTHON_HISTORY = re.compile(r"_+|_\d+|_i+|_i\d+|_ih|_oh|_dh|_exit_code|__\w*__")
_activity: dict = {"operation": None}


def current_shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _namespace(namespace):
    shell = current_shell()
    if namespace is not None:
        return namespace, shell if shell is not None and shell.user_ns is namespace else None
    if shell is not None:
        return shell.user_ns, shell
    return sys.modules["__main__"].__dict__, None


def select_variables(ns: dict, shell, names=None, exclude=()) -> tuple[list, dict]:
    """The variables a checkpoint holds, classes and functions first so later values can refer to them."""
    if names:
        missing = [n for n in names if n not in ns]
        if missing:
            raise ValueError(f"no variable named {', '.join(map(repr, missing))} in this namespace; "
                             f"%who lists the variables")
    hidden = getattr(shell, "user_ns_hidden", {}) if shell is not None else {}
    chosen, modules, refused = [], {}, []
    for name, value in ns.items():
        if (names and name not in names) or name in exclude:
            continue
        # IPython's own names (_, _i3, _oh, In...) and dunders never, unless asked for by name (IPython hides
        # its history names, so the hidden ones are its own too); a user's private `_df` or `import numpy as
        # _np` is the user's (a pause that dropped them lost them). A user's own `Out` or `exit` is saved:
        # only IPython's own object under such a name is left out, named or not (it is the shell itself)
        if name in IPYTHON_NAMES and _ipython_object(value):
            refused.append(name)
            continue
        if not names and (IPYTHON_HISTORY.fullmatch(name) or (name in hidden and hidden[name] is value)):
            continue
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__  # saved by reference, re-imported on restore
            continue
        chosen.append((name, value))
    if names and refused:  # asked for by name: a save that quietly held nothing of it would look like success
        raise ValueError(f"{', '.join(map(repr, refused))} {'is' if len(refused) == 1 else 'are'} IPython's own, "
                         f"not a variable of this notebook: nothing of it can be saved; name your variables")
    rank = {"class": 0, "function": 1}
    chosen.sort(key=lambda item: rank.get(
        "class" if isinstance(item[1], type) else "function" if isinstance(item[1], types.FunctionType) else "", 2))
    return chosen, modules


def _made_here(module: types.ModuleType) -> bool:
    """A module object made by the notebook (`types.ModuleType("cfg")`), which no import can give back: it has no
    spec, and sys.modules does not hold it under its name."""
    return getattr(module, "__spec__", None) is None and sys.modules.get(module.__name__) is not module


def _ipython_object(value) -> bool:
    """Whether a value under one of IPython's names is IPython's own (`exit`, `get_ipython`) when the shell's
    hidden names do not say so (a namespace other than the shell's): what IPython defined, not the user."""
    try:
        modules = (getattr(type(value), "__module__", None), getattr(value, "__module__", None))
    except Exception:
        return False
    return any(isinstance(m, str) and m.split(".")[0] == "IPython" for m in modules)


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("torch", "numpy", "dill", "safetensors"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    return out


class Progress:
    """Counts variables and bytes; hands a snapshot to the caller's callback at most 4 times a second."""

    def __init__(self, callback, total: int, activity: bool = True):
        self.callback, self.total, self.activity = callback, total, activity
        self.variables_done, self.bytes_done, self._last = 0, 0, 0.0
        if activity:
            _activity.update(operation="save", variables_total=total, variables_done=0, bytes_done=0)

    def __call__(self, bytes_done: int = 0, variables_done: int = 0, force: bool = False):
        self.bytes_done += bytes_done
        self.variables_done += variables_done
        if self.activity:
            _activity.update(variables_done=self.variables_done, bytes_done=self.bytes_done)
        now = time.monotonic()
        if self.callback and (force or now - self._last > 0.25):
            self._last = now
            self.callback({"variables_done": self.variables_done, "variables_total": self.total,
                           "bytes_done": self.bytes_done})


class Staged:
    """A checkpoint captured into a store: its manifest (not yet committed) and the capture that made it."""

    def __init__(self, manifest: dict, capture: Capture, skipped: dict, modules: dict, started: float):
        self.manifest, self.capture, self.skipped, self.modules = manifest, capture, skipped, modules
        self.started = started


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic collector off while a save builds its records: the tens of thousands of small objects
    it allocates set off full collections over the whole heap, the user's included (1.0 s of 2.3 s for a
    list of 20,000 tiny tensors). It makes no cycles worth collecting meanwhile, and the collector is on
    again after (unless it was off before: the user's choice stands)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


#: (store root, notebook) -> the variables the last full restore said were never saved ({name: its skip
#: record}): a save while the name is still undefined carries the record on, so the checkpoint after next
#: still tells the user to re-run its cell (it read "0 skipped" once the variable was gone from the kernel)
_unsaved: dict[tuple[str, str], dict] = {}


def _still_unsaved(ns: dict, root: str, nb: str, names, skipped: dict) -> dict:
    carried = _unsaved.get((root, nb), {})
    for name in [n for n in carried if n in ns]:  # defined again: saved (or skipped) on its own now
        del carried[name]
    return {} if names else {n: r for n, r in carried.items() if n not in skipped}


@gc_paused()
def stage(ns: dict, shell, store: Store, nb: str, *, names=None, exclude=(), tracker=None,
          random_state: bool = True, probes: bool = True, extra: dict | None = None) -> Staged:
    """The first half of every save: capture the namespace into `store` and build the manifest.

    With a Store the blobs land in its temp directory; with auto.StagingStore they are only copied into
    memory, for a background thread to write (kernel undo). Either way store.commit() makes it exist."""
    generators = randomstate.capture() if random_state else None  # before anything can draw
    started = time.perf_counter()
    chosen, modules = select_variables(ns, shell, names, exclude)
    folders = {alias: folder for alias in modules if (folder := module_objects.import_folder(ns[alias]))}
    tracker = tracker or Progress(None, len(chosen), activity=False)
    tracker.total = len(chosen)
    if tracker.activity:
        _activity["variables_total"] = len(chosen)
    capture = Capture(store, progress=tracker, reuse_digests=bool(extra and extra.get("auto")))
    for name, value in chosen:
        capture.name_variable(name, value)
    if names is None:  # a part of the namespace may hold only a part of the GPU storages: each waits alone
        capture.prefetch_device(store.root)
    skipped, deferred = {}, []
    for made in [a for a in modules if _made_here(ns[a])]:  # saved by name, it could not be imported again
        skipped[made] = {"reason": f"module {modules.pop(made)} was made in this kernel (types.ModuleType), not "
                                   f"imported: a restore could only import it by name, and nothing has that name; "
                                   f"keep what it holds in variables, or put it in a .py file and import it",
                         **(defining_cell(shell, made) or {})}

    def add(name, value, defer: bool) -> None:
        capture.defer_forward = defer
        try:
            capture.add_variable(name, value)
        except Deferred:
            deferred.append((name, value))
            return
        except VariableSkipped as exc:
            skipped[name] = {"reason": str(exc), **(defining_cell(shell, name) or {})}
        tracker(variables_done=1)

    try:
        for name, value in chosen:
            add(name, value, defer=True)
        for name, value in list(deferred):  # after every variable they may refer to
            add(name, value, defer=False)
    except KeyboardInterrupt as exc:  # which value it was at: one whose saving hangs (on a lock, a connection)
        raise KeyboardInterrupt(f"interrupted while it saved {capture._current!r}; nothing of this checkpoint "
                                f"was kept") from exc
    skipped.update(_still_unsaved(ns, store.root, nb, names, skipped))
    capture.flush_pack()
    capture.link_shared_memory()
    saved_random = None
    if generators is not None:
        digest, size, new = store.put_bytes(randomstate.dumps(generators))
        capture._account(digest, size, new)
        saved_random = {"pickle": digest, "generators": sorted(generators), "digests": randomstate.digests(generators)}
    newest = next(iter(store.checkpoint_ids(nb)), None)
    manifest = {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "id": new_checkpoint_id(after=newest),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "notebook": nb,
        "identity": identity(), "versions": _versions(),
        "variables": capture.variables, "skipped": skipped, "modules": modules,
        **({"named": True} if names else {}),  # `save NAMES`: the notebook's other variables are not in it
        **({"excluded": left_out} if (left_out := sorted(n for n in exclude if n in ns)) else {}),  # --exclude
        **({"module_folders": folders} if folders else {}),
        "tensors": capture.tensors, "arrays": capture.arrays, "storages": capture.storages,
        "blobs": capture.blobs, "probes": _evaluate_probes(ns, store, nb) if probes else [],
        "execution_count": counter.current(shell),
        **({"hook_ids": ids} if (ids := torch_modules.handle_ids()) is not None else {}),
        **({"continues": continues} if (continues := counter.continued()) else {}),
        "random_state": saved_random,
        "settings": {**settings.capture(), **({"string_sets": True} if capture.string_sets else {})},
        **({"sources": sources} if (sources := byvalue.cell_sources(capture.sources)) else {}),
        # the notebook's own modules its pickles and module variables name: a restore says which changed since
        **({"module_sources": own} if (own := module_sources.record(capture.modules_named | set(modules.values())))
           else {}),
        "stats": {"seconds": round(time.perf_counter() - started, 4),
                  "bytes_written": capture.bytes_written, "bytes_total": sum(capture.blobs.values())},
        **(extra or {}),
    }
    return Staged(manifest, capture, skipped, modules, started)


@gc_paused()
def save(namespace=None, *, notebook=None, root=None, names=None, exclude=(), progress=None,
         keep_last=None, max_bytes=None, random_state: bool = True, auto_label: dict | None = None,
         retention: bool = True, read_back: bool = False) -> dict:
    """Capture and commit a checkpoint. With auto_label it counts as an automatic one (kernel undo): it
    carries the label and only the automatic checkpoints' retention applies to it. retention=False leaves
    retention to the caller (a rewind: its undo checkpoint must not push out the one it restores).
    read_back (a pause's save, before its kernel is released): the blobs it reuses are read back, and a
    damaged one is written again from this kernel's memory (readback.py); "repaired" names them."""
    kwargs = dict(notebook=notebook, root=root, names=names, exclude=exclude, progress=progress,
                  keep_last=keep_last, max_bytes=max_bytes, random_state=random_state, auto_label=auto_label,
                  retention=retention)
    ns, shell = _namespace(namespace)
    nb = config.notebook_name(notebook)
    store = Store(root)
    tracker = Progress(progress, 0)
    extra = {"auto": True, "label": auto_label} if auto_label else None
    if retention:  # a wrong setting is refused before the checkpoint is written, not after
        keep_last, max_bytes = retention_limits(keep_last, max_bytes, bool(auto_label))
    store.accept_encoded = bool(auto_label)
    store.ensure()
    try:
        with store.lock():
            staged = stage(ns, shell, store, nb, names=names, exclude=exclude, tracker=tracker,
                           random_state=random_state, extra=extra)
            written = set(store.staged)
            store.commit(nb, staged.manifest)
    except BaseException:
        _activity.update(operation=None)
        _collect_quietly(store)
        raise
    _activity.update(operation=None)
    tracker(force=True)
    capture, manifest = staged.capture, staged.manifest
    capture.remember()
    if read_back:  # before retention: a save made again must not push out one more older checkpoint
        damaged = readback.damaged_blobs(store, manifest["blobs"], written)
        if damaged:
            return _save_again(namespace, store, nb, manifest, damaged, kwargs)
    retention = store.apply_retention(nb, keep_last, max_bytes, auto=bool(auto_label)) if retention else None
    result = summary(manifest)
    result.update(saved=list(capture.variables) + list(staged.modules), skipped=staged.skipped,
                  bytes_written=capture.bytes_written, seconds=round(time.perf_counter() - staged.started, 4),
                  retention=retention, root=store.root)
    if capture.warnings:  # hooks left out of a variable that was saved (capture.add_variable)
        result["warnings"] = list(capture.warnings)
    return result


def _save_again(namespace, store: Store, nb: str, manifest: dict, damaged: dict, kwargs: dict) -> dict:
    """A save whose reused blobs were damaged on disk: withdraw it, remove them (no save may reuse them
    meanwhile: the exclusive lock) and save again, which writes them from memory and reuses the blobs
    just written. Damaged again: the store does not keep what it is given; the second checkpoint is
    withdrawn too, so that no list or resume offers it as good."""
    with store.lock(exclusive=True):
        store.withdraw(nb, manifest["id"])
        for path in damaged.values():
            remove_quietly(path)
    result = save(namespace, **kwargs, read_back=False)
    again = readback.damaged_blobs(store, {d: manifest["blobs"][d] for d in damaged}, set())
    missing = [p for p in damaged.values() if not os.path.exists(p)]
    if again or missing:
        with store.lock(exclusive=True):
            store.withdraw(nb, result["id"])
        raise CheckpointWriteError(
            f"the checkpoint store at {store.root} does not keep what is written to it: "
            f"{', '.join([*again.values(), *missing])} read back damaged after being written again. Check the disk "
            f"or volume under it (or give another one with GKEWS_CHECKPOINT_ROOT); no checkpoint was kept "
            f"by this save, and the earlier ones naming these files are damaged too")
    result["repaired"] = [f"blob {os.path.basename(p)}: the file was damaged since an earlier save wrote it; "
                          f"written again from this kernel's memory" for p in damaged.values()]
    return result


def _collect_quietly(store: Store) -> None:
    """After a failed save: remove its temp files and the blobs no checkpoint references."""
    try:
        with store.lock(exclusive=True):
            store._collect()
    except OSError:
        pass


def default_checkpoint(store: Store, nb: str, checkpoint: str | None) -> str | None:
    """The checkpoint restore and verify take when none is named: the newest one a save made (the magic's,
    checkpoint now's, a pause's), which holds the probes' results; kernel undo's automatic ones come after
    every cell (a rewind's "before" one too), without probes, and may still be being written. Only when the
    notebook has no other: the newest automatic one, once the writer has written the last cell's."""
    if checkpoint is not None:
        return checkpoint
    for cid in store.checkpoint_ids(nb):
        try:
            if not store.load_manifest(nb, cid, lean=True).get("auto"):
                return cid
        except CheckpointError:
            return cid  # damaged: named by the read that follows, never passed over for an older one
    auto = sys.modules.get(f"{__package__}.auto")
    if auto is not None:
        auto.AUTO.writer.wait_idle()
    return None


def restore(namespace=None, *, notebook=None, root=None, checkpoint=None, names=None, device=None,
            random_state: bool = True, remove=None) -> dict:
    """Put a checkpoint's variables (or `names`) back into the namespace. remove: the variables the caller
    (rewind) takes away with it, in the same step, so none is reported as left as it was."""
    if device not in (None, "cpu", "cuda") and not str(device).startswith("cuda:"):
        raise ValueError(f"device must be 'cpu' or 'cuda' (got {device!r})")
    if device and device.startswith("cuda"):
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is available in this kernel; "
                             f"use --device cpu, or leave it out to fall back to the CPU with a warning")
    ns, _shell = _namespace(namespace)
    nb = config.notebook_name(notebook)
    store = Store(root)
    manifest = store.load_manifest(nb, default_checkpoint(store, nb, checkpoint))
    known = set(manifest["variables"]) | set(manifest["skipped"]) | set(manifest["modules"])
    unknown = [n for n in names or () if n not in known]
    if unknown:  # as save refuses a name it cannot find: a typo restores nothing rather than part of a set
        held = sorted(known)
        shown = ", ".join(held[:20]) + (f" and {len(held) - 20} more" if len(held) > 20 else "")
        raise ValueError(f"checkpoint {manifest['id']} has no variable named {', '.join(map(repr, unknown))}; "
                         f"it holds: {shown or 'nothing'}{_held_elsewhere(store, nb, manifest['id'], unknown)}")
    later = [] if names or remove is not None else [n for n, _v in select_variables(ns, _shell)[0] if n not in known]
    _activity.update(operation="restore")
    try:
        with store.lock(reading=True):
            # the settings are this notebook's: another notebook's checkpoint (a deleted one's, restored here by
            # hand) brings its variables, not its working directory or torch's default dtype
            result = restore_namespace(ns, store, manifest, names=names, device=device, random_state=random_state,
                                       remove=remove or (), settings=nb == config.notebook_name())
    finally:
        _activity.update(operation=None)
    if later and result["restored"]:  # an optimizer made after the checkpoint would train the replaced model
        shown = ", ".join(later[:10]) + (f" and {len(later) - 10} more" if len(later) > 10 else "")
        result["warnings"].append(
            f"left as they were, not being in this checkpoint: {shown}; one that refers to a restored variable "
            "(an optimizer of a restored model, say) still holds the kernel's earlier object: make it again from "
            "the restored ones")
    counter.continue_from(_shell, manifest.get("execution_count"), manifest)
    result["same_process"] = manifest["identity"].get("token") == TOKEN
    if not names and remove is None:
        _unsaved[(store.root, nb)] = {n: {**r, "carried_from": r.get("carried_from", manifest["id"])}
                                      for n, r in manifest["skipped"].items() if n not in ns}
    _carry_unrestored(ns, store.root, nb, manifest["id"], result["failed"])
    return result


def _held_elsewhere(store: Store, nb: str, asked: str, names: list[str]) -> str:
    """Where the names a checkpoint lacks are: the newest other checkpoint of the notebook holding them all (a
    `save NAMES` made the newest one hold only those), as the command that restores them."""
    for cid in store.checkpoint_ids(nb):
        if cid == asked:
            continue
        try:
            other = store.load_manifest(nb, cid)
        except CheckpointError:
            continue
        if all(n in other["variables"] or n in other["modules"] for n in names):
            return (f"; checkpoint {cid} holds {', '.join(names)}: %gkews_checkpoint restore {' '.join(names)} "
                    f"--checkpoint {cid}")
    return " (%gkews_checkpoint list shows the others)"


def _carry_unrestored(ns: dict, root: str, nb: str, checkpoint_id: str, failed: dict) -> None:
    """Variables this restore could not bring back (a module missing here, a damaged blob) are in that checkpoint
    alone: each later save names them as skipped, with the checkpoint that holds them (`kept_in`), which
    retention keeps while a checkpoint it keeps names it. A save that left them out without a word, five times,
    had retention delete the only copy."""
    carried = _unsaved.setdefault((root, nb), {})
    for name, why in failed.items():
        if name not in ns:
            carried[name] = {"reason": f"not restored from checkpoint {checkpoint_id} ({why}); that checkpoint "
                                       f"still holds it and is kept while a checkpoint says so: once fixed, "
                                       f"%gkews_checkpoint restore {name} --checkpoint {checkpoint_id}",
                             "kept_in": checkpoint_id}


def verify(namespace=None, *, notebook=None, root=None, checkpoint=None) -> dict:
    """Compare the live namespace with a checkpoint, bit for bit, without writing anything."""
    ns, _shell = _namespace(namespace)
    nb = config.notebook_name(notebook)
    store = Store(root)
    manifest = store.load_manifest(nb, default_checkpoint(store, nb, checkpoint))
    algorithms = {k: r["fingerprint"]["algorithm"] for k, r in manifest["storages"].items() if "fingerprint" in r}
    algorithms.update({f"{k}/view": v["algorithm"] for r in manifest["variables"].values()
                       for k, v in r.get("views", {}).items()})
    dry = Capture(dry=True, algorithms=algorithms)
    for name in manifest["variables"]:
        if name in ns:
            dry.name_variable(name, ns[name])
    dry.prefetch_device(store.root)
    variables = {}
    for name, saved in manifest["variables"].items():
        if name not in ns:
            variables[name] = {"verdict": "missing", "detail": "not in the namespace"}
            continue
        try:
            live = dry.add_variable(name, ns[name], picklers=(saved["pickler"],))
        except VariableSkipped as exc:
            variables[name] = {"verdict": "changed", "detail": f"cannot be pickled now: {exc}"}
            continue
        compared = _viewed_in_part(saved)
        saved_fp = _fingerprints(manifest["storages"], saved, compared)
        live_fp = _fingerprints(dry.storages, live, compared)
        # the value digest (compare.py) where the checkpoint has one; older ones compare pickles, and so
        # does a value the save could not walk (`pickle:`; the walk may read it now)
        same_value = _same_value(saved, live, lambda: compare_value_digest(ns[name]))
        if same_value and saved_fp == live_fp:
            variables[name] = {"verdict": "match", "tensors": len(saved_fp)}
        elif len(saved_fp) == len(live_fp) and same_value:
            differ = sum(a != b for a, b in zip(saved_fp, live_fp))
            variables[name] = {"verdict": "changed", "detail": f"{differ} of {len(saved_fp)} tensors/arrays differ"}
        else:
            why = _memmap_copies(name, ns[name], manifest, saved, dry, live) or "its value or structure differs"
            variables[name] = {"verdict": "changed", "detail": why}
    # a variable holding a changed one's objects (`history = log`) reads as the same reference: it changed with it
    moved = {n for n, v in variables.items() if v["verdict"] != "match"}
    for name, other in held_through([manifest["variables"], dry.variables], moved).items():
        if variables.get(name, {}).get("verdict") == "match":
            what = "changed" if variables[other]["verdict"] == "changed" else "is missing"
            variables[name] = {"verdict": "changed", "detail": f"it holds {other}'s objects, and {other} {what}"}
    for alias, module in manifest["modules"].items():
        live = ns.get(alias)
        ok = isinstance(live, types.ModuleType) and live.__name__ == module
        variables[alias] = {"verdict": "match" if ok else "missing", "module": module}
    probes = [_compare_probe(ns, p) for p in manifest.get("probes", [])]
    # the next draws are part of an experiment's state: a restore puts the generators back, so verify reads them
    generators = randomstate.compare(manifest.get("random_state"))
    # so do the settings later cells compute with (threads, precision, the working directory)
    changed_settings = settings.differences(manifest.get("settings"))
    same = manifest["identity"].get("token") == TOKEN
    # what a "verified" does not speak of: variables made since the checkpoint, or left out of its save
    known = set(manifest["variables"]) | set(manifest["modules"]) | set(manifest["skipped"])
    chosen, modules = select_variables(ns, _shell)
    uncovered = sorted(n for n in [name for name, _v in chosen] + list(modules) if n not in known)
    return {"checkpoint": manifest["id"], "same_process": same, "identity": identity(),
            "saved_identity": manifest["identity"], "variables": variables, "probes": probes,
            "skipped_at_save": manifest["skipped"], "not_in_checkpoint": uncovered, "random_state": generators,
            "settings": changed_settings,
            "verified": same and not changed_settings and all(v["verdict"] == "match" for v in variables.values())
            and all(p["verdict"] == "match" for p in probes)
            and all(v == "match" for v in (generators or {}).values())}


def _viewed_in_part(saved: dict) -> set:
    """The positions, among a saved variable's storages, of those the checkpoint has its own views of."""
    views = saved.get("views", {})
    return {i for i, skey in enumerate(saved["storages"]) if skey in views}


def _fingerprints(storages: dict, variable: dict, compared: set) -> list:
    """What verify compares for each storage of a variable, in the order its pickle uses them: the
    fingerprint of its own views of it where the checkpoint has them (it views only part:
    capture.Capture._views), else the storage's. By position, not by storage key: a live namespace numbers
    its storages otherwise where something before changed how it is held (an np.memmap restored as an
    in-memory copy of a few bytes is inlined, and every later key moved by one)."""
    views = variable.get("views", {})
    return [views[s]["value"] if s in views and i in compared else storages[s]["fingerprint"]["value"]
            for i, s in enumerate(variable["storages"])]


def _same_value(saved: dict, live: dict, walked) -> bool:
    """`walked()`: the live value's walked digest, where the save walked it and the live value is plain data now
    compared by its pickle (a checkpoint from before that: its plain data holds no object of another variable)."""
    if "digest" not in saved or saved["digest"].startswith("pickle:"):
        return live["pickle"] == saved["pickle"]
    if live["digest"].startswith("pickle:"):
        return walked() == saved["digest"]
    return live["digest"] == saved["digest"]


def _memmap_copies(name: str, value, manifest: dict, saved: dict, dry: Capture, live: dict) -> str | None:
    """Why a variable that held an np.memmap reads as changed when it holds an in-memory copy of it now
    (a restore copies a memmap whose file changed): a memmap's digest has its file in it. Whether the
    values equal the checkpoint's is told by digesting it again with each copy taken for that memmap."""
    mapped = {r["memmap"]["path"] for r in dry.arrays.values() if "memmap" in r and r["buffer"] in live["storages"]}
    copies = {manifest["storages"][r["buffer"]]["fingerprint"]["value"]: r["memmap"]
              for r in manifest["arrays"].values()
              if "memmap" in r and r["buffer"] in saved["storages"] and r["memmap"]["path"] not in mapped}
    if not copies:
        return None
    paths = ", ".join(sorted({source["path"] for source in copies.values()}))
    said = f"it came back as an in-memory copy of the np.memmap of {paths}"
    if saved.get("digest", "pickle:").startswith("pickle:"):
        return f"{said}; its values cannot be compared with the checkpoint's"
    second = Capture(dry=True, algorithms=dry.algorithms)
    second.var_ids, second.var_values, second.copies_of = dry.var_ids, dry.var_values, copies
    second.saved_vars = dry.saved_vars - {name}  # the variables added before this one
    again, compared = second.add_variable(name, value, picklers=(saved["pickler"],)), _viewed_in_part(saved)
    if again["digest"] == saved["digest"] and \
            _fingerprints(second.storages, again, compared) == _fingerprints(manifest["storages"], saved, compared):
        return f"{said}: its values equal the checkpoint's, but it no longer reads or writes that file"
    return f"{said}, and its values differ from the checkpoint's"


# -- probes ---------------------------------------------------------------------------------------
def _probe_file(store: Store, nb: str) -> str:
    return os.path.join(store.notebook_dir(nb), "probes.json")


def probe_expressions(store: Store, nb: str) -> list[str]:
    """The notebook's probes; none when it has none. A damaged probe file is named (DamagedProbes),
    never read as "no probes": the next `probe` would have written over the others."""
    path = _probe_file(store, nb)
    try:
        with open(path) as f:
            probes = json.load(f)["probes"]
        if not isinstance(probes, list) or not all(isinstance(p, str) for p in probes):
            raise ValueError("'probes' is not a list of expressions")
        return list(probes)
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError) as exc:
        raise DamagedProbes(f"the probe file {path} is damaged ({type(exc).__name__}: {exc}); delete it and add "
                            f"the probes again with %gkews_checkpoint probe EXPR") from None


def value_digest(value, algorithm: str | None = None) -> dict:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        t = value.detach().clone(memory_format=torch.contiguous_format)
        from .capture import TORCH_DTYPES
        fp = storage_fingerprint(t.untyped_storage(), TORCH_DTYPES.get(str(t.dtype)[6:], "U8"),
                                 list(t.shape), algorithm)
        return {"algorithm": fp["algorithm"], "value": f"{t.dtype}{list(t.shape)}:{fp['value']}"}
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray) and not value.dtype.hasobject:
        a = np.ascontiguousarray(value)
        digest = cpu_fingerprint("U8", [a.nbytes], memory_view(a.ctypes.data, a.nbytes))
        return {"algorithm": "xxh3-128", "value": f"{dtype_key(a.dtype)}{list(a.shape)}:{digest}"}
    if algorithm in (None, "value"):  # what verify compares variables by: no set order, no hash salt
        try:
            return {"algorithm": "value", "value": compare_value_digest(value)}
        except Exception:
            pass
    if algorithm in (None, "pickle"):  # a value the walk cannot read; or a probe saved before values were walked
        try:
            return {"algorithm": "pickle", "value": digest_bytes(pickle.dumps(value, protocol=5))}
        except Exception:
            pass
    # the whole repr: its first 200 characters (what the listing shows) would miss most changes
    return {"algorithm": "repr", "value": digest_bytes(_repr(value, None).encode())}


def _repr(value, limit: int | None = 200) -> str:
    try:
        return repr(value)[:limit]
    except Exception as exc:  # a probe's value whose __repr__ fails is still compared by its digest
        return f"<{type(value).__qualname__} object: repr failed with {type(exc).__name__}>"


def _evaluate(ns: dict, expr: str):
    with randomstate.untouched():  # each probe draws from the state a save keeps, and leaves it there
        return eval(compile(expr, "<gkews probe>", "eval"), ns)  # the user's own expression, in their namespace


def _evaluate_probes(ns: dict, store: Store, nb: str) -> list[dict]:
    out = []
    try:
        exprs = probe_expressions(store, nb)
    except DamagedProbes as exc:  # the save goes on; verify shows this line as not recorded
        return [{"expr": "(this notebook's probes)", "error": str(exc)}]
    for expr in exprs:
        try:
            value = _evaluate(ns, expr)
            out.append({"expr": expr, "repr": _repr(value), "digest": value_digest(value)})
        except Exception as exc:
            out.append({"expr": expr, "error": f"{type(exc).__name__}: {exc}"})
    return out


def _compare_probe(ns: dict, saved: dict) -> dict:
    result = {"expr": saved["expr"], "saved": saved.get("repr")}
    if "error" in saved:
        return {**result, "verdict": "not-recorded", "detail": f"failed at save time: {saved['error']}"}
    try:
        value = _evaluate(ns, saved["expr"])
    except Exception as exc:
        return {**result, "verdict": "error", "detail": f"{type(exc).__name__}: {exc}"}
    now = value_digest(value, saved["digest"]["algorithm"])
    result["now"] = _repr(value)
    return {**result, "verdict": "match" if now == saved["digest"] else "differs"}


def probe(expr: str, namespace=None, *, notebook=None, root=None, remove: bool = False) -> dict:
    """Record an expression whose result every later save stores and every verify re-checks (or, with
    `remove`, stop recording it). An expression that fails now is not recorded."""
    nb = config.notebook_name(notebook)
    store = Store(root)
    exprs = probe_expressions(store, nb)
    if remove:
        if expr not in exprs:
            raise ValueError(f"no probe {expr!r} is recorded for this notebook; the probes are: "
                             f"{'; '.join(exprs) or 'none'}")
        exprs = [e for e in exprs if e != expr]
        _write_probes(store, nb, exprs)
        return {"expr": expr, "removed": True, "probes": exprs}
    try:
        compile(expr, "<gkews probe>", "eval")
    except SyntaxError as exc:
        raise ValueError(f"probe {expr!r} is not a Python expression: {exc.msg}") from None
    ns, _shell = _namespace(namespace)
    try:
        value = _evaluate(ns, expr)
    except Exception as exc:  # the notebook's error, not ours: said in a line (the magic's traceback is noise)
        raise ValueError(f"probe {expr!r} raised {type(exc).__name__}: {exc}; it was not recorded. A probe must "
                         f"evaluate now, in this namespace (it runs again at each save and each verify): fix "
                         f"it, or define what it uses first, then add it again") from None
    result = {"expr": expr, "repr": _repr(value), "digest": value_digest(value)}
    if expr not in exprs:
        exprs = exprs + [expr]
        _write_probes(store, nb, exprs)
    return {**result, "probes": exprs}


def _write_probes(store: Store, nb: str, exprs: list[str]) -> None:
    doing = ("record the probes in", "the probes are as they were")
    store.ensure(doing)
    try:
        store.ensure_notebook_dir(nb)
        write_json_durable({"probes": exprs}, _probe_file(store, nb), store.tmp_dir)
    except OSError as exc:  # a full or read-only volume: the fix, not a bare errno
        raise write_error(exc, store.root, doing) from None


# -- listing --------------------------------------------------------------------------------------
def list_checkpoints(*, notebook=None, root=None) -> list[dict]:
    rows = Store(root).list(config.notebook_name(notebook))
    for row in rows:
        if row.get("auto"):  # `rewind N` does not reach it by its number (a cell from before a restart)
            row["earlier_kernel"] = counter.earlier_kernel(row)
    return rows


def delete(checkpoint_id: str, *, notebook=None, root=None) -> dict:
    store = Store(root)
    store.delete(config.notebook_name(notebook), checkpoint_id)
    return {"deleted": checkpoint_id}


def status(*, notebook=None, root=None) -> dict:
    nb = config.notebook_name(notebook)
    store = Store(root)
    try:
        latest = summary(store.load_manifest(nb))
    except CheckpointError as exc:
        latest = {"error": str(exc)} if store.checkpoint_ids(nb) else None
    try:
        probes = {"probes": probe_expressions(store, nb)}
    except DamagedProbes as exc:
        probes = {"probes": [], "probes_error": str(exc)}
    return {"identity": identity(), "notebook": nb, "root": store.root, "latest": latest,
            "checkpoints": len(store.checkpoint_ids(nb)), **probes, "activity": dict(_activity)}


__all__ = ["save", "restore", "verify", "probe", "list_checkpoints", "delete", "status", "identity",
           "defined_interactively"]
