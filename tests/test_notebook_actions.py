"""The UI's per-notebook actions: checkpoint now, and restore a checkpoint into the running kernel."""
from __future__ import annotations

import asyncio
import json

import pytest
from tornado.httpclient import HTTPClientError

import kernel_state
from serverkit import SLOW_SAVE, open_notebook, post, run_cell, saving_started, wait_until


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gkews": True}, "allow_unauthenticated_access": False},
            "GkewsApp": {"checkpoint_root": str(tmp_path / "ckpt"), "state_dir": str(tmp_path / "state")}}


async def test_checkpoint_now_then_restore_into_the_running_kernel(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/a.ipynb")
    kid = s["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "weights = [1, 2, 3]\ngen = (i for i in range(3))")

    r = await post(jp_fetch, "checkpoints/now", {"notebook": "work/a.ipynb"})
    assert r.code == 201, r.body
    saved = json.loads(r.body)
    assert saved["notebook"] == "work/a.ipynb" and "weights" in saved["saved"] and "gen" in saved["skipped"]
    listed = json.loads((await jp_fetch("gkews", "checkpoints", params={"notebook": "work/a.ipynb"})).body)
    assert [c["id"] for c in listed["checkpoints"]] == [saved["id"]]

    await run_cell(jp_serverapp, kid, "weights.append(4)")
    r = await post(jp_fetch, f"checkpoints/{saved['id']}/restore", {"notebook": "work/a.ipynb"})
    assert r.code == 200, r.body
    assert "weights" in json.loads(r.body)["restored"]
    assert (await run_cell(jp_serverapp, kid, "print(weights)")).strip() == "[1, 2, 3]"


async def test_a_kernel_shut_down_during_checkpoint_now_is_named_so(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """DELETE api/kernels interrupts the kernel first: the save's answer was "KeyboardInterrupt" and "the
    kernel and its variables are unchanged", while the kernel was on its way out. Its shutdown is held
    here until the answer is in, the order a loaded machine produced."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    gate = tmp_path / "gate"
    await run_cell(jp_serverapp, kid, SLOW_SAVE.format(gate=str(gate)))
    kernel, answered = jp_serverapp.kernel_manager.get_kernel(kid), asyncio.Event()
    ask_to_shut_down = kernel._async_request_shutdown

    async def once_answered(*args, **kwargs):
        await answered.wait()
        return await ask_to_shut_down(*args, **kwargs)

    kernel._async_request_shutdown = once_answered
    saving = asyncio.ensure_future(post(jp_fetch, "checkpoints/now", {"notebook": "a.ipynb"}))
    await wait_until(lambda: saving_started(gate), "the save to start")
    deleting = asyncio.ensure_future(jp_fetch("api", "kernels", kid, method="DELETE"))
    r = await saving
    answered.set()
    await deleting
    assert r.code == 409, r.body
    message = json.loads(r.body)["message"]
    assert message == ("the kernel of 'a.ipynb' was shut down while it took a checkpoint, so that did not finish; "
                       "it was shut down (Shut Down Kernel, a restart): start it again, then try again"), message
    assert "KeyboardInterrupt" not in message


async def test_a_notebook_name_with_outer_spaces_lists_its_checkpoints(jp_fetch, jp_serverapp, jp_root_dir):
    name = " lead and trail .ipynb "
    s = await open_notebook(jp_fetch, jp_root_dir, name)
    await run_cell(jp_serverapp, s["kernel"]["id"], "x = 1")
    r = await post(jp_fetch, "checkpoints/now", {"notebook": name})
    assert r.code == 201, r.body
    listed = json.loads((await jp_fetch("gkews", "checkpoints", params={"notebook": name})).body)
    assert [c["id"] for c in listed["checkpoints"]] == [json.loads(r.body)["id"]]
    for outside in ("/etc/passwd", "../x.ipynb"):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("gkews", "checkpoints", params={"notebook": outside})
        assert e.value.code == 400 and "is outside the contents root" in e.value.response.body.decode()


async def test_a_notebook_whose_name_starts_with_a_tilde_can_be_named(jp_fetch, jp_serverapp, jp_root_dir):
    """~draft.ipynb (JupyterLab creates such names) is in the contents root, yet every route naming it answered
    400 "outside the contents root": the contents API expands no home folder, and neither do these routes."""
    for name in ("~draft.ipynb", "~/draft.ipynb"):
        s = await open_notebook(jp_fetch, jp_root_dir, name)
        kid = s["kernel"]["id"]
        await run_cell(jp_serverapp, kid, "weights = [1, 2, 3]")
        r = await post(jp_fetch, "checkpoints/now", {"notebook": name})
        assert r.code == 201, r.body
        saved = json.loads(r.body)
        listed = json.loads((await jp_fetch("gkews", "checkpoints", params={"notebook": name})).body)
        assert [c["id"] for c in listed["checkpoints"]] == [saved["id"]]
        await run_cell(jp_serverapp, kid, "weights.append(4)")
        r = await post(jp_fetch, f"checkpoints/{saved['id']}/restore", {"notebook": name})
        assert r.code == 200, r.body
        assert (await run_cell(jp_serverapp, kid, "print(weights)")).strip() == "[1, 2, 3]"


async def test_bad_requests_name_the_problem_and_change_nothing(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "b.ipynb")
    await run_cell(jp_serverapp, s["kernel"]["id"], "x = 1")

    r = await post(jp_fetch, "checkpoints/now", {})
    assert r.code == 400 and "notebook" in json.loads(r.body)["message"]
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "../etc/passwd"})
    assert r.code == 400 and "outside the contents root" in json.loads(r.body)["message"]
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "nowhere.ipynb"})
    assert r.code == 409 and "no running kernel" in json.loads(r.body)["message"]
    r = await post(jp_fetch, "checkpoints/20260101-000000-000-abcd/restore", {"notebook": "b.ipynb"})
    assert r.code == 404 and "no checkpoint" in json.loads(r.body)["message"]
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "b.ipynb", "extra": 1})
    assert r.code == 400 and "unknown field" in json.loads(r.body)["message"]
    listed = json.loads((await jp_fetch("gkews", "checkpoints")).body)
    assert listed["checkpoints"] == []


async def test_restoring_another_notebooks_checkpoint_names_whose_it_is(jp_fetch, jp_serverapp, jp_root_dir):
    """The id of another notebook's checkpoint answered "does not exist for notebook 'a.ipynb';
    %gkews_checkpoint list shows the ones that do", a magic no REST client has, and not whose it was."""
    a = await open_notebook(jp_fetch, jp_root_dir, "a.ipynb")
    other = await open_notebook(jp_fetch, jp_root_dir, "sp ace #1.ipynb")
    await run_cell(jp_serverapp, a["kernel"]["id"], "x = 1")
    await run_cell(jp_serverapp, other["kernel"]["id"], "y = 2")
    assert (await post(jp_fetch, "checkpoints/now", {"notebook": "a.ipynb"})).code == 201
    theirs = json.loads((await post(jp_fetch, "checkpoints/now", {"notebook": "sp ace #1.ipynb"})).body)["id"]
    r = await post(jp_fetch, f"checkpoints/{theirs}/restore", {"notebook": "a.ipynb"})
    assert r.code == 404, r.body
    message = json.loads(r.body)["message"]
    assert f"checkpoint {theirs} is one of the checkpoints of 'sp ace #1.ipynb', not of 'a.ipynb'" in message, message
    assert "GET gkews/checkpoints?notebook=a.ipynb lists those of 'a.ipynb'" in message and "%gkews" not in message
    r = await post(jp_fetch, "checkpoints/20260101-000000-000-abcd/restore", {"notebook": "a.ipynb"})
    assert r.code == 404 and "no checkpoint 20260101-000000-000-abcd for notebook 'a.ipynb'" in json.loads(
        r.body)["message"]
    assert "1" in await run_cell(jp_serverapp, a["kernel"]["id"], "print(x)")  # nothing was changed


async def test_a_checkpoint_saved_after_a_rename_is_not_the_old_paths_to_restore(jp_fetch, jp_serverapp, jp_root_dir):
    """x.ipynb renamed to y.ipynb takes its checkpoints along, and an id saved as x still counts for x. One y saved
    after the rename was taken for x's too: restored with 200 into a new notebook at x, it overwrote its variables."""
    old = await open_notebook(jp_fetch, jp_root_dir, "r/x.ipynb")
    await run_cell(jp_serverapp, old["kernel"]["id"], "v = 'from x'")
    before = json.loads((await post(jp_fetch, "checkpoints/now", {"notebook": "r/x.ipynb"})).body)["id"]
    r = await jp_fetch("api", "contents", "r", "x.ipynb", method="PATCH", body=json.dumps({"path": "r/y.ipynb"}))
    assert r.code == 200
    await run_cell(jp_serverapp, old["kernel"]["id"], "v = 'from y'")
    after = json.loads((await post(jp_fetch, "checkpoints/now", {"notebook": "r/y.ipynb"})).body)["id"]
    new = await open_notebook(jp_fetch, jp_root_dir, "r/x.ipynb")
    await run_cell(jp_serverapp, new["kernel"]["id"], "v = 'new x'")
    r = await post(jp_fetch, f"checkpoints/{after}/restore", {"notebook": "r/x.ipynb"})
    assert r.code == 404, r.body
    assert f"checkpoint {after} is one of the checkpoints of 'r/y.ipynb', not of 'r/x.ipynb'" in \
        json.loads(r.body)["message"]
    assert (await run_cell(jp_serverapp, new["kernel"]["id"], "print(v)")).strip() == "new x"
    with pytest.raises(AssertionError, match="does not exist for notebook 'r/x.ipynb'"):  # the magic says the same
        await run_cell(jp_serverapp, new["kernel"]["id"], f"%gkews_checkpoint restore --checkpoint {after}")
    r = await post(jp_fetch, f"checkpoints/{before}/restore", {"notebook": "r/x.ipynb"})  # saved as x: still x's
    assert r.code == 200 and json.loads(r.body)["restored"] == ["v"], r.body
    assert (await run_cell(jp_serverapp, new["kernel"]["id"], "print(v)")).strip() == "from x"


@pytest.mark.parametrize("action", ["checkpoints/now", "checkpoints/20260101-000000-000-abcd/restore"])
async def test_actions_need_credentials(jp_fetch, jp_root_dir, action):
    r = await post(jp_fetch, action, {"notebook": "a.ipynb"}, headers={"Authorization": "token not-the-token"})
    assert r.code == 403


async def test_kernel_undo_from_the_page_toggle_then_rewind(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/undo.ipynb")
    kid = s["kernel"]["id"]
    r = await post(jp_fetch, "checkpoints/auto", {"notebook": "work/undo.ipynb", "action": "status"})
    assert r.code == 200 and json.loads(r.body)["enabled"] is False
    r = await post(jp_fetch, "checkpoints/auto", {"notebook": "work/undo.ipynb", "action": "on"})
    assert r.code == 200 and json.loads(r.body)["enabled"] is True
    await run_cell(jp_serverapp, kid, "weights = [1, 2, 3]")
    await run_cell(jp_serverapp, kid, "weights.append(4); extra = 'later'")
    await run_cell(jp_serverapp, kid, "from kernel_state import auto; auto.AUTO.writer.wait_idle(120)")
    listed = json.loads((await jp_fetch("gkews", "checkpoints", params={"notebook": "work/undo.ipynb"})).body)
    first = next(c for c in listed["checkpoints"] if c["auto"] and c["label"]["source"] == "weights = [1, 2, 3]")

    r = await post(jp_fetch, "checkpoints/rewind", {"notebook": "work/undo.ipynb", "cell": first["label"]["cell"]})
    assert r.code == 200, r.body
    result = json.loads(r.body)
    assert result["changed"] == ["weights"] and result["removed"] == ["extra"] and result["undo"]
    assert (await run_cell(jp_serverapp, kid, "print(weights, 'extra' in dir())")).strip() == "[1, 2, 3] False"

    r = await post(jp_fetch, "checkpoints/rewind", {"notebook": "work/undo.ipynb", "cell": 999})
    assert r.code == 404 and "no automatic checkpoint after cell [999]" in json.loads(r.body)["message"]
    r = await post(jp_fetch, "checkpoints/rewind", {"notebook": "work/undo.ipynb", "cell": "3"})
    assert r.code == 400 and '"cell": 12' in json.loads(r.body)["message"]
    r = await post(jp_fetch, "checkpoints/auto", {"notebook": "work/undo.ipynb", "action": "maybe"})
    assert r.code == 400 and "on" in json.loads(r.body)["message"]
    r = await post(jp_fetch, "checkpoints/auto", {"notebook": "work/undo.ipynb", "action": "off"})
    assert r.code == 200 and json.loads(r.body)["enabled"] is False


async def test_a_notebook_jupyterlab_opens_keeps_its_own_checkpoints_under_its_name(
        jp_fetch, jp_serverapp, jp_root_dir):
    """JupyterLab starts a notebook's session at <folder>/<uuid4>, then moves it to the notebook: the kernel
    saved its own checkpoints (%gkews_checkpoint save, kernel undo) under that placeholder, so the Checkpoints
    panel showed a section named by a UUID, greyed out, and the notebook's own had none of them."""
    s = await open_notebook(jp_fetch, jp_root_dir, "work/lab.ipynb", placeholder=True)
    kid = s["kernel"]["id"]
    assert s["path"] == "work/lab.ipynb"
    await run_cell(jp_serverapp, kid, "w = [1]\n%gkews_checkpoint auto on")
    await run_cell(jp_serverapp, kid, "w.append(2)")
    await run_cell(jp_serverapp, kid, "%gkews_checkpoint save\n"
                   "from kernel_state import auto; auto.AUTO.writer.wait_idle(120)")
    listed = json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]
    assert {c["notebook"] for c in listed} == {"work/lab.ipynb"}, [c["notebook"] for c in listed]
    assert any(c["auto"] for c in listed) and any(not c["auto"] for c in listed)
    r = await post(jp_fetch, "checkpoints/auto", {"notebook": "work/lab.ipynb", "action": "status"})
    assert r.code == 200 and json.loads(r.body)["enabled"] is True


async def test_after_a_restart_the_page_rewinds_to_the_row_it_shows(jp_fetch, jp_serverapp, jp_root_dir):
    """After Restart Kernel the cells are numbered from [1] again: "rewind to after cell [2]" on a row of the
    kernel before the restart brings back that row's state (the page sends its id), while a rewind by number
    alone reaches only this kernel's cells and names the earlier one."""
    path = "work/restarted.ipynb"
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]

    async def cells(*sources):
        assert (await post(jp_fetch, "checkpoints/auto", {"notebook": path, "action": "on"})).code == 200
        for source in sources:
            await run_cell(jp_serverapp, kid, source)
        await run_cell(jp_serverapp, kid, "from kernel_state import auto; auto.AUTO.writer.wait_idle(120)")

    await cells("a = 1", "b = 2", "d = 4")  # [1] [2] [3], then the wait [4]
    r = await jp_fetch("api", "kernels", kid, "restart", method="POST", body="")
    assert r.code == 200
    await cells("c = 3")  # [1], then the wait [2]: no cell [3] in this kernel
    listed = json.loads((await jp_fetch("gkews", "checkpoints", params={"notebook": path})).body)["checkpoints"]
    row = next(c for c in listed if c["auto"] and c["label"]["source"] == "d = 4")

    r = await post(jp_fetch, "checkpoints/rewind", {"notebook": path, "cell": row["label"]["cell"]})
    assert r.code == 404 and "ran in an earlier kernel" in json.loads(r.body)["message"], r.body
    assert (await run_cell(jp_serverapp, kid, "print(sorted(k for k in 'abcd' if k in globals()))")).strip() == "['c']"
    r = await post(jp_fetch, "checkpoints/rewind", {"notebook": path, "cell": 1, "checkpoint": row["id"]})
    assert r.code == 404 and "not after cell [1]" in json.loads(r.body)["message"], r.body
    r = await post(jp_fetch, "checkpoints/rewind", {"notebook": path, "cell": row["label"]["cell"],
                                                    "checkpoint": row["id"]})
    assert r.code == 200, r.body
    assert "c" in json.loads(r.body)["removed"]
    assert (await run_cell(jp_serverapp, kid, "print(a, b, d, 'c' in dir())")).strip() == "1 2 4 False"
    r = await post(jp_fetch, "checkpoints/rewind", {"notebook": path, "cell": 3, "checkpoint": "yesterday"})
    assert r.code == 400 and "checkpoint id" in json.loads(r.body)["message"]


async def test_a_link_inside_the_store_is_named_on_delete_and_nothing_is_deleted(jp_fetch, jp_serverapp, tmp_path):
    """Someone replaced the store's blobs/ by a link to another folder: a REST delete says so, with the fix,
    instead of an unhandled error, and neither the checkpoint nor the other folder's files are touched."""
    root = tmp_path / "ckpt"
    saved = kernel_state.save({"x": list(range(10))}, notebook="a.ipynb", root=str(root))
    elsewhere = tmp_path / "elsewhere"
    (root / "blobs").rename(elsewhere)
    (root / "blobs").symlink_to(elsewhere)
    (elsewhere / "notes.txt").write_text("mine")
    r = await jp_fetch("gkews", "checkpoints", saved["id"], method="DELETE", raise_error=False)
    answer = json.loads(r.body)
    assert r.code == 500 and answer["reason"] == "StoreUnusable", r.body
    assert "symbolic link" in answer["message"] and "GKEWS_CHECKPOINT_ROOT" in answer["message"]
    assert (elsewhere / "notes.txt").read_text() == "mine"
    assert [c["id"] for c in kernel_state.list_checkpoints(notebook="a.ipynb", root=str(root))] == [saved["id"]]


async def test_a_checkpoint_root_set_to_a_users_folder_is_named_when_listing_and_saving(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """c.GkewsApp.checkpoint_root pointed at a folder of the user's (no store marker, files the store did not
    write): the page's list must not say "no checkpoints yet", and "checkpoint now" must not be an unexplained
    kernel failure; both answer StoreUnusable with the fix, and the folder is left as it was."""
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "thesis.tex").write_text("mine")
    s = await open_notebook(jp_fetch, jp_root_dir, "a.ipynb")
    await run_cell(jp_serverapp, s["kernel"]["id"], "x = 1")
    for r in (await jp_fetch("gkews", "checkpoints", raise_error=False),
              await post(jp_fetch, "checkpoints/now", {"notebook": "a.ipynb"})):
        answer = json.loads(r.body)
        assert r.code == 500 and answer["reason"] == "StoreUnusable", r.body
        assert "thesis.tex" in answer["message"] and "GKEWS_CHECKPOINT_ROOT" in answer["message"], answer
    assert sorted(p.name for p in root.iterdir()) == ["thesis.tex"]
    assert (root / "thesis.tex").read_text() == "mine"
