"""A notebook's checkpoints follow it through a rename, running or paused.

Before, a running notebook renamed as JupyterLab renames it (PATCH api/contents, then PATCH api/sessions)
kept saving under its old path from the magic while the server saved under the new one: `%gkews_checkpoint
list` missed the newer checkpoint, `restore` brought back an older state without a word, the REST listing of
the new path missed the magic's, and a new notebook at the old path was offered the renamed one's history.
Now the store moves the notebook's checkpoints to the new path's key and the kernel is told its new name
(jupyter_gkews/renames.py, kernel_state.api "rename"): one history, under the new path; none at the old one.
"""
from __future__ import annotations

import asyncio
import importlib
import json
import os
import posixpath
import re

import pytest

import kernel_state
from kernel_state import api, config
from kernel_state.store import Store
from serverkit import SLOW_SAVE, gkews_server_config, open_notebook, post, run_cell, wait_for, wait_kernel_state

ID = r"\d{8}-\d{6}-\d{3}-[0-9a-f]{4}"

#: the kernel's automatic-checkpoint writer, reached without binding a name (a private name is saved now)
WRITER = "__import__('kernel_state.auto').auto.AUTO.writer"


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)  # each server exports its own root
    return gkews_server_config(tmp_path)


def ids_in(text: str) -> list[str]:
    return re.findall(ID, text)


async def listed(jp_fetch, notebook: str | None = None) -> list[dict]:
    """GET gkews/checkpoints[?notebook=...]: what the Checkpoints sidebar shows."""
    r = await jp_fetch("gkews", "checkpoints", params={"notebook": notebook} if notebook else {})
    return json.loads(r.body)["checkpoints"]


async def rename_like_jupyterlab(jp_fetch, old: str, new: str, sessions: dict[str, str], name: bool = True) -> None:
    """The file (or folder), then each open notebook's session: its path, then (name) its name."""
    r = await jp_fetch("api", "contents", old, method="PATCH", body=json.dumps({"path": new}))
    assert json.loads(r.body)["path"] == new
    for session_id, path in sessions.items():
        for change in ({"path": path}, {"name": posixpath.basename(path)})[:2 if name else 1]:
            await jp_fetch("api", "sessions", session_id, method="PATCH", body=json.dumps(change))


async def followed(jp_serverapp) -> None:
    """Every rename so far followed: the store moved and each kernel answered."""
    await asyncio.wait_for(jp_serverapp.web_app.settings["gkews_renames"].idle(), 120)


async def test_a_running_notebook_keeps_one_history_through_a_rename(jp_fetch, jp_serverapp, jp_root_dir):
    """The reproduction of the report: the magic, checkpoint-now, the listings and restore agree."""
    session = await open_notebook(jp_fetch, jp_root_dir, "old.ipynb")
    kid = session["kernel"]["id"]
    (before,) = ids_in(await run_cell(jp_serverapp, kid, "x = 0\n%gkews_checkpoint save"))
    await run_cell(jp_serverapp, kid, "x = 1")
    await rename_like_jupyterlab(jp_fetch, "old.ipynb", "new.ipynb", {session["id"]: "new.ipynb"}, name=False)

    (magic,) = ids_in(await run_cell(jp_serverapp, kid, "%gkews_checkpoint save"))  # at once, as a user would
    await run_cell(jp_serverapp, kid, "x = 2")
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "new.ipynb"})
    assert r.code == 201, r.body
    now = json.loads(r.body)["id"]
    await followed(jp_serverapp)

    history = [now, magic, before]  # newest first
    assert ids_in(await run_cell(jp_serverapp, kid, "%gkews_checkpoint list")) == history
    rows = await listed(jp_fetch, "new.ipynb")
    assert [row["id"] for row in rows] == history and {row["notebook"] for row in rows} == {"new.ipynb"}
    assert [(row["id"], row["notebook"]) for row in await listed(jp_fetch)] == [(i, "new.ipynb") for i in history]
    assert await listed(jp_fetch, "old.ipynb") == []
    out = await run_cell(jp_serverapp, kid, "x = None\n%gkews_checkpoint restore\nprint(repr(x))")
    assert f"from checkpoint {now}" in out and out.strip().endswith("2")  # the newest: x = 1 before the fix
    assert "notebook 'new.ipynb'" in await run_cell(jp_serverapp, kid, "%gkews_checkpoint status")

    # a new notebook created at the old path starts with none
    fresh = (await open_notebook(jp_fetch, jp_root_dir, "old.ipynb"))["kernel"]["id"]
    assert "No checkpoints yet" in await run_cell(jp_serverapp, fresh, "%gkews_checkpoint list")
    with pytest.raises(AssertionError, match="no checkpoint for notebook 'old.ipynb'"):
        await run_cell(jp_serverapp, fresh, "%gkews_checkpoint restore")
    assert await listed(jp_fetch, "old.ipynb") == []
    (own,) = ids_in(await run_cell(jp_serverapp, fresh, "y = 1\n%gkews_checkpoint save"))
    assert [row["id"] for row in await listed(jp_fetch, "old.ipynb")] == [own]
    assert [row["id"] for row in await listed(jp_fetch, "new.ipynb")] == history


