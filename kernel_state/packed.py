"""Which pack blob holds the bytes of a small storage, as far as this process knows.

Storages under 1 MiB share pack blobs (capture.flush_pack), each entry named by the hash of its bytes. A
save that meets bytes a pack already holds refers to that pack instead of packing them again: only new
bytes go into new packs. What a save packed, and what a restore read from a pack (checked against the
blob's hash), is noted here, by store root and entry name; the save still checks that the blob is there.
"""
from __future__ import annotations

_LIMIT = 1 << 18  # entries: forgetting costs a pack written again, never a wrong answer
_packed: dict[tuple[str, str], tuple[str, int]] = {}


def note(root: str, name: str, blob: str, size: int) -> None:
    if len(_packed) >= _LIMIT and (root, name) not in _packed:
        _packed.clear()
    _packed[(root, name)] = (blob, size)


def find(root: str, name: str) -> tuple[str, int] | None:
    """(pack blob, its size) holding the entry `name` in the store at root, or None."""
    return _packed.get((root, name))
