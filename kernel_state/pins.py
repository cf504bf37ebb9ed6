"""Pins: checkpoints that a pausing or paused notebook needs, so that nothing deletes them.

    <root>/pins/<owner>.json   {"owner": "...", "checkpoints": {"<checkpoint id>": "<notebook>"}}

The jupyter-gkews server writes one pin file per state directory (its "owner") while a pause or a
resume needs checkpoints, and removes it when none is needed. Everyone who deletes checkpoints honours
the union of all pin files: a delete by id (REST, %gkews_checkpoint delete) raises CheckpointPinned,
retention and the cleanup skip pinned ids. A pin file left by a server that is gone for good may be
deleted by hand; that only unpins.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os

from .errors import CheckpointError
from .fsutil import SymlinkRefused, private_dir, remove_quietly, write_json_durable


class CheckpointPinned(CheckpointError):
    """The checkpoint is the one a pausing or paused notebook resumes from."""


def pin_dir(root: str) -> str:
    return os.path.join(root, "pins")


def pin_path(root: str, owner: str) -> str:
    return os.path.join(pin_dir(root), hashlib.sha256(owner.encode()).hexdigest()[:24] + ".json")


def pinned(root: str) -> dict[str, dict]:
    """{checkpoint id: {"notebook": ..., "owner": ...}} over every pin file under root."""
    out: dict[str, dict] = {}
    try:
        names = sorted(os.listdir(pin_dir(root)))
    except (FileNotFoundError, NotADirectoryError):
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(pin_dir(root), name)) as f:
                doc = json.load(f)
            for cid, notebook in doc["checkpoints"].items():
                out[cid] = {"notebook": notebook, "owner": doc.get("owner", "?")}
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            continue  # unreadable: written by hand or torn by something else; pins nothing
    return out


def write_pins(root: str, owner: str, checkpoints: dict[str, str]) -> None:
    """Replace this owner's pins (an empty dict removes its file)."""
    path, folder = pin_path(root, owner), pin_dir(root)
    if os.path.islink(folder):  # like the rest of the store: never write or delete through a link
        raise SymlinkRefused(errno.ELOOP, "is a symbolic link inside the checkpoint store, which never follows "
                             "links; replace it with a real directory (or remove it)", folder)
    if not checkpoints:
        remove_quietly(path)
        return
    os.makedirs(root, mode=0o700, exist_ok=True)
    private_dir(folder)  # 0700 whatever the umask
    write_json_durable({"owner": owner, "checkpoints": dict(checkpoints)}, path, folder)


def refuse_if_pinned(root: str, checkpoint_id: str) -> None:
    """Store.delete's hook: a pinned checkpoint is refused with the reason and the way out."""
    pin = pinned(root).get(checkpoint_id)
    if pin:
        raise CheckpointPinned(
            f"checkpoint {checkpoint_id} is the one the paused notebook {pin['notebook']!r} resumes from "
            f"(pinned by the jupyter-gkews server of {pin['owner']}); resume first, or delete another")


def without_pinned(root: str, checkpoint_ids: list[str]) -> list[str]:
    """Retention's hook: the ids it may delete, pinned ones left out."""
    keep = pinned(root)
    return [cid for cid in checkpoint_ids if cid not in keep]
