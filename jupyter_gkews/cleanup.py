"""Retention for what pauses leave behind: expired checkpoints, orphan blobs, the backend's old snapshots.

The checkpoint store applies retention itself (kernel_state.store.Store.enforce_retention, under its
exclusive lock; the newest complete checkpoint of a notebook is never removed); this module runs it for
every notebook in the store, then asks the backend to clean what it keeps (the GKE backend: this
Workspace's old PodSnapshots), and adds up the bytes freed.
"""
from __future__ import annotations

import asyncio

from .checkpoints import CheckpointCatalog
from .lifecycle.paths import one_line


def clean_checkpoints(root: str, *, keep_last: int, max_bytes: int, max_age_days: float,
                      dry_run: bool = False) -> dict:
    """Blocking: run it in a thread from the server."""
    catalog = CheckpointCatalog(root)
    notebooks = catalog.notebooks()
    result = catalog.store.enforce_retention(notebooks, keep_last, max_bytes, max_age=max_age_days * 86400,
                                             dry_run=dry_run)
    return {"notebooks": len(notebooks), "deleted": result["deleted"], "bytes_freed": result["bytes_freed"],
            "blobs_kept": result["blobs_kept"]}


async def run_cleanup(root: str, backend, *, keep_last: int, max_bytes: int, max_age_days: float,
                      dry_run: bool = False) -> dict:
    """Checkpoints first (off the event loop), then the backend's own objects."""
    report = await asyncio.to_thread(clean_checkpoints, root, keep_last=keep_last, max_bytes=max_bytes,
                                     max_age_days=max_age_days, dry_run=dry_run)
    backend_objects = await backend.cleanup(dry_run=dry_run) if backend is not None else []
    report["backend"] = backend_objects
    report["bytes_freed"] += sum(int(o.get("bytes") or 0) for o in backend_objects)
    report["dry_run"] = dry_run
    return report


def describe(report: dict) -> str:
    """The lines a person reads: what went (or would go), and the bytes."""
    verb = "would remove" if report["dry_run"] else "removed"
    lines = []
    for notebook, ids in sorted(report["deleted"].items()):
        # one line each: a newline in a notebook's name (legal in a file name) split it
        lines.append(f"{verb} {len(ids)} checkpoint(s) of {one_line(notebook)}: {', '.join(ids)}")
    for obj in report["backend"]:
        lines.append(f"{verb} {obj.get('kind', 'object')} {obj.get('name', '?')}"
                     + (f" ({obj['bytes']} bytes)" if obj.get("bytes") else ""))
    if report.get("blobs_kept"):
        lines.append(report["blobs_kept"])
    count = sum(len(ids) for ids in report["deleted"].values())
    lines.append(f"{'dry run: ' if report['dry_run'] else ''}{count} checkpoint(s) and "
                 f"{len(report['backend'])} backend object(s) {'would be removed' if report['dry_run'] else 'removed'} "
                 f"across {report['notebooks']} notebook(s); "
                 f"{report['bytes_freed']} bytes ({report['bytes_freed'] / 2**20:.1f} MiB) "
                 f"{'would be ' if report['dry_run'] else ''}freed")
    return "\n".join(lines)
