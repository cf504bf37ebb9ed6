"""The store only deletes what it wrote, never follows links inside itself, and keeps its files private.

Issue 11, problems 1, 9 and 16: a checkpoint root pointed at an existing folder wiped its tmp/, a blobs/
link deleted another folder's files, pickled variables were 0644 under umask 022, and
kernel_state.checkpoint.delete('/x/outside') deleted /x/outside.json.
"""
from __future__ import annotations

import errno
import os
import stat

import numpy as np
import pytest

import kernel_state
from kernel_state.errors import CheckpointNotFound, CheckpointWriteError
from kernel_state.store import MARKER, NotAStore, Store
from clikit import jupyter_gkews
from kernels import Kernel

NB = "work/safety.ipynb"


def tree(root) -> dict[str, bytes]:
    """Every file under root (not following links) with its bytes: what a user would compare."""
    out = {}
    for d, dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = os.readlink(p).encode() if os.path.islink(p) else open(p, "rb").read()
    return out


def users_folder(path):
    """A folder of somebody's files, with a tmp/ and a blobs/ of their own (what ~ may look like)."""
    for rel, data in {"notes.txt": b"my notes", "tmp/draft.txt": b"draft", "blobs/photo.jpg": b"\xff\xd8",
                      "tmp/0123456789abcdef0123456789abcdef.tmp": b"named like ours, but not ours"}.items():
        p = path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return tree(path)


def test_a_folder_that_is_not_a_store_is_refused_and_left_as_it_was(tmp_path):
    before = users_folder(tmp_path / "home")
    with pytest.raises(NotAStore, match=r"is not a gkews checkpoint store: it holds files the store did not "
                                        r"write \(blobs/photo.jpg, notes.txt, tmp/draft.txt\).*empty or new"):
        kernel_state.save({"x": 1}, notebook=NB, root=tmp_path / "home")
    for call in (lambda: kernel_state.delete("20260101-000000-000-abcd", notebook=NB, root=tmp_path / "home"),
                 lambda: Store(str(tmp_path / "home")).enforce_retention([NB], keep_last=1)):
        with pytest.raises(NotAStore):
            call()
    assert tree(tmp_path / "home") == before  # nothing written, nothing deleted


def test_the_magic_says_why_in_a_real_kernel(tmp_path):
    before = users_folder(tmp_path / "home")
    kernel = Kernel(tmp_path / "home", NB)
    try:
        out = kernel.run("x = 1\n%gkews_checkpoint save", allow_error=True)
    finally:
        kernel.close()
    assert "UsageError" in out and "is not a gkews checkpoint store" in out and "GKEWS_CHECKPOINT_ROOT" in out
    assert tree(tmp_path / "home") == before


def test_cleanup_pointed_at_a_home_folder_refuses(tmp_path):
    before = users_folder(tmp_path / "home")
    done = jupyter_gkews("cleanup", f"--checkpoint-root={tmp_path / 'home'}", "--keep-last=1", home=tmp_path / "jp")
    assert done.returncode == 2 and "is not a gkews checkpoint store" in done.stderr, done.stderr
    # the fix in this command's terms: the server's setting pointed elsewhere would clean another store
    assert "Give this command the server's checkpoint store with --checkpoint-root=DIR" in done.stderr, done.stderr
    assert "GKEWS_CHECKPOINT_ROOT" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert tree(tmp_path / "home") == before


def test_a_new_or_empty_folder_becomes_a_store_with_a_marker(tmp_path):
    (tmp_path / "empty").mkdir()
    for root in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        kernel_state.save({"x": 1}, notebook=NB, root=root)
        assert (root / MARKER).is_file()
        assert kernel_state.restore({}, notebook=NB, root=root)["restored"] == ["x"]


def test_a_store_of_an_earlier_version_is_adopted(tmp_path):
    root = tmp_path / "ckpt"
    kernel_state.save({"w": np.arange(10.0)}, notebook=NB, root=root)
    (root / MARKER).unlink()  # written before the marker existed: only the store's own names inside
    kernel_state.save({"w": np.arange(20.0)}, notebook=NB, root=root)
    assert (root / MARKER).is_file() and len(kernel_state.list_checkpoints(notebook=NB, root=root)) == 2


