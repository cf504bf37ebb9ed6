"""`jupyter gkews cleanup [--dry-run]` and the server's periodic cleanup, on a real checkpoint store."""
from __future__ import annotations

import asyncio
import json
import os
import time

import numpy as np
import pytest

import kernel_state
from clikit import jupyter_gkews
from kernels import Kernel
from jupyter_gkews.backends import LocalBackend
from jupyter_gkews.cleanup import run_cleanup
from kernel_state.store import Store
from serverkit import gkews_server_config

A, B = "work/a.ipynb", "work/b.ipynb"


def files(root) -> dict[str, int]:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n != ".lock":
                out[os.path.relpath(os.path.join(d, n), root)] = os.path.getsize(os.path.join(d, n))
    return out


def fill(root, saves: int = 3) -> dict[str, list[str]]:
    """Several checkpoints of two notebooks, each with its own 1 MB array; ids newest first."""
    for i in range(saves):
        for nb in (A, B):
            kernel_state.save({"w": np.full(125_000, i + (0.5 if nb == B else 0.0)), "step": i}, notebook=nb,
                              root=root, keep_last=10)
    return {nb: Store(str(root)).checkpoint_ids(nb) for nb in (A, B)}


def test_dry_run_then_cleanup_by_keep_last(tmp_path):
    root = tmp_path / "ckpt"
    ids = fill(root)
    before = files(root)
    dry = jupyter_gkews("cleanup", f"--checkpoint-root={root}", "--keep-last=1", "--dry-run", "--json", home=tmp_path)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] and plan["deleted"] == {A: ids[A][1:], B: ids[B][1:]}
    assert plan["bytes_freed"] >= 4 * 1_000_000  # four 1 MB arrays no kept checkpoint uses
    assert files(root) == before  # a dry run removes nothing
    text = jupyter_gkews("cleanup", f"--checkpoint-root={root}", "--keep-last=1", "--dry-run", home=tmp_path).stdout
    assert f"would remove 2 checkpoint(s) of {A}" in text
    assert "dry run: 4 checkpoint(s) and 0 backend object(s) would be removed across 2 notebook(s)" in text, text

    done = jupyter_gkews("cleanup", f"--checkpoint-root={root}", "--keep-last=1", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"removed 2 checkpoint(s) of {A}" in done.stdout
    assert (f"4 checkpoint(s) and 0 backend object(s) removed across 2 notebook(s); {plan['bytes_freed']} bytes"
            in done.stdout)
    after = files(root)
    assert sum(before.values()) - sum(after.values()) == plan["bytes_freed"]
    for nb in (A, B):
        assert Store(str(root)).checkpoint_ids(nb) == ids[nb][:1]
        ns: dict = {}
        kernel_state.restore(ns, notebook=nb, root=root)
        assert ns["step"] == 2  # the newest still restores


def test_odd_names_keep_one_line_each_and_a_hard_linked_blob_frees_nothing(tmp_path):
    """A notebook named `new\nline.ipynb` split its "would remove" line in two; a blob the user had hard-linked
    elsewhere was counted as freed, though the other link keeps its bytes."""
    root, odd = tmp_path / "ckpt", "work/new\nline.ipynb"
    kernel_state.save({"w": np.full(250_000, 1.0)}, notebook=odd, root=root)
    old = max((root / "blobs").iterdir(), key=lambda b: b.stat().st_size)  # w's 2 MB, used by this checkpoint alone
    os.link(old, tmp_path / "kept elsewhere")
    kernel_state.save({"w": np.full(250_000, 2.0)}, notebook=odd, root=root)
    dry = jupyter_gkews("cleanup", f"--checkpoint-root={root}", "--keep-last=1", "--dry-run", "--json", home=tmp_path)
    plan = json.loads(dry.stdout)
    text = jupyter_gkews("cleanup", f"--checkpoint-root={root}", "--keep-last=1", home=tmp_path).stdout
    assert "removed 1 checkpoint(s) of work/new\\nline.ipynb: " in text, text
    assert len(text.strip().splitlines()) == 2, text
    assert not old.exists() and 0 < plan["bytes_freed"] < 100_000, plan  # the manifest, not the linked 2 MB
    assert (tmp_path / "kept elsewhere").stat().st_size > 1_000_000


def test_a_dry_run_during_a_save_says_what_the_cleanup_would_free(tmp_path):
    """A dry run beside a save under way counted the save's temp files as bytes it would free (8 MB of a save's
    temp files); the cleanup waits for the save, and then they are blobs of a checkpoint. So does the dry run."""
    from concurrent.futures import ThreadPoolExecutor, TimeoutError as Pending
    root = tmp_path / "ckpt"
    fill(root, saves=1)
    store = Store(str(root))
    temp = os.path.join(store.tmp_dir, "0123456789abcdef0123456789abcdef.safetensors.tmp")
    with ThreadPoolExecutor(1) as pool:
        with store.lock():  # a save under way, its blob still a temp file
            with open(temp, "wb") as f:
                f.write(b"\0" * 8_000_000)
            dry = pool.submit(store.enforce_retention, [A, B], keep_last=1, dry_run=True)
            try:
                dry.result(timeout=2)  # (it used not to wait: then it is done, and counted the temp file)
            except Pending:
                pass
            os.remove(temp)  # the save is committed: its blob is named by its manifest
        assert dry.result(timeout=60)["bytes_freed"] == 0


def test_the_newest_complete_checkpoint_survives_every_limit(tmp_path):
    root = tmp_path / "ckpt"
    ids = fill(root)
    store = Store(str(root))
    # a damaged manifest newer than all: it is not complete, so it neither counts nor is chosen here
    damaged = os.path.join(store.manifest_dir(A), "29991231-235959-999-ffff.json")
    with open(damaged, "w") as f:
        f.write("{ torn")
    r = jupyter_gkews("cleanup", f"--checkpoint-root={root}", "--keep-last=1", "--max-bytes=1",
                      "--max-age-days=0.00001", home=tmp_path)
    assert r.returncode == 1, r.stderr  # the damaged manifest kept the unused blobs: said, and exit 1
    assert store.checkpoint_ids(A) == ["29991231-235959-999-ffff", ids[A][0]]
    assert store.checkpoint_ids(B) == ids[B][:1]
    # while a damaged manifest exists nobody can tell which blobs it needs: none is collected
    assert "bytes (0.0 MiB) freed" in r.stdout and len(os.listdir(store.blob_dir)) > 2


def test_expired_checkpoints_and_orphan_blobs_go(tmp_path):
    root = tmp_path / "ckpt"
    ids = fill(root)
    store = Store(str(root))
    os.unlink(os.path.join(store.manifest_dir(B), ids[B][1] + ".json"))  # e.g. deleted by hand: its blob is an orphan
    time.sleep(1.2)  # let the checkpoints age past the limit below (0.00001 days = 0.86 s)
    r = jupyter_gkews("cleanup", f"--checkpoint-root={root}", "--max-age-days=0.00001", "--json", home=tmp_path)
    report = json.loads(r.stdout)
    assert report["deleted"] == {A: ids[A][1:], B: ids[B][2:]}
    assert store.checkpoint_ids(A) == ids[A][:1] and store.checkpoint_ids(B) == ids[B][:1]
    assert len([n for n in os.listdir(store.blob_dir) if n.endswith(".safetensors")]) == 2


def test_a_damaged_manifest_that_blocks_collection_is_named(tmp_path):
    """Cleanup and every save's collection freed nothing, with no word, while another notebook's
    manifest was damaged; the store kept growing."""
    root = tmp_path / "ckpt"
    ids = fill(root)
    damaged = os.path.join(Store(str(root)).manifest_dir(B), ids[B][0] + ".json")
    with open(damaged, "r+b") as f:
        f.truncate(10)
    for args in (["--dry-run"], []):
        r = jupyter_gkews("cleanup", f"--checkpoint-root={root}", "--keep-last=1", *args, home=tmp_path)
        assert r.returncode == 1, r.stderr  # it exited 0: a cron job saw nothing wrong while the store grew
        assert f"no unused blob was removed: manifest {ids[B][0]}.json cannot be read" in r.stdout, r.stdout
        assert damaged in r.stdout
    assert Store(str(root)).checkpoint_ids(A) == ids[A][:1]  # checkpoints still go; their blobs wait
    ns = {"w": np.zeros(10)}
    out = kernel_state.save(ns, notebook=A, root=root, keep_last=1)["retention"]
    assert out["deleted"] == ids[A][:1] and "no unused blob was removed" in out["blobs_kept"]


def test_the_save_says_what_retention_removed(tmp_path):
    """`save step` twice with keep_last=2 removed the only checkpoint holding the model, silently."""
    with Kernel(tmp_path / "ckpt", extra_env={"GKEWS_KEEP_LAST": "1"}) as k:
        first = k.run("x = 1\n%gkews_checkpoint save").split()[2].rstrip(":")
        out = k.run("x = 2\n%gkews_checkpoint save")
        assert f"Retention removed 1 older checkpoint(s): {first} (GKEWS_KEEP_LAST" in out, out


def test_bad_settings_and_a_missing_store_are_named(tmp_path):
    r = jupyter_gkews("cleanup", f"--checkpoint-root={tmp_path / 'none'}", home=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr  # a mistyped root is not "nothing to clean"
    assert (f"no checkpoint store at {tmp_path / 'none'}: that directory does not exist" in r.stderr
            and "--checkpoint-root=DIR" in r.stderr and "$GKEWS_CHECKPOINT_ROOT" in r.stderr), r.stderr
    (tmp_path / "afile").write_text("not a store")  # it said "that directory does not exist"
    r = jupyter_gkews("cleanup", f"--checkpoint-root={tmp_path / 'afile'}", home=tmp_path)
    assert r.returncode == 2 and f"{tmp_path / 'afile'}: is a file, not a directory" in r.stderr, r.stderr
    fill(tmp_path / "ckpt", saves=1)
    r = jupyter_gkews("cleanup", f"--checkpoint-root={tmp_path / 'ckpt'}", "--keep-last=0", home=tmp_path)
    assert r.returncode == 2
    assert "c.GkewsApp.keep_last must be at least 1, not 0" in r.stderr and "jupyter_server_config.py" in r.stderr
    fill(tmp_path / "three", saves=3)
    before = sorted(p.name for p in (tmp_path / "three").rglob("*.json"))
    for option, reason in (("--max-age-days=-1", "max_age_days must be 0 (no age limit) or positive, not -1.0"),
                           ("--keep-last=abc", "c.GkewsApp.keep_last expected an int"),
                           ("--LocalBackend.release_mode=x", "c.LocalBackend.release_mode")):
        r = jupyter_gkews("cleanup", f"--checkpoint-root={tmp_path / 'three'}", option, home=tmp_path)
        assert r.returncode == 2 and reason in r.stderr and "Traceback" not in r.stderr, (option, r.stderr)
    assert sorted(p.name for p in (tmp_path / "three").rglob("*.json")) == before  # a negative age deleted nothing
    with pytest.raises(ValueError, match="max_age_days must be 0"):
        Store(str(tmp_path / "three")).enforce_retention(["n.ipynb"], max_age=-86400)


def test_a_cleanup_of_a_folder_that_is_no_store_yet_writes_nothing_there(tmp_path):
    """A mistyped --checkpoint-root naming an empty folder: even the dry run made it a store (marker, lock
    file, blobs/, mode 0700), after which later cleanups there delete blob-named files."""
    empty = tmp_path / "shared-folder"
    empty.mkdir(mode=0o775)
    os.chmod(empty, 0o775)
    for args in (["--dry-run"], []):
        r = jupyter_gkews("cleanup", f"--checkpoint-root={empty}", *args, home=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "0 checkpoint(s)" in r.stdout, r.stdout
        assert os.listdir(empty) == [] and (os.stat(empty).st_mode & 0o777) == 0o775, os.listdir(empty)


def test_the_store_of_a_server_started_with_gkews_checkpoint_root_is_the_one_cleaned(tmp_path):
    """The server prefers $GKEWS_CHECKPOINT_ROOT over c.GkewsApp.checkpoint_root: so does cleanup, unless told
    --checkpoint-root, or it would clean (or say there is no) store the server never used."""
    ids = fill(tmp_path / "env-root", saves=2)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "jupyter_server_config.py").write_text(
        f"c.GkewsApp.checkpoint_root = {str(tmp_path / 'configured')!r}\n")
    env = {"GKEWS_CHECKPOINT_ROOT": str(tmp_path / "env-root")}
    dry = jupyter_gkews("cleanup", "--keep-last=1", "--dry-run", "--json", home=tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["deleted"] == {A: ids[A][1:], B: ids[B][1:]}
    given = jupyter_gkews("cleanup", f"--checkpoint-root={tmp_path / 'elsewhere'}", home=tmp_path, env=env)
    assert given.returncode == 2 and f"no checkpoint store at {tmp_path / 'elsewhere'}" in given.stderr


class SnapshotsBackend(LocalBackend):
    """A backend that keeps objects of its own (as the GKE backend keeps PodSnapshots)."""
    calls: list = []

    async def cleanup(self, *, dry_run=False):
        self.calls.append(dry_run)
        return [{"kind": "PodSnapshot", "name": "ws-old-1", "bytes": 5_000}]


async def test_the_backends_cleanup_hook_is_called_and_counted(tmp_path):
    fill(tmp_path / "ckpt", saves=1)
    backend = SnapshotsBackend()
    report = await run_cleanup(str(tmp_path / "ckpt"), backend, keep_last=1, max_bytes=0, max_age_days=0, dry_run=True)
    assert backend.calls == [True]
    assert report["backend"] == [{"kind": "PodSnapshot", "name": "ws-old-1", "bytes": 5_000}]
    assert report["bytes_freed"] == 5_000  # nothing in the store to free yet


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path, keep_last=1, cleanup_interval=0.3, idle_profile="off")


def test_the_server_cleans_up_periodically(jp_serverapp, jp_asyncio_loop, jp_fetch, tmp_path):
    ids = fill(tmp_path / "ckpt")

    async def listed():
        return {c["id"] for c in json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]}

    async def scenario():
        assert await listed() == set(ids[A] + ids[B])
        await jp_serverapp.extension_manager.start_all_extensions()  # pytest-jupyter does not run start hooks
        for _ in range(200):
            if await listed() == {ids[A][0], ids[B][0]}:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the periodic cleanup did not apply keep_last=1: {await listed()}")
    jp_asyncio_loop.run_until_complete(scenario())
