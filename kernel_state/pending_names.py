"""Blob names the background writer gives: kernel undo names a changed torch storage's copy later.

A blob is named by the hash of its bytes. Hashing a training step's weights and gradients (268 MB)
took 8 ms of the 40 the user waited after the cell, so kernel undo stages a changed torch storage under
a placeholder ("pending-17") and the writer thread hashes the copy, then replaces the placeholder
everywhere in the manifest before it commits it (a manifest never reaches the disk with one). A later
snapshot that found the storage unchanged (its version counter) may refer to the placeholder while
the older snapshot is still being written; the writer writes snapshots in order, so the name is known
by the time it commits the later one. numpy buffers are hashed anyway to find what changed, so they
keep their names from the start.
"""
from __future__ import annotations

import itertools

PREFIX = "pending-"
_numbers = itertools.count()
_names: dict[str, str] = {}  # placeholder -> the digest the writer computed
KEEP = 100_000  # the oldest names are forgotten beyond this; a storage still using one is copied again


def new() -> str:
    return f"{PREFIX}{next(_numbers)}"


def is_pending(name) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def named(placeholder: str, digest: str) -> None:
    _names[placeholder] = digest
    while len(_names) > KEEP:
        del _names[next(iter(_names))]


def resolve(name: str) -> str:
    return _names.get(name, name)


def resolve_record(record: dict) -> None:
    """A storage record (of a manifest, or of what a previous save wrote) with its blob's real name,
    where the writer has given it one."""
    blob = record.get("blob")
    if not is_pending(blob) or blob not in _names:
        return
    record["blob"] = _names[blob]
    fingerprint = record.get("fingerprint")
    if fingerprint and fingerprint.get("value") == blob:  # a CPU storage's fingerprint is its blob's name
        record["fingerprint"] = {**fingerprint, "value": _names[blob]}


def resolve_manifest(manifest: dict) -> list[str]:
    """Every placeholder in a staged manifest replaced by its name; returns those still unknown."""
    for record in manifest["storages"].values():
        resolve_record(record)
    blobs = manifest["blobs"]
    for key in [k for k in blobs if is_pending(k) and k in _names]:
        blobs[_names[key]] = blobs.pop(key)
    return [k for k in blobs if is_pending(k)]
