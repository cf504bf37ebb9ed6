"""The two small mechanisms behind issue 11's server fixes, without a server: checkpoint pins in the
store (honoured by every delete and by retention) and the one-owner lock of a state directory."""
from __future__ import annotations

import subprocess
import sys

import pytest

import kernel_state
from kernel_state.pins import CheckpointPinned, pinned, write_pins
from kernel_state.store import Store

from jupyter_gkews.cleanup import clean_checkpoints
from jupyter_gkews.state import StateDirInUse, StateStore


def three_checkpoints(root) -> list[str]:
    ns = {"x": 0}
    ids = []
    for i in range(3):
        ns["x"] = i
        ids.append(kernel_state.save(ns, notebook="nb.ipynb", root=str(root), keep_last=10)["id"])
    return ids  # oldest first


def test_a_pinned_checkpoint_survives_delete_retention_and_cleanup(tmp_path):
    oldest, middle, newest = three_checkpoints(tmp_path)
    write_pins(str(tmp_path), "/state/of/server", {oldest: "nb.ipynb"})
    assert pinned(str(tmp_path)) == {oldest: {"notebook": "nb.ipynb", "owner": "/state/of/server"}}

    with pytest.raises(CheckpointPinned, match="resumes from.*resume first, or delete another"):
        kernel_state.checkpoint.delete(oldest, notebook="nb.ipynb", root=str(tmp_path))
    Store(str(tmp_path)).apply_retention("nb.ipynb", keep_last=1)
    assert clean_checkpoints(str(tmp_path), keep_last=1, max_bytes=0, max_age_days=0)["deleted"] == {}
    assert Store(str(tmp_path)).checkpoint_ids("nb.ipynb") == [newest, oldest]  # middle went, the pin stayed
    restored = {}
    kernel_state.restore(restored, notebook="nb.ipynb", root=str(tmp_path), checkpoint=oldest)
    assert restored["x"] == 0  # and its blobs with it

    write_pins(str(tmp_path), "/state/of/server", {})  # unpinned: an ordinary checkpoint again
    assert pinned(str(tmp_path)) == {}
    kernel_state.checkpoint.delete(oldest, notebook="nb.ipynb", root=str(tmp_path))
    assert Store(str(tmp_path)).checkpoint_ids("nb.ipynb") == [newest]


def test_an_unreadable_pin_file_pins_nothing(tmp_path):
    (tmp_path / "pins").mkdir()
    (tmp_path / "pins" / "torn.json").write_text('{"checkpoints": ')
    assert pinned(str(tmp_path)) == {}


def test_one_server_per_state_directory_and_the_claim_dies_with_its_process(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from jupyter_gkews.state import StateStore; "
         f"StateStore({str(tmp_path)!r}).claim(); print('claimed', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(StateDirInUse, match=f"pid {holder.pid} on .*its own c.GkewsApp.state_dir"):
            StateStore(str(tmp_path)).claim()
    finally:
        holder.kill()  # kill -9: no clean-up runs, the kernel drops the lock
        holder.wait()
    store = StateStore(str(tmp_path))
    store.claim()
    store.release_claim()


def test_links_in_place_of_the_owner_file_or_the_pins_folder_are_never_followed(tmp_path):
    """owner.lock or <store>/pins replaced by a link to someone's file or folder: the claim does not
    truncate the file, the pins write nothing there, and neither changes the folder's mode."""
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    precious = outside / "precious.txt"
    precious.write_text("keep me\n")
    (outside / "folder").chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    (state / "owner.lock").symlink_to(precious)
    with pytest.raises(OSError, match="owner.lock.*|is a symbolic link"):
        StateStore(str(state)).claim()
    assert precious.read_text() == "keep me\n"

    root = tmp_path / "store"
    ids = three_checkpoints(root)
    (root / "pins").symlink_to(outside / "folder")
    for needed in ({ids[0]: "nb.ipynb"}, {}):
        with pytest.raises(OSError, match="is a symbolic link inside the checkpoint store"):
            write_pins(str(root), "server-a", needed)
    assert list((outside / "folder").iterdir()) == [] and (outside / "folder").stat().st_mode & 0o777 == 0o755
