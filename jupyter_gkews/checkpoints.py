"""The checkpoint list the REST API shows: manifests read as JSON (the server never unpickles)."""
from __future__ import annotations

import functools

from kernel_state.errors import CheckpointNotFound
from kernel_state.pins import CheckpointPinned
from kernel_state.store import NotAStore, Store

from .errors import Conflict, NotFound, StoreUnusable


def _store_usable(method):
    """A checkpoint root the store refuses (not a store, a link inside) answers with its reason and fix."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except NotAStore as exc:
            raise StoreUnusable(str(exc)) from None
    return wrapper


class CheckpointCatalog:
    def __init__(self, root: str):
        self.store = Store(root)

    def notebooks(self) -> list[str]:
        return self.store.notebooks()

    @_store_usable
    def list(self, notebook: str | None = None) -> list[dict]:
        self.store.check()
        names = [notebook] if notebook else self.notebooks()
        rows = []
        for name in names:
            for row in self.store.list(name):
                row["notebook"] = name
                row.pop("identity", None)
                rows.append(row)
        return sorted(rows, key=lambda r: r["id"], reverse=True)

    @_store_usable
    def owner(self, checkpoint_id: str) -> str | None:
        """The notebook the checkpoint belongs to; None when no notebook has it."""
        return next((name for name in self.notebooks() if checkpoint_id in self.store.checkpoint_ids(name)), None)

    @_store_usable
    def delete(self, checkpoint_id: str, needed: dict[str, str]) -> None:
        if checkpoint_id in needed:
            raise Conflict(f"checkpoint {checkpoint_id} is the one the paused notebook {needed[checkpoint_id]} "
                           f"resumes from; resume first, or delete another")
        for name in self.notebooks():
            if checkpoint_id in self.store.checkpoint_ids(name):
                try:
                    self.store.delete(name, checkpoint_id)
                except CheckpointNotFound:
                    break
                except CheckpointPinned as exc:  # pinned by a pause of this server or of another one
                    raise Conflict(str(exc)) from None
                return
        raise NotFound(f"no checkpoint {checkpoint_id}; GET gkews/checkpoints lists them")