@pytest.mark.parametrize("shape", ["md5-named cache", "notebooks and tmp"])
def test_a_folder_with_only_our_names_but_no_checkpoint_is_not_taken_for_an_earlier_store(tmp_path, shape):
    """A cache of md5-named .pkl files in blobs/ (or a notebooks/<24 hex>/ folder of notebooks beside a
    tmp/<32 hex>.tmp) was taken for a store of an earlier version: cleanup deleted every file (its dry run
    crashed first), and a save made it a store and deleted them too. An earlier store holds checkpoints."""
    folder = tmp_path / "cache"
    files = {"md5-named cache": {f"blobs/{'a' * 32}.pkl": b"result alpha", f"blobs/{'b' * 32}.safetensors": b"beta"},
             "notebooks and tmp": {f"notebooks/{'c' * 24}/analysis.ipynb": b"{}", f"tmp/{'d' * 32}.tmp": b"draft"}}
    for rel, data in files[shape].items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    before, mode = tree(folder), stat.S_IMODE(os.stat(folder).st_mode)
    for dry in ("--dry-run", "--keep-last=1"):
        done = jupyter_gkews("cleanup", f"--checkpoint-root={folder}", dry, home=tmp_path / "jp")
        assert done.returncode == 2 and "is not a gkews checkpoint store" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    with pytest.raises(NotAStore, match="no checkpoint manifest" if shape == "md5-named cache" else "analysis.ipynb"):
        kernel_state.save({"x": 1}, notebook=NB, root=folder)
    assert tree(folder) == before and stat.S_IMODE(os.stat(folder).st_mode) == mode


def test_a_dry_run_refuses_a_link_in_the_layout_as_the_cleanup_does(tmp_path):
    """With tmp/ a link to another folder, the dry run counted that folder's temp-named files as bytes to free
    (exit 0) where the cleanup refused (exit 2)."""
    root = tmp_path / "ckpt"
    kernel_state.save({"w": np.arange(1000.0)}, notebook=NB, root=root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ("e" * 32 + ".tmp")).write_bytes(b"x" * 4096)
    (root / "tmp").rmdir()
    (root / "tmp").symlink_to(elsewhere)
    for dry in ("--dry-run", "--keep-last=1"):
        done = jupyter_gkews("cleanup", f"--checkpoint-root={root}", dry, home=tmp_path / "jp")
        assert done.returncode == 2 and "is a symbolic link inside the checkpoint store" in done.stderr, done.stderr
    assert (elsewhere / ("e" * 32 + ".tmp")).read_bytes() == b"x" * 4096


def test_garbage_collection_removes_only_names_the_store_wrote(tmp_path):
    root = tmp_path / "ckpt"
    kernel_state.save({"w": np.arange(100_000.0)}, notebook=NB, root=root)
    first = set((root / "blobs").glob("*.safetensors"))
    assert first
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "precious.bin").write_bytes(b"x" * 10)
    strangers = {"blobs/README": b"hands off", "tmp/session.log": b"log", "blobs/notes.pkl.bak": b"bak",
                 "notebooks/mine.txt": b"mine"}
    for rel, data in strangers.items():
        (root / rel).write_bytes(data)
    link = root / "blobs" / ("f" * 32 + ".pkl")  # a link under a blob's name points elsewhere
    link.symlink_to(tmp_path / "elsewhere" / "precious.bin")

    kernel_state.save({"w": np.arange(200_000.0)}, notebook=NB, root=root, keep_last=1)  # retention + GC
    assert not any(p.exists() for p in first)  # the store's own unreferenced blobs went
    (kept,) = [r["id"] for r in kernel_state.list_checkpoints(notebook=NB, root=root)]
    kernel_state.save({"y": 1}, notebook=NB, root=root)
    kernel_state.delete(kept, notebook=NB, root=root)  # delete + GC
    assert not list((root / "blobs").glob("*.safetensors"))
    for rel, data in strangers.items():
        assert (root / rel).read_bytes() == data, rel
    assert link.is_symlink() and (tmp_path / "elsewhere" / "precious.bin").read_bytes() == b"x" * 10