async def test_a_rename_onto_a_deleted_notebook_s_path_keeps_the_two_histories_apart(
        jp_fetch, jp_serverapp, jp_root_dir):
    """results.ipynb was deleted and left checkpoints; Untitled.ipynb is renamed results.ipynb. The renamed
    notebook's restore used to bring back the deleted one's variables (its own history stayed under
    Untitled.ipynb) and its retention deleted them; now the earlier history steps aside, still listed."""
    old = await open_notebook(jp_fetch, jp_root_dir, "results.ipynb")
    await run_cell(jp_serverapp, old["kernel"]["id"], "secret_model = 'theirs'\n%gkews_checkpoint save")
    await jp_fetch("api", "sessions", old["id"], method="DELETE")
    await jp_fetch("api", "contents", "results.ipynb", method="DELETE")
    session = await open_notebook(jp_fetch, jp_root_dir, "Untitled.ipynb")
    kid = session["kernel"]["id"]
    (mine,) = ids_in(await run_cell(jp_serverapp, kid, "x = 'mine'\n%gkews_checkpoint save"))
    await rename_like_jupyterlab(jp_fetch, "Untitled.ipynb", "results.ipynb", {session["id"]: "results.ipynb"})
    await followed(jp_serverapp)

    out = await run_cell(jp_serverapp, kid, "del x\n%gkews_checkpoint restore\nprint(repr(x))")
    assert f"from checkpoint {mine}" in out and "secret_model" not in out and out.strip().endswith("'mine'"), out
    rows = await listed(jp_fetch)
    (aside,) = {row["notebook"] for row in rows} - {"results.ipynb"}
    assert aside.startswith("results (earlier notebook, ") and aside.endswith(").ipynb"), rows
    assert [row["id"] for row in rows if row["notebook"] == "results.ipynb"] == [mine]


