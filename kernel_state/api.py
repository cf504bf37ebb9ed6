"""JSON in, JSON out: the calls the server makes inside a kernel through user_expressions.

    kernel_state.api.call('{"op": "verify", "notebook": "work/train.ipynb"}')
    -> '{"ok": true, "result": {...}}'  or  '{"ok": false, "error": "...", "type": "CheckpointNotFound"}'

The server calls answer() instead: the same answer as an object whose display is application/json, so the
user expression's result reaches it as a JSON object (no second encoding).

With "progress": true a save prints {"gkews_progress": {...}} lines on stdout as it goes.
"""
from __future__ import annotations

import json
import sys

from . import auto, checkpoint, config
from .errors import CheckpointError
from .identity import TOKEN, identity
from .store import COMMITTED, Store

_OPS = {
    "identity": lambda req: identity(),
    "save": lambda req: _paused(
        checkpoint.save,
        notebook=req.get("notebook"), root=req.get("root"), names=req.get("names"),
        exclude=req.get("exclude", ()), keep_last=req.get("keep_last"), max_bytes=req.get("max_bytes"),
        progress=_print_progress if req.get("progress") else None, random_state=req.get("random_state", True),
        read_back=bool(req.get("read_back"))),
    "restore": lambda req: _paused(
        checkpoint.restore,
        notebook=req.get("notebook"), root=req.get("root"), checkpoint=req.get("checkpoint"),
        names=req.get("names"), device=req.get("device"), random_state=req.get("random_state", True)),
    "verify": lambda req: checkpoint.verify(notebook=req.get("notebook"), root=req.get("root"),
                                            checkpoint=req.get("checkpoint")),
    "list": lambda req: checkpoint.list_checkpoints(notebook=req.get("notebook"), root=req.get("root")),
    "status": lambda req: checkpoint.status(notebook=req.get("notebook"), root=req.get("root")),
    "probe": lambda req: checkpoint.probe(req["expr"], notebook=req.get("notebook"), root=req.get("root"),
                                          remove=bool(req.get("remove"))),
    "auto": lambda req: _auto(req),
    "rewind": lambda req: auto.rewind(None if req.get("cell") is None else int(req["cell"]),
                                      notebook=req.get("notebook"), root=req.get("root"),
                                      checkpoint_id=req.get("checkpoint")),
    "delete": lambda req: checkpoint.delete(req["checkpoint"], notebook=req.get("notebook"), root=req.get("root")),
    "rename": lambda req: rename(req["old"], req["new"], order=req.get("order"), root=req.get("root"),
                                 timeout=req.get("timeout")),
}

#: seconds a rename waits at most for the store's lock (a save of another kernel may hold it): this kernel
#: runs no cell meanwhile
RENAME_LOCK_TIMEOUT = 300.0


def rename(old: str, new: str, *, order: float | None = None, root: str | None = None,
           timeout: float | None = None) -> dict:
    """The server renamed the file or folder `old` to `new`: this kernel's notebook, if it is in there, is
    called by its new path from now on (the magic, kernel undo and every save without a notebook name), and
    the checkpoints this process wrote under the old name since the server moved that name's checkpoints
    (a cell that ran on, a pause's save queued before the rename) join them. order: when the rename
    happened (two renames may reach the kernel the other way round)."""
    before = config.notebook_name()
    config.note_rename(old, new, order)
    after = config.notebook_name()
    result = {"notebook": after, "was": before, "moved": []}
    store = Store(root)
    # what this process saved under the old name after the server moved what was there: a save of its own, or
    # one its automatic-checkpoint writer is committing now (it files what it commits from now on under the new
    # name); never what another process wrote, never into another notebook's history (Store.move_notebook)
    if after != before and (before in COMMITTED or auto.AUTO.writer.busy()):
        try:
            result["moved"] = store.move_notebook(before, after, only_token=TOKEN, timeout=min(
                RENAME_LOCK_TIMEOUT, RENAME_LOCK_TIMEOUT if timeout is None else float(timeout)))["moved"]
        except CheckpointError as exc:  # the new name holds from now on all the same
            result["error"] = f"the checkpoints this kernel saved under {before!r} since the rename stay there: {exc}"
        if result["moved"]:
            COMMITTED.add(after)  # a rename of `after` told next (a->b->c) takes them on from there
    return result


def _paused(operation, **kwargs):
    """A pause's save and a resume's restore: no automatic checkpoint starts meanwhile."""
    with auto.AUTO.paused():
        return operation(**kwargs)


def _auto(req: dict) -> dict:
    action = req.get("action", "status")
    if action == "on":
        return auto.AUTO.on(notebook=req.get("notebook"), root=req.get("root"))
    if action == "off":
        return auto.AUTO.off(notebook=req.get("notebook"), root=req.get("root"))
    if action == "status":
        if req.get("wait"):  # until the checkpoints staged so far are written, at most this many seconds
            auto.AUTO.writer.wait_idle(float(req["wait"]))
        return auto.AUTO.status()
    if action == "pause":  # the server, before a pause's save; unpause when the pause is called off
        return auto.AUTO.pause()
    if action == "unpause":
        return auto.AUTO.unpause()
    raise ValueError(f"auto action {action!r}: use on, off, status, pause or unpause")


def _print_progress(p: dict) -> None:
    # one write, on a line of its own: print() writes the line and its end apart, and a thread of the notebook
    # printing meanwhile put its output between them (`{"gkews_progress": ...}.`), which failed the pause
    sys.stdout.write("\n" + json.dumps({"gkews_progress": p}) + "\n")
    sys.stdout.flush()


def call(request) -> str:
    try:
        req = json.loads(request) if isinstance(request, (str, bytes)) else dict(request)
        op = req.get("op")
        if op not in _OPS:
            raise ValueError(f"unknown op {op!r}; one of {', '.join(_OPS)}")
        return json.dumps({"ok": True, "result": _OPS[op](req)}, default=str)
    except Exception as exc:  # the caller is another process: every failure becomes a JSON answer
        return json.dumps({"ok": False, "error": str(exc), "type": type(exc).__name__})


class Answer:
    """call()'s answer, displayed as application/json (IPython's _repr_json_)."""

    def __init__(self, payload: dict):
        self.payload = payload

    def _repr_json_(self) -> dict:
        return self.payload

    def __repr__(self) -> str:
        return json.dumps(self.payload)


def answer(request) -> Answer:
    return Answer(json.loads(call(request)))