@pytest.mark.parametrize("linked", ["blobs", "tmp", "notebooks", "manifests"])
def test_a_link_inside_the_store_is_refused(tmp_path, linked):
    root = tmp_path / "ckpt"
    kernel_state.save({"w": np.arange(1000.0)}, notebook=NB, root=root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0123456789abcdef0123456789abcdef.pkl").write_bytes(b"someone else's, named like a blob")
    (elsewhere / "0123456789abcdef0123456789abcdef.tmp").write_bytes(b"someone else's, named like a temp")
    target = root / linked if linked != "manifests" else next((root / "notebooks").glob("*/manifests"))
    target.rename(tmp_path / "moved")
    target.symlink_to(elsewhere)
    before, blobs = tree(elsewhere), tree(tmp_path / "moved" if linked == "blobs" else root / "blobs")
    with pytest.raises(NotAStore, match=rf"{target} is a symbolic link inside the checkpoint store .*never follows"):
        kernel_state.save({"w": np.arange(5.0)}, notebook=NB, root=root)
    try:  # garbage collection refuses, or (a link deeper down) cannot tell what is referenced: keeps all
        Store(str(root)).enforce_retention([NB], keep_last=1)
    except NotAStore:
        pass
    assert tree(elsewhere) == before  # nothing written there, nothing deleted
    assert tree(tmp_path / "moved" if linked == "blobs" else root / "blobs") == blobs


def test_a_lock_file_that_is_a_link_is_refused_with_the_way_out(tmp_path):
    """The link was never followed, but the save showed a raw ELOOP traceback and cleanup crashed."""
    root, precious = tmp_path / "ckpt", tmp_path / "notes.txt"
    kernel_state.save({"w": 1}, notebook=NB, root=root)
    precious.write_text("PRECIOUS")
    (root / ".lock").unlink()
    (root / ".lock").symlink_to(precious)
    with pytest.raises(NotAStore, match=rf"{root / '.lock'} is a symbolic link; .* Delete it"):
        kernel_state.save({"w": 2}, notebook=NB, root=root)
    r = jupyter_gkews("cleanup", f"--checkpoint-root={root}", home=tmp_path / "home")
    assert r.returncode == 2 and f"{root / '.lock'} is a symbolic link" in r.stderr and "Traceback" not in r.stderr
    assert precious.read_text() == "PRECIOUS" and len(kernel_state.list_checkpoints(notebook=NB, root=str(root))) == 1


def test_a_relative_store_root_stays_where_the_kernel_started(tmp_path):
    """It was resolved again on every call: after %cd the checkpoints were gone and a second store grew
    in the user's data folder."""
    (tmp_path / "data").mkdir()
    with Kernel("ckpt", cwd=tmp_path) as k:
        k.run("x = 1\n%gkews_checkpoint save")
        k.run("%cd data")
        assert "No checkpoints yet" not in k.run("%gkews_checkpoint list")
        k.run("x = 2\n%gkews_checkpoint save")
        assert k.value("len(__import__('kernel_state').list_checkpoints())") == 2
    assert not (tmp_path / "data" / "ckpt").exists() and (tmp_path / "ckpt" / MARKER).exists()


def test_delete_takes_an_id_never_a_path(tmp_path):
    root = tmp_path / "ckpt"
    kernel_state.save({"x": 1}, notebook=NB, root=root)
    outside = tmp_path / "x"
    outside.mkdir()
    (outside / "outside.json").write_text("{}")
    for bad in (str(outside / "outside"), "../../../x/outside", "..", "", "20260101-000000-000-abcd/../x"):
        with pytest.raises(CheckpointNotFound, match="is not a checkpoint id"):
            kernel_state.checkpoint.delete(bad, notebook=NB, root=root)
    with pytest.raises(CheckpointNotFound, match="does not exist"):
        kernel_state.checkpoint.delete("20260101-000000-000-abcd", notebook=NB, root=root)
    assert (outside / "outside.json").read_text() == "{}"
    assert len(kernel_state.list_checkpoints(notebook=NB, root=root)) == 1


@pytest.mark.parametrize("umask", [0o022, 0o000, 0o077])
def test_everything_in_the_store_is_private_whatever_the_umask(tmp_path, umask):
    torch = pytest.importorskip("torch")
    root = tmp_path / "ckpt"
    old = os.umask(umask)
    try:
        ns = {"secrets": {"api_key": "sk-do-not-share"}, "a": np.arange(10.0), "t": torch.ones(3)}
        kernel_state.save(ns, notebook=NB, root=root)
        kernel_state.probe("len(secrets)", ns, notebook=NB, root=root)
        kernel_state.save(ns, notebook=NB, root=root)
    finally:
        os.umask(old)
    modes = {}
    for d, dirs, names in os.walk(root):
        modes[os.path.relpath(d, root)] = stat.S_IMODE(os.stat(d).st_mode)
        for n in names:
            modes[os.path.relpath(os.path.join(d, n), root)] = stat.S_IMODE(os.stat(os.path.join(d, n)).st_mode)
    assert any(p.endswith(".pkl") for p in modes) and any(p.endswith("probes.json") for p in modes)
    wrong = {p: oct(m) for p, m in modes.items()
             if m != (0o700 if os.path.isdir(os.path.join(root, p)) else 0o600)}
    assert wrong == {}


def test_an_existing_store_becomes_private(tmp_path):
    root = tmp_path / "ckpt"
    kernel_state.save({"secrets": {"k": "v"}}, notebook=NB, root=root)
    for d, dirs, names in os.walk(root):  # what an earlier version left under umask 022
        os.chmod(d, 0o755)
    kernel_state.save({"secrets": {"k": "v2"}}, notebook=NB, root=root)
    for d in (root, root / "blobs", root / "tmp", root / "notebooks"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d


def test_a_restore_reads_a_store_on_a_read_only_volume(tmp_path, monkeypatch):
    """A restore writes nothing: on a read-only volume (no lock file can be made) it still restores, rather
    than failing with "[Errno 30] Read-only file system: '.../.lock'"."""
    import errno

    from kernel_state import store as store_module
    kernel_state.save({"x": 41, "w": list(range(10))}, notebook="ro.ipynb", root=tmp_path)
    os.remove(tmp_path / ".lock")
    real_open = os.open

    def read_only(path, flags, *args):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real_open(path, flags, *args)
    monkeypatch.setattr(store_module.os, "open", read_only)
    back = {}
    result = kernel_state.restore(back, notebook="ro.ipynb", root=tmp_path)
    assert result["failed"] == {} and back == {"x": 41, "w": list(range(10))}


@pytest.mark.parametrize("code, fix", [
    (errno.EROFS, "at a writable directory (this volume is mounted read-only)"),
    (errno.EACCES, "Give this user write access there"),
    (errno.ENOENT, "at a directory this user can create and write"),
    (errno.ENOSPC, "Free space there"),
])
def test_a_store_that_cannot_be_written_says_why_with_the_fix_for_that_cause(tmp_path, monkeypatch, code, fix):
    """A read-only volume gave a bare `OSError: [Errno 30] ... .lock` traceback; a root that cannot be made
    said "Free space there" whatever the cause, with the system's words twice."""
    store = Store(str(tmp_path / "store"))
    store.ensure()
    opened = os.open

    def refuse_lock(path, *args, **kwargs):
        if path.endswith(".lock"):
            raise OSError(code, os.strerror(code), path)
        return opened(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", refuse_lock)
    with pytest.raises(CheckpointWriteError) as caught:
        with store.lock():
            pass
    message = str(caught.value)
    assert fix in message and message.count(os.strerror(code)) == 1, message
    assert ("Free space" in message) == (code == errno.ENOSPC), message
    assert f"{tmp_path / 'store' / '.lock'}" in message


def test_a_delete_and_a_probe_on_a_store_that_cannot_be_written_say_what_they_left(tmp_path, monkeypatch):
    """A delete on a read-only volume said 'could not write the checkpoint ... nothing of this checkpoint was
    kept'; a probe on a full disk gave a bare 'OSError: [Errno 28] No space left on device'."""
    from kernel_state import checkpoint as checkpoint_module
    saved = kernel_state.save({"x": 1}, notebook="a.ipynb", root=tmp_path)
    opened = os.open

    def read_only(path, flags, *args, **kwargs):
        if path.endswith(".lock") and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return opened(path, flags, *args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(os, "open", read_only)
        with pytest.raises(CheckpointWriteError) as caught:
            kernel_state.checkpoint.delete(saved["id"], notebook="a.ipynb", root=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"could not change the checkpoint store at {tmp_path}"), message
    assert "nothing was deleted or moved" in message and "of this checkpoint was kept" not in message, message
    assert [c["id"] for c in Store(str(tmp_path)).list("a.ipynb")] == [saved["id"]]

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(checkpoint_module, "write_json_durable", full)
    with pytest.raises(CheckpointWriteError) as caught:
        kernel_state.checkpoint.probe("x + 1", {"x": 1}, notebook="a.ipynb", root=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"could not record the probes in {tmp_path}"), message
    assert "Free space there" in message and "the probes are as they were" in message, message


def test_a_rename_on_a_full_volume_takes_the_history_along(tmp_path, monkeypatch):
    """A rename while the volume was full left the checkpoints under the old name (the record of the move is a new
    file): a new notebook at the old path then took that history over, and its retention deleted it. On a full
    ext4, xfs or tmpfs no file can be made, but a file's own blocks can be written again: the record goes there."""
    from kernel_state import fsutil, store as store_module
    saved = kernel_state.save({"x": 1}, notebook="a.ipynb", root=tmp_path)

    def full(*args, **kwargs):  # what a full volume answers to every new file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    made = os.mkdir

    def full_mkdir(path, *args):  # and to every new folder (one there already is there)
        if os.path.lexists(path):
            return made(path, *args)
        full()
    with monkeypatch.context() as m:
        m.setattr(fsutil, "create_private", full)
        m.setattr(store_module, "create_private", full)
        m.setattr(os, "mkdir", full_mkdir)
        moved = Store(str(tmp_path)).move_notebook("a.ipynb", "b.ipynb")
    assert moved["moved"] == [saved["id"]]
    store = Store(str(tmp_path))
    assert store.notebooks() == ["b.ipynb"] and [c["id"] for c in store.list("b.ipynb")] == [saved["id"]]
    # space freed, a new notebook at the old path saves with a retention of one: the renamed history stays
    other = kernel_state.save({"y": 2}, notebook="a.ipynb", root=tmp_path, keep_last=1)
    assert [c["id"] for c in store.list("a.ipynb")] == [other["id"]]
    ns = {}
    kernel_state.restore(ns, notebook="b.ipynb", root=tmp_path)
    assert ns == {"x": 1}

    # a volume that refuses that too (copy-on-write: btrfs, zfs) says it is full, and nothing moved
    with monkeypatch.context() as m:
        m.setattr(fsutil, "create_private", full)
        m.setattr(fsutil, "rewrite_json_in_place", full)
        with pytest.raises(CheckpointWriteError) as caught:
            Store(str(tmp_path)).move_notebook("b.ipynb", "c.ipynb")
    message = str(caught.value)
    assert message.startswith(f"could not move checkpoints in {tmp_path}: the disk is full"), message
    assert "Free space there" in message and "still listed under the old name" in message, message
    assert Store(str(tmp_path)).notebooks() == ["a.ipynb", "b.ipynb"]
    assert [c["id"] for c in Store(str(tmp_path)).list("b.ipynb")] == [saved["id"]]


def test_a_full_volume_says_how_full_and_how_much_of_it_the_checkpoints_hold(tmp_path, monkeypatch):
    """"the disk is full" alone did not say whether the checkpoints fill it, nor that kernel undo's own automatic
    checkpoints (one after every cell) may be what does: the message gives the volume's free and total space,
    the store's share and its automatic checkpoints, and the settings that keep fewer of them."""
    from kernel_state import fsutil, store as store_module
    for cell in (1, 2, 3):
        kernel_state.save({"w": np.full(100_000, cell, dtype=np.float32)}, notebook="a.ipynb", root=tmp_path,
                          auto_label={"cell": cell, "source": f"w = step({cell})"})
    kernel_state.save({"x": 1}, notebook="a.ipynb", root=tmp_path)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(fsutil, "create_private", full)
    monkeypatch.setattr(store_module, "create_private", full)
    with pytest.raises(CheckpointWriteError) as caught:
        kernel_state.save({"y": np.arange(1000)}, notebook="a.ipynb", root=tmp_path)
    message = str(caught.value)
    free = store_module.human_bytes(__import__("shutil").disk_usage(tmp_path).total)
    assert f"free of {free} there, the checkpoint store holds 1.1" in message, message  # 3 x 400 KB, in MiB
    assert "in 4 checkpoint(s), 3 of them kernel undo's automatic ones. Free space there" in message, message
    assert "keep fewer automatic checkpoints: GKEWS_AUTO_KEEP_LAST, GKEWS_AUTO_MAX_BYTES" in message, message
    assert message.count(os.strerror(errno.ENOSPC)) == 1 and "nothing of this checkpoint was kept" in message


@pytest.mark.parametrize("code, words", [
    (errno.EROFS, "Run it where that volume can be written (it is mounted read-only here)"),
    (errno.EACCES, "Give this user write access there (the server's user)"),
])
def test_cleanup_says_the_fix_of_a_store_it_cannot_change_in_its_own_terms(code, words):
    """A read-only store told the cleanup to point the server's GKEWS_CHECKPOINT_ROOT at a writable directory:
    another store to clean, not this one."""
    from jupyter_gkews.cli.cleanup import for_this_command
    from kernel_state.store import CHANGING, write_error
    message = for_this_command(str(write_error(OSError(code, os.strerror(code)), "/srv/store", CHANGING)))
    assert words in message and "GKEWS_CHECKPOINT_ROOT" not in message, message