async def test_a_kernel_busy_at_the_rename_follows_when_its_cell_ends(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """The server moves the checkpoints at once and answers meanwhile; the kernel learns its new name when
    its cell ends, and what the cell saved under the old name joins the rest."""
    gate = tmp_path / "gate"
    session = await open_notebook(jp_fetch, jp_root_dir, "work/busy.ipynb")
    kid = session["kernel"]["id"]
    (before,) = ids_in(await run_cell(jp_serverapp, kid, "x = 'before'\n%gkews_checkpoint save"))
    cell = asyncio.create_task(run_cell(jp_serverapp, kid, (
        f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
        "x = 'in the cell'\n%gkews_checkpoint save")))
    await wait_kernel_state(jp_serverapp, kid, "busy")
    await rename_like_jupyterlab(jp_fetch, "work/busy.ipynb", "work/renamed.ipynb",
                                 {session["id"]: "work/renamed.ipynb"})

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while [row["id"] for row in await listed(jp_fetch, "work/renamed.ipynb")] != [before]:
        assert loop.time() < deadline, "the checkpoints did not move while the kernel ran its cell"
        await asyncio.sleep(0.1)
    started = loop.time()
    assert (await jp_fetch("gkews", "status")).code == 200 and loop.time() - started < 5  # the loop is free
    assert await listed(jp_fetch, "work/busy.ipynb") == []
    assert not cell.done()

    gate.touch()
    (in_cell,) = ids_in(await cell)  # saved under the old name: the kernel had not been told yet
    await followed(jp_serverapp)
    assert ids_in(await run_cell(jp_serverapp, kid, "%gkews_checkpoint list")) == [in_cell, before]
    assert [row["id"] for row in await listed(jp_fetch, "work/renamed.ipynb")] == [in_cell, before]
    assert await listed(jp_fetch, "work/busy.ipynb") == []


async def test_kernel_undo_follows_a_rename(jp_fetch, jp_serverapp, jp_root_dir):
    """Automatic checkpoints, also one staged before the rename and written after it, land under the new
    path, and a rewind finds the cells from before the rename."""
    session = await open_notebook(jp_fetch, jp_root_dir, "undo.ipynb")
    kid = session["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "%gkews_checkpoint auto on")
    await run_cell(jp_serverapp, kid, "a = 1")
    await run_cell(jp_serverapp, kid, f"{WRITER}.wait_idle(60)")
    await run_cell(jp_serverapp, kid, f"{WRITER}.hold()")  # the next snapshot waits in the writer
    await run_cell(jp_serverapp, kid, "a = 2")
    await rename_like_jupyterlab(jp_fetch, "undo.ipynb", "undone.ipynb", {session["id"]: "undone.ipynb"})
    await followed(jp_serverapp)
    await run_cell(jp_serverapp, kid, f"{WRITER}.release(); {WRITER}.wait_idle(60)")
    await run_cell(jp_serverapp, kid, "a = 3")
    await run_cell(jp_serverapp, kid, f"{WRITER}.wait_idle(60)")

    rows = await listed(jp_fetch, "undone.ipynb")
    sources = [row["label"]["source"] for row in rows if row["auto"]]
    assert {"a = 1", "a = 2", "a = 3"} <= set(sources), sources
    assert await listed(jp_fetch, "undo.ipynb") == []
    cell = next(row["label"]["cell"] for row in rows if row["auto"] and row["label"]["source"] == "a = 1")
    out = await run_cell(jp_serverapp, kid, f"%gkews_checkpoint rewind {cell}\nprint(a)")
    assert out.strip().endswith("1"), out


async def test_a_folder_rename_moves_every_notebook_in_it(jp_fetch, jp_serverapp, jp_root_dir):
    sessions = {}
    saved = {}
    for path in ("proj/a.ipynb", "proj/sub/b.ipynb", "project.ipynb"):
        session = await open_notebook(jp_fetch, jp_root_dir, path)
        sessions[path] = session
        (saved[path],) = ids_in(await run_cell(jp_serverapp, session["kernel"]["id"], "v = 1\n%gkews_checkpoint save"))
    await rename_like_jupyterlab(jp_fetch, "proj", "done", {
        sessions["proj/a.ipynb"]["id"]: "done/a.ipynb", sessions["proj/sub/b.ipynb"]["id"]: "done/sub/b.ipynb"})
    await followed(jp_serverapp)

    for old, new in (("proj/a.ipynb", "done/a.ipynb"), ("proj/sub/b.ipynb", "done/sub/b.ipynb")):
        kid = sessions[old]["kernel"]["id"]
        (later,) = ids_in(await run_cell(jp_serverapp, kid, "v = 2\n%gkews_checkpoint save"))
        assert ids_in(await run_cell(jp_serverapp, kid, "%gkews_checkpoint list")) == [later, saved[old]]
        assert [row["id"] for row in await listed(jp_fetch, new)] == [later, saved[old]]
    # project.ipynb shares the folder's first letters, not the folder
    assert [row["id"] for row in await listed(jp_fetch, "project.ipynb")] == [saved["project.ipynb"]]
    assert sorted({row["notebook"] for row in await listed(jp_fetch)}) == [
        "done/a.ipynb", "done/sub/b.ipynb", "project.ipynb"]


async def sessions_now(jp_fetch) -> dict[str, dict]:
    return {s["id"]: s for s in json.loads((await jp_fetch("api", "sessions")).body)}


async def test_a_session_follows_a_rename_made_through_the_contents_api_only(jp_fetch, jp_serverapp, jp_root_dir):
    """A closed tab whose kernel runs on, or any REST client: only the file is renamed (PATCH api/contents),
    nobody PATCHes the session. Before, the session stayed at two.ipynb: the pause recorded two.ipynb and
    the resume said "the notebook file two.ipynb was deleted while paused", and x was lost."""
    session = await open_notebook(jp_fetch, jp_root_dir, "two.ipynb")
    await run_cell(jp_serverapp, session["kernel"]["id"], "x = 41 + 1")
    r = await jp_fetch("api", "contents", "two.ipynb", method="PATCH", body=json.dumps({"path": "dos.ipynb"}))
    assert json.loads(r.body)["path"] == "dos.ipynb"
    await followed(jp_serverapp)
    moved = (await sessions_now(jp_fetch))[session["id"]]
    assert (moved["path"], moved["name"]) == ("dos.ipynb", "dos.ipynb")  # two.ipynb before the fix

    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    (nb,) = paused["notebooks"]
    assert nb["path"] == "dos.ipynb"
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    (nb,) = resumed["notebooks"]
    assert (nb["path"], nb["verdict"]) == ("dos.ipynb", "restored-from-checkpoint"), nb
    (back,) = (await sessions_now(jp_fetch)).values()
    assert back["path"] == "dos.ipynb"
    assert (await run_cell(jp_serverapp, back["kernel"]["id"], "print(x)")).strip() == "42"


async def test_a_restart_after_a_rename_through_the_contents_api_saves_under_the_new_name(
        jp_fetch, jp_serverapp, jp_root_dir):
    """The kernel's environment follows the session (GKEWS_NOTEBOOK): a restarted kernel saved under the old
    name, beside the checkpoints moved to the new one."""
    session = await open_notebook(jp_fetch, jp_root_dir, "work/two.ipynb")
    kid = session["kernel"]["id"]
    (before,) = ids_in(await run_cell(jp_serverapp, kid, "x = 1\n%gkews_checkpoint save"))
    await jp_fetch("api", "contents", "work/two.ipynb", method="PATCH", body=json.dumps({"path": "work/dos.ipynb"}))
    await followed(jp_serverapp)
    await jp_fetch("api", "kernels", kid, "restart", method="POST", body="")
    assert (await run_cell(jp_serverapp, kid, "import os; print(os.environ['GKEWS_NOTEBOOK'])")).strip() \
        == "work/dos.ipynb"  # work/two.ipynb before the fix
    (after,) = ids_in(await run_cell(jp_serverapp, kid, "x = 2\n%gkews_checkpoint save"))
    assert [row["id"] for row in await listed(jp_fetch, "work/dos.ipynb")] == [after, before]
    assert {row["notebook"] for row in await listed(jp_fetch)} == {"work/dos.ipynb"}


async def test_which_sessions_follow_a_rename_through_the_contents_api(jp_fetch, jp_serverapp, jp_root_dir):
    """Every session in the renamed file or folder follows, a console at a notebook's path too (its name,
    "Console 1", stays its own); a console of its own, a notebook beside the folder and a session whose
    client moved it already are left as they are; JupyterLab's own session PATCH, after the contents
    event, finds nothing left to do."""
    a = await open_notebook(jp_fetch, jp_root_dir, "proj/a.ipynb")
    b = await open_notebook(jp_fetch, jp_root_dir, "proj/sub/b.ipynb")
    beside = await open_notebook(jp_fetch, jp_root_dir, "project.ipynb")
    (jp_root_dir / "proj" / "c.ipynb").write_text((jp_root_dir / "project.ipynb").read_text())
    consoles = {}
    for path, name, kernel in (("proj/a.ipynb", "Console 1", {"id": a["kernel"]["id"]}),  # for the notebook
                               ("proj/c.ipynb", "Console 1", {"name": "python3"}),
                               ("console-2-6f1c", "Console 2", {"name": "python3"})):
        r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
            {"path": path, "name": name, "type": "console", "kernel": kernel}))
        consoles[path] = json.loads(r.body)
    assert consoles["proj/a.ipynb"]["id"] == a["id"]  # jupyter_server gives it the notebook's session
    # a client that moves its session first (before the file): that session is at its new path already
    await jp_fetch("api", "sessions", b["id"], method="PATCH", body=json.dumps({"path": "done/sub/b.ipynb"}))

    await jp_fetch("api", "contents", "proj", method="PATCH", body=json.dumps({"path": "done"}))
    await followed(jp_serverapp)
    await jp_fetch("api", "sessions", a["id"], method="PATCH", body=json.dumps({"path": "done/a.ipynb"}))  # late
    now = {sid: (s["path"], s["name"], s["type"]) for sid, s in (await sessions_now(jp_fetch)).items()}
    assert now == {
        a["id"]: ("done/a.ipynb", "a.ipynb", "notebook"),
        b["id"]: ("done/sub/b.ipynb", "b.ipynb", "notebook"),
        beside["id"]: ("project.ipynb", "project.ipynb", "notebook"),
        consoles["proj/c.ipynb"]["id"]: ("done/c.ipynb", "Console 1", "console"),
        consoles["console-2-6f1c"]["id"]: ("console-2-6f1c", "Console 2", "console"),
    }
    # a file without a session, and a folder without one, are renamed as before
    (jp_root_dir / "lone.ipynb").write_text((jp_root_dir / "project.ipynb").read_text())
    (jp_root_dir / "empty").mkdir()
    for old, new in (("lone.ipynb", "alone.ipynb"), ("empty", "vacant")):
        r = await jp_fetch("api", "contents", old, method="PATCH", body=json.dumps({"path": new}))
        assert json.loads(r.body)["path"] == new
    await followed(jp_serverapp)
    assert {sid: (s["path"], s["name"], s["type"]) for sid, s in (await sessions_now(jp_fetch)).items()} == now


async def test_a_notebook_renamed_while_paused_resumes_with_its_whole_history(jp_fetch, jp_serverapp, jp_root_dir):
    session = await open_notebook(jp_fetch, jp_root_dir, "p.ipynb")
    kid = session["kernel"]["id"]
    (earlier,) = ids_in(await run_cell(jp_serverapp, kid, "x = 6\n%gkews_checkpoint save"))
    await run_cell(jp_serverapp, kid, "x = 7")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    checkpoint = paused["notebooks"][0]["checkpoint"]

    await jp_fetch("api", "contents", "p.ipynb", method="PATCH", body=json.dumps({"path": "q.ipynb"}))
    await followed(jp_serverapp)
    assert [row["id"] for row in await listed(jp_fetch, "q.ipynb")] == [checkpoint, earlier]
    assert await listed(jp_fetch, "p.ipynb") == []

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active" and "1 restored-from-checkpoint" in resumed["message"], resumed["message"]
    (nb,) = resumed["notebooks"]
    assert (nb["path"], nb["saved_as"], nb["checkpoint"]) == ("q.ipynb", "p.ipynb", checkpoint)
    sessions = {s["path"]: s["kernel"]["id"] for s in json.loads((await jp_fetch("api", "sessions")).body)}
    kid = sessions["q.ipynb"]
    assert (await run_cell(jp_serverapp, kid, "print(x)")).strip() == "7"
    assert ids_in(await run_cell(jp_serverapp, kid, "%gkews_checkpoint list")) == [checkpoint, earlier]


async def test_a_rename_during_the_pause_s_checkpoint_resumes_from_it(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """The pause saves under the old name while the notebook is renamed: the move waits for that save (the
    store's lock), and the resume finds the checkpoint by the name it was saved under."""
    gate = tmp_path / "gate"
    session = await open_notebook(jp_fetch, jp_root_dir, "slow.ipynb")
    await run_cell(jp_serverapp, session["kernel"]["id"], SLOW_SAVE.format(gate=str(gate)) + "x = 8\n")
    assert (await post(jp_fetch, "pause")).code == 202
    await wait_kernel_state(jp_serverapp, session["kernel"]["id"], "busy")  # in its checkpoint, at the gate
    await jp_fetch("api", "contents", "slow.ipynb", method="PATCH", body=json.dumps({"path": "fast.ipynb"}))
    await jp_fetch("api", "sessions", session["id"], method="PATCH", body=json.dumps({"path": "fast.ipynb"}))
    gate.touch()
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    (nb,) = paused["notebooks"]
    assert (nb["path"], nb["saved_as"]) == ("fast.ipynb", "slow.ipynb")
    await followed(jp_serverapp)
    assert [row["id"] for row in await listed(jp_fetch, "fast.ipynb")] == [nb["checkpoint"]]
    assert await listed(jp_fetch, "slow.ipynb") == []

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active" and "1 restored-from-checkpoint" in resumed["message"], resumed["message"]
    sessions = {s["path"]: s["kernel"]["id"] for s in json.loads((await jp_fetch("api", "sessions")).body)}
    assert (await run_cell(jp_serverapp, sessions["fast.ipynb"], "print(x)")).strip() == "8"


# -- the store alone -----------------------------------------------------------------------------------
def test_a_move_never_goes_over_another_history_and_a_moved_id_is_found_by_its_old_name(tmp_path):
    root = str(tmp_path / "ckpt")
    store = Store(root)
    a = kernel_state.save({"x": "a"}, notebook="a.ipynb", root=root)
    b = kernel_state.save({"x": "b"}, notebook="b.ipynb", root=root)  # an earlier notebook's, at b.ipynb
    kernel_state.save({"x": "z"}, notebook="z.ipynb", root=root)
    # the server renamed z.ipynb onto b.ipynb, so b's file is gone: its history steps aside, whole, under a
    # name of its own, and z's becomes b's (refused, z's kernel restored b's variables, its retention deleted b's)
    (z,) = store.move_notebook("z.ipynb", "b.ipynb")["moved"]
    (aside,) = [n for n in store.notebooks() if n not in ("a.ipynb", "b.ipynb")]
    assert re.fullmatch(r"b \(earlier notebook, \d{4}-\d\d-\d\d \d{6}\)\.ipynb", aside), aside
    assert [c["id"] for c in store.list(aside)] == [b["id"]] and [c["id"] for c in store.list("b.ipynb")] == [z]
    ns = {}
    kernel_state.restore(ns, notebook="b.ipynb", root=root)
    assert ns["x"] == "z"
    kernel_state.restore(ns, notebook="b.ipynb", checkpoint=b["id"], root=root)  # found by the name it had
    assert ns["x"] == "b"
    kernel_state.save({"x": "z2"}, notebook="b.ipynb", root=root, keep_last=1)
    assert [c["id"] for c in store.list(aside)] == [b["id"]]  # not b.ipynb's to delete any more

    assert store.move_notebook("a.ipynb", "c.ipynb")["moved"] == [a["id"]]
    assert store.list("a.ipynb") == [] and store.notebooks() == [aside, "b.ipynb", "c.ipynb"]
    assert [c["notebook"] for c in store.list("c.ipynb")] == ["c.ipynb"]
    # a paused notebook, a pin or a message may still name the id by the name it was saved under
    ns = {}
    kernel_state.restore(ns, notebook="a.ipynb", checkpoint=a["id"], root=root)
    assert ns["x"] == "a"
    with pytest.raises(kernel_state.CheckpointNotFound):
        kernel_state.restore({}, notebook="a.ipynb", root=root)  # but the old name has no newest one
    with pytest.raises(kernel_state.CheckpointNotFound):
        kernel_state.restore({}, notebook="a.ipynb", checkpoint="../../gkews-store", root=root)


def test_a_move_cut_short_is_still_the_old_name_s_and_finishes_later(tmp_path):
    root = str(tmp_path / "ckpt")
    store = Store(root)
    saved = kernel_state.save({"x": 1}, notebook="dir/a.ipynb", root=root)
    info = os.path.join(store.notebook_dir("dir/a.ipynb"), "notebook.json")
    with open(info, "w") as f:  # what a crash between the record and the rename of the folder leaves
        json.dump({"notebook": "dir2/a.ipynb", "renamed_from": ["dir/a.ipynb"]}, f)
    assert store.notebooks() == ["dir/a.ipynb"]
    assert [c["id"] for c in store.list("dir/a.ipynb")] == [saved["id"]]
    assert store.move_notebook("dir/a.ipynb", "dir2/a.ipynb")["moved"] == [saved["id"]]
    assert store.notebooks() == ["dir2/a.ipynb"] and store.list("dir/a.ipynb") == []


def test_a_kernel_moves_only_what_it_saved_under_its_old_name(tmp_path, monkeypatch):
    """The kernel's own stragglers join the moved history; a new notebook's at the old path stay there."""
    root = str(tmp_path / "ckpt")
    monkeypatch.setenv("JPY_SESSION_NAME", "old.ipynb")
    monkeypatch.setattr(config, "_renames", [])
    mine = kernel_state.save({"x": 1}, root=root)
    assert Store(root).move_notebook("old.ipynb", "new.ipynb")["moved"] == [mine["id"]]  # the server's move
    straggler = kernel_state.save({"x": 2}, root=root)  # this kernel, not told yet
    with monkeypatch.context() as m:  # the kernel of a new notebook at old.ipynb: another process
        m.setattr(importlib.import_module("kernel_state.identity"), "TOKEN", "another process")
        other = kernel_state.save({"x": 3}, notebook="old.ipynb", root=root)

    answer = json.loads(api.call({"op": "rename", "old": "old.ipynb", "new": "new.ipynb", "root": root}))
    assert answer["ok"] and answer["result"] == {"notebook": "new.ipynb", "was": "old.ipynb",
                                                 "moved": [straggler["id"]]}, answer
    assert [c["id"] for c in kernel_state.list_checkpoints(root=root)] == [straggler["id"], mine["id"]]
    assert [c["id"] for c in kernel_state.list_checkpoints(notebook="old.ipynb", root=root)] == [other["id"]]
    assert kernel_state.save({"x": 4}, root=root)["notebook"] == "new.ipynb"


def rename_told(old: str, new: str, order: float, root: str) -> dict:
    """What the server's rename call does in the kernel (kernel_state.api "rename")."""
    answer = json.loads(api.call({"op": "rename", "old": old, "new": new, "order": order, "root": root}))
    assert answer["ok"], answer
    return answer["result"]


def test_renames_a_kernel_hears_of_late_leave_the_history_under_the_final_name(tmp_path, monkeypatch):
    """a -> b -> a, and then c -> d -> e, while a cell ran: the server moved the checkpoints at each rename,
    and the kernel heard of both once its cell ended. It moved all of them to the middle name (b, d), a file
    that no longer exists, where a new notebook would have been offered them."""
    root = str(tmp_path / "ckpt")
    store = Store(root)
    monkeypatch.setattr(config, "_renames", [])
    for first, middle, last in (("ra.ipynb", "rb.ipynb", "ra.ipynb"), ("rc.ipynb", "rd.ipynb", "re.ipynb")):
        monkeypatch.setenv("JPY_SESSION_NAME", first)
        monkeypatch.setattr(config, "_renames", [])
        mine = kernel_state.save({"x": 1}, root=root)
        store.move_notebook(first, middle)  # the server, at each rename
        store.move_notebook(middle, last)
        rename_told(first, middle, 1.0, root)
        rename_told(middle, last, 2.0, root)
        assert [c["id"] for c in store.list(last)] == [mine["id"]], (first, middle, last)
        assert store.list(middle) == [] and (last == first or store.list(first) == [])
        assert kernel_state.save({"x": 2}, root=root)["notebook"] == last


def test_a_kernel_never_moves_its_history_into_a_deleted_notebook_s(tmp_path, monkeypatch):
    """Renamed onto the path of a deleted notebook that left checkpoints: the two histories never mix. The
    server sets the deleted notebook's aside before it moves the renamed one's in; a kernel that hears of a
    rename whose history was not moved (the server's move failed) keeps its own where it is."""
    root = str(tmp_path / "ckpt")
    store = Store(root)
    monkeypatch.setattr(config, "_renames", [])
    with monkeypatch.context() as m:  # the deleted notebook's kernel: another process
        m.setattr(importlib.import_module("kernel_state.identity"), "TOKEN", "another process")
        theirs = kernel_state.save({"old": 1}, notebook="gone.ipynb", root=root)
    monkeypatch.setenv("JPY_SESSION_NAME", "mine.ipynb")
    mine = kernel_state.save({"x": 1}, root=root)
    told = rename_told("mine.ipynb", "gone.ipynb", 1.0, root)  # the server's move did not happen
    assert told["moved"] == [] and "stay there" in told["error"], told
    assert [c["id"] for c in store.list("mine.ipynb")] == [mine["id"]]
    assert [c["id"] for c in store.list("gone.ipynb")] == [theirs["id"]]


async def test_a_list_read_just_after_a_rename_names_the_new_path(jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    """The sidebar reads the list as the rename reaches the page: on a slow volume the store's move was not done
    yet, so it showed the old name, and nothing read the list again (a paused notebook's, or one with no kernel)."""
    from jupyter_gkews import renames
    session = await open_notebook(jp_fetch, jp_root_dir, "first.ipynb")
    await run_cell(jp_serverapp, session["kernel"]["id"], "x = 1")
    saved = json.loads((await post(jp_fetch, "checkpoints/now", {"notebook": "first.ipynb"})).body)["id"]
    move = renames.move_checkpoints

    def slow_move(*args, **kwargs):  # a slow volume: the move takes a while
        import time
        time.sleep(1.5)
        return move(*args, **kwargs)
    monkeypatch.setattr(renames, "move_checkpoints", slow_move)
    r = await jp_fetch("api", "contents", "first.ipynb", method="PATCH", body=json.dumps({"path": "second.ipynb"}))
    assert json.loads(r.body)["path"] == "second.ipynb"
    assert [(row["id"], row["notebook"]) for row in await listed(jp_fetch)] == [(saved, "second.ipynb")]
