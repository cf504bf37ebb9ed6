"""Sessions a user makes beside a notebook, on a real server with real kernels: a console opened for the
notebook (JupyterLab's "New Console for Notebook": a second session on the notebook's kernel), and a notebook
opened while another one is paused."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from serverkit import (events, gkews_server_config, open_notebook, post, run_cell, server_watching, wait_for,
                       wait_kernel_state)


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    # a second checkpoint of one kernel waited for this long behind the first one's hold (30 min by default)
    return gkews_server_config(tmp_path, busy_timeout=2.0, kernel_call_timeout=60.0)


async def sessions(jp_fetch) -> list[dict]:
    return json.loads((await jp_fetch("api", "sessions")).body)


async def test_a_console_for_the_notebook_follows_its_kernel_through_pause_and_resume(
        jp_fetch, jp_serverapp, jp_root_dir):
    nb = await open_notebook(jp_fetch, jp_root_dir, "work/train.ipynb")
    kid = nb["kernel"]["id"]
    r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": "console-1-6f1c", "name": "Console 1", "type": "console", "kernel": {"id": kid}}))
    console = json.loads(r.body)
    assert console["kernel"]["id"] == kid
    await run_cell(jp_serverapp, kid, "x = 41")

    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    assert paused["message"] == "paused 1 notebook(s)"
    [entry] = paused["notebooks"]  # one kernel, one checkpoint: the console is not a notebook of its own
    assert (entry["path"], entry["status"]) == ("work/train.ipynb", "released")
    assert [c["session_id"] for c in entry["companions"]] == [console["id"]]

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    [entry] = resumed["notebooks"]
    assert entry["verdict"] == "restored-from-checkpoint" and "x" in entry["restored"], entry
    # both sessions are back, on the notebook's kernel, under their own ids
    assert sorted((s["id"], s["type"], s["kernel"]["id"]) for s in await sessions(jp_fetch)) == sorted(
        [(nb["id"], "notebook", kid), (console["id"], "console", kid)])
    assert "42" in await run_cell(jp_serverapp, kid, "print(x + 1)")


async def test_a_console_for_a_paused_notebook_is_refused_until_it_is_resumed(jp_fetch, jp_serverapp, jp_root_dir):
    """jupyter_server starts a new, empty kernel for a kernel id it does not know (the one the pause released),
    and for a console at the notebook's path (JupyterLab's "New Console for Notebook"): the console would show
    a kernel without the notebook's variables, on the GPU the pause gave back. The user is told to resume."""
    nb = await open_notebook(jp_fetch, jp_root_dir, "work/train.ipynb")
    kid = nb["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    checkpoint = paused["notebooks"][0]["checkpoint"]

    # "/work/train.ipynb": the same notebook to the user, a new empty kernel to jupyter_server
    for kernel, path in [({"id": kid}, "console-2-6f1c"), ({"name": "python3"}, "work/train.ipynb"),
                         ({"name": "python3"}, "/work/train.ipynb"), ({"name": "python3"}, "work//./train.ipynb")]:
        r = await jp_fetch("api", "sessions", method="POST", raise_error=False, body=json.dumps(
            {"path": path, "name": "Console 2", "type": "console", "kernel": kernel}))
        assert r.code == 409, (kernel, r.body)
        message = json.loads(r.body)["message"]
        assert message.startswith("'work/train.ipynb' is paused: the pause released its kernel"), message
        assert checkpoint in message and "Resume it first" in message, message
    assert jp_serverapp.kernel_manager.list_kernel_ids() == []  # no empty kernel was started
    assert (await sessions(jp_fetch)) == []

    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": "console-2-6f1c", "name": "Console 2", "type": "console", "kernel": {"id": kid}}))
    assert json.loads(r.body)["kernel"]["id"] == kid  # resumed: the console shares the notebook's kernel
    assert "42" in await run_cell(jp_serverapp, kid, "print(x + 1)")


async def test_restart_or_interrupt_of_a_released_kernel_says_the_notebook_is_paused(
        jp_fetch, jp_serverapp, jp_root_dir):
    """A client (a script, an old page) restarting the kernel a pause released got jupyter_server's 500
    "Exception restarting kernel", and 404 for an interrupt. It is told the notebook is paused and what to do;
    after the resume, both act on the kernel as ever."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "work/train.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    for action in ("restart", "interrupt"):
        r = await jp_fetch("api", "kernels", kid, action, method="POST", body="", raise_error=False)
        assert r.code == 409, (action, r.code, r.body)
        message = json.loads(r.body)["message"]
        assert message.startswith("'work/train.ipynb' is paused: resume it first") and f"to {action}" in message
        assert paused["notebooks"][0]["checkpoint"] in message, message
    assert jp_serverapp.kernel_manager.list_kernel_ids() == []  # nothing was started
    r = await jp_fetch("api", "kernels", "00000000-0000-0000-0000-000000000000", "restart", method="POST", body="",
                       raise_error=False)
    assert r.code in (404, 500)  # not ours: jupyter_server's own answer

    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    assert (await jp_fetch("api", "kernels", kid, "interrupt", method="POST", body="")).code == 204
    assert "42" in await run_cell(jp_serverapp, kid, "print(x + 1)")


async def test_a_console_for_a_paused_notebook_reopened_meanwhile_joins_its_live_kernel(
        jp_fetch, jp_serverapp, jp_root_dir):
    """Reopened while paused, the notebook has a live kernel again (the resume restores into it): a console at
    its path was refused, saying it "would get a new, empty kernel", when jupyter_server would have joined
    the reopened notebook's kernel."""
    path = "work/train.ipynb"
    old = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, old, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": path, "name": "train.ipynb", "type": "notebook", "kernel": {"name": "python3"}}))
    reopened = json.loads(r.body)["kernel"]["id"]
    assert reopened != old

    for kernel in ({"id": reopened}, {"name": "python3"}):
        r = await jp_fetch("api", "sessions", method="POST", raise_error=False, body=json.dumps(
            {"path": path, "name": "", "type": "console", "kernel": kernel}))
        assert r.code == 201, (kernel, r.body)
        assert json.loads(r.body)["kernel"]["id"] == reopened
    assert jp_serverapp.kernel_manager.list_kernel_ids() == [reopened]  # no empty kernel was started
    # the released kernel's id is still refused: jupyter_server would start a new kernel under it
    r = await jp_fetch("api", "sessions", method="POST", raise_error=False, body=json.dumps(
        {"path": "console-3", "name": "", "type": "console", "kernel": {"id": old}}))
    assert r.code == 409, r.body
    # jupyter_server keeps "/work/train.ipynb" as given: a new kernel there, and the message says so
    r = await jp_fetch("api", "sessions", method="POST", raise_error=False, body=json.dumps(
        {"path": "/" + path, "name": "", "type": "console", "kernel": {"name": "python3"}}))
    assert r.code == 409, r.body
    assert f"was reopened since: a console or session at '/{path}' would get a new, empty kernel; open it at " \
           f"'{path}'" in json.loads(r.body)["message"], r.body

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    [nb] = resumed["notebooks"]
    assert nb["reopened"] and nb["kernel_id"] == reopened and "x" in nb["restored"], nb


async def test_a_console_for_a_notebook_being_resumed_is_told_to_wait(jp_fetch, jp_serverapp, jp_root_dir,
                                                                      monkeypatch):
    """While the resume waited for capacity, the 409 said "Resume it first", about a notebook being resumed."""
    path = "work/train.ipynb"
    kid = (await open_notebook(jp_fetch, jp_root_dir, path))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    backend = jp_serverapp.web_app.settings["gkews_lifecycle"].backend
    capacity, acquire = asyncio.Event(), backend.acquire

    async def waiting_for_capacity(notebooks):
        await capacity.wait()
        return await acquire(notebooks)
    monkeypatch.setattr(backend, "acquire", waiting_for_capacity)
    assert (await post(jp_fetch, "resume")).code == 202
    for kernel, where in (({"name": "python3"}, path), ({"id": kid}, "console-2")):
        r = await jp_fetch("api", "sessions", method="POST", raise_error=False, body=json.dumps(
            {"path": where, "name": "", "type": "console", "kernel": kernel}))
        assert r.code == 409, r.body
        message = json.loads(r.body)["message"]
        assert message.startswith(f"{path!r} is being resumed: ") and "Resume it first" not in message, message
        assert "wait until the session is ready, then open it again" in message, message
    capacity.set()
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": "console-2", "name": "", "type": "console", "kernel": {"id": kid}}))
    assert json.loads(r.body)["kernel"]["id"] == kid


async def test_standalone_consoles_save_under_their_own_session_path(jp_fetch, jp_serverapp):
    """jupyter_server names a console's kernel "<folder>/Console 1" (JPY_SESSION_NAME): every console numbered 1
    (one per page load) shared one checkpoint history, which the pause did not use (it saves under the session's
    path). Each console's magic now saves under its session path, the name its pause uses."""
    kernels = {}
    for path in ("console-1-aaaa", "console-1-bbbb"):  # JupyterLab: console-<n>-<uuid>, named "Console <n>"
        r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
            {"path": path, "name": "Console 1", "type": "console", "kernel": {"name": "python3"}}))
        kernels[path] = json.loads(r.body)["kernel"]["id"]
        await run_cell(jp_serverapp, kernels[path], "x = 1\n%gkews_checkpoint save")
    listed = json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]
    assert sorted(c["notebook"] for c in listed) == ["console-1-aaaa", "console-1-bbbb"]
    out = await run_cell(jp_serverapp, kernels["console-1-bbbb"], "%gkews_checkpoint status")
    assert "notebook 'console-1-bbbb'" in out and "1 checkpoint(s)" in out, out

    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    listed = json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]
    assert sorted(c["notebook"] for c in listed) == ["console-1-aaaa"] * 2 + ["console-1-bbbb"] * 2


async def pause_a_then_b_while_busy(jp_fetch, jp_serverapp, jp_root_dir, tmp_path) -> tuple[str, str]:
    """a.ipynb paused; b.ipynb, opened meanwhile, left running by a pause of it while a cell runs (its cell
    ends after). The kernel ids of a and b."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"

    # opened while a.ipynb is paused, and busy in a cell when its own toolbar pauses it
    b = (await open_notebook(jp_fetch, jp_root_dir, "b.ipynb"))["kernel"]["id"]
    gate = tmp_path / "gate"
    client = jp_serverapp.kernel_manager.get_kernel(b).client()
    client.start_channels()
    await client.wait_for_ready(timeout=60)
    await server_watching(jp_serverapp, b)  # a cell sent to a kernel still starting may never show it busy
    client.execute(f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\ny = 1")
    try:
        await wait_kernel_state(jp_serverapp, b, "busy")
        busy_seen = time.time()
        assert (await post(jp_fetch, "pause", {"notebooks": ["b.ipynb"]})).code == 202
        # a cell was running: not idle (the report counted the time since the cell began as idle)
        asked = [e for e in await events(jp_fetch) if e["event"] == "pause-requested"][-1]
        assert asked["last_activity"] >= round(busy_seen, 3), (asked, busy_seen)
        after = await wait_for(jp_fetch, ("paused", "failed"))
        # not "failed ... every kernel is still running": a.ipynb's kernel is shut down, and still paused
        assert after["state"] == "paused", after["message"]
        assert after["message"].startswith("nothing more was paused: b.ipynb: its kernel was still running a cell")
        assert after["message"].endswith("still paused: a.ipynb"), after["message"]
        by_path = {nb["path"]: nb["status"] for nb in after["notebooks"]}
        assert by_path == {"b.ipynb": "busy", "a.ipynb": "released"}
    finally:
        gate.touch()
        client.stop_channels()
    await wait_kernel_state(jp_serverapp, b, "idle")
    return a, b


async def test_a_notebook_a_pause_left_running_is_named_lost_when_the_server_restarts(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """b.ipynb was left running (busy) by a pause from paused, then the server restarted: b's kernel stopped
    with it, yet its status still said "busy" with a kernel id no server had, and the resume said "resumed: 1
    restored-from-checkpoint", never naming b's loss."""
    await pause_a_then_b_while_busy(jp_fetch, jp_serverapp, jp_root_dir, tmp_path)
    lifecycle = jp_serverapp.web_app.settings["gkews_lifecycle"]
    lifecycle.load()  # what a restarted server does first: the state it finds on disk
    nb = {n["path"]: n for n in (await wait_for(jp_fetch, ("paused",)))["notebooks"]}
    assert (nb["b.ipynb"]["status"], nb["a.ipynb"]["status"]) == ("lost", "released")
    assert "its kernel stopped with the server" in nb["b.ipynb"]["error"]

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["message"].startswith("resumed: 1 restored-from-checkpoint; not resumed: b.ipynb (left running "
                                         "by the pause"), resumed["message"]


async def test_a_pause_from_paused_that_checkpoints_nothing_leaves_the_others_paused(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    a, b = await pause_a_then_b_while_busy(jp_fetch, jp_serverapp, jp_root_dir, tmp_path)
    # a.ipynb's cycle goes on: its timeline, not the failed attempt's (which had no environment_stopped)
    after = await wait_for(jp_fetch, ("paused",))
    assert after["timeline"]["environment_stopped"] < after["timeline"].get("resume_requested", float("inf"))
    assert [e.get("continues_cycle") for e in await events(jp_fetch) if e["event"] == "paused"] == [None, 1]

    # now idle: paused from its own toolbar, with the others still paused
    assert (await post(jp_fetch, "pause", {"notebooks": ["b.ipynb"]})).code == 202
    after = await wait_for(jp_fetch, ("paused", "failed"))
    assert after["message"] == "paused 1 notebook(s) (2 paused in all)", after["message"]
    assert {nb["path"]: nb["status"] for nb in after["notebooks"]} == {"b.ipynb": "released", "a.ipynb": "released"}

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    assert "42" in await run_cell(jp_serverapp, a, "print(x + 1)")
    assert "1" in await run_cell(jp_serverapp, b, "print(y)")


async def rename(jp_fetch, old: str, new: str) -> None:
    """What JupyterLab does: the file, then its session (if it has one)."""
    await jp_fetch("api", "contents", old, method="PATCH", body=json.dumps({"path": new}))
    for s in await sessions(jp_fetch):
        if s["path"] == old:
            await jp_fetch("api", "sessions", s["id"], method="PATCH",
                           body=json.dumps({"path": new, "name": new.rsplit("/", 1)[-1]}))


async def test_a_notebook_renamed_onto_a_deleted_paused_one_s_path_gets_only_its_own_state(
        jp_fetch, jp_serverapp, jp_root_dir):
    """b.ipynb was deleted while paused and a.ipynb renamed to b.ipynb: the resume restored both notebooks'
    variables into the one kernel at b.ipynb and called both restored."""
    a = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    b = (await open_notebook(jp_fetch, jp_root_dir, "b.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, a, "va = 1")
    await run_cell(jp_serverapp, b, "vb = 2")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    await jp_fetch("api", "contents", "b.ipynb", method="DELETE")
    await rename(jp_fetch, "a.ipynb", "b.ipynb")

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    by_kernel = {nb["kernel_id"]: nb for nb in resumed["notebooks"]}
    assert by_kernel[a]["verdict"] == "restored-from-checkpoint" and by_kernel[a]["path"] == "b.ipynb"
    assert by_kernel[b]["status"] == "lost" and "was deleted while paused" in by_kernel[b]["error"], by_kernel[b]
    assert "restore --notebook b.ipynb --checkpoint" in by_kernel[b]["next_step"]
    [session] = await sessions(jp_fetch)
    assert (session["path"], session["kernel"]["id"]) == ("b.ipynb", a)
    assert (await run_cell(jp_serverapp, a, "print(sorted(k for k in ('va', 'vb') if k in globals()))")).strip() \
        == "['va']"


async def test_a_second_notebook_on_the_kernel_renamed_while_paused_comes_back_at_its_new_path(
        jp_fetch, jp_serverapp, jp_root_dir):
    first = await open_notebook(jp_fetch, jp_root_dir, "n1.ipynb")
    kid = first["kernel"]["id"]
    (jp_root_dir / "n2.ipynb").write_text((jp_root_dir / "n1.ipynb").read_text())
    await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": "n2.ipynb", "name": "n2.ipynb", "type": "notebook", "kernel": {"id": kid}}))
    await run_cell(jp_serverapp, kid, "x = 41")
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert [c["path"] for c in paused["notebooks"][0]["companions"]] == ["n2.ipynb"]
    await rename(jp_fetch, "n2.ipynb", "n3.ipynb")
    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    assert sorted((s["path"], s["kernel"]["id"]) for s in await sessions(jp_fetch)) == [
        ("n1.ipynb", kid), ("n3.ipynb", kid)]


async def test_a_session_whose_path_a_client_spelled_oddly_is_followed_as_its_notebook(
        jp_fetch, jp_serverapp, jp_root_dir):
    """jupyter_server keeps a session's path as the client gave it (`/x.ipynb`, `sub//./y.ipynb`); the contents
    API and these routes name the notebook x.ipynb. Such a notebook could not be named in a pause ("no running
    kernel"), deleted while paused it had its variables restored into a new notebook created at its path, and
    renamed while paused it was taken for deleted: no kernel, no variables."""
    import nbformat
    kernels = {}
    for spelled, path in (("/x.ipynb", "x.ipynb"), ("sub//./y.ipynb", "sub/y.ipynb")):
        (jp_root_dir / path).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(), str(jp_root_dir / path))
        r = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
            {"path": spelled, "name": "n", "type": "notebook", "kernel": {"name": "python3"}}))
        kernels[path] = json.loads(r.body)["kernel"]["id"]
        await run_cell(jp_serverapp, kernels[path], f"secret = 'of {path}'")
    assert (await post(jp_fetch, "pause", {"notebooks": ["x.ipynb", "sub/y.ipynb"]})).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused" and {nb["path"] for nb in paused["notebooks"]} == {"x.ipynb", "sub/y.ipynb"}
    listed = json.loads((await jp_fetch("gkews", "checkpoints", params={"notebook": "x.ipynb"})).body)
    assert [c["id"] for c in listed["checkpoints"]] == [
        next(nb["checkpoint"] for nb in paused["notebooks"] if nb["path"] == "x.ipynb")]

    await jp_fetch("api", "contents", "x.ipynb", method="DELETE")
    fresh = (await open_notebook(jp_fetch, jp_root_dir, "x.ipynb"))["kernel"]["id"]
    await rename(jp_fetch, "sub/y.ipynb", "sub/z.ipynb")
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    by_path = {nb["path"]: nb for nb in resumed["notebooks"]}
    assert by_path["x.ipynb"]["deleted"] and by_path["sub/z.ipynb"]["verdict"] == "restored-from-checkpoint", by_path
    assert (await run_cell(jp_serverapp, fresh, "print(globals().get('secret'))")).strip() == "None"
    z = {s["path"]: s["kernel"]["id"] for s in await sessions(jp_fetch)}["sub/z.ipynb"]
    assert (await run_cell(jp_serverapp, z, "print(secret)")).strip() == "of sub/y.ipynb"


async def test_changing_the_kernel_of_a_notebook_being_paused_paused_or_resumed_is_refused(
        jp_fetch, jp_serverapp, jp_root_dir, monkeypatch):
    """JupyterLab's "Change Kernel" (PATCH api/sessions/<id> with a kernel) during the pause shut down the kernel
    the pause had checkpointed and held, and a new, empty one ran through the pause while the status said
    "released". Refused (409) while the pause, the paused state or the resume has the notebook; a rename
    (PATCH with a path) is followed as ever; once active, the change is jupyter_server's again."""
    path = "work/train.ipynb"
    nb = await open_notebook(jp_fetch, jp_root_dir, path)
    kid = nb["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 41")
    backend = jp_serverapp.web_app.settings["gkews_lifecycle"].backend
    snapshotting, go_on, snapshot = asyncio.Event(), asyncio.Event(), backend.snapshot
    waiting, capacity, acquire = asyncio.Event(), asyncio.Event(), backend.acquire

    async def slow_snapshot(notebooks):
        snapshotting.set()
        await go_on.wait()
        return await snapshot(notebooks)

    async def waiting_for_capacity(notebooks):
        waiting.set()
        await capacity.wait()
        return await acquire(notebooks)
    monkeypatch.setattr(backend, "snapshot", slow_snapshot)
    monkeypatch.setattr(backend, "acquire", waiting_for_capacity)

    async def change_kernel():
        r = await jp_fetch("api", "sessions", nb["id"], method="PATCH", raise_error=False,
                           body=json.dumps({"kernel": {"name": "python3"}}))
        return r.code, json.loads(r.body)

    assert (await post(jp_fetch, "pause")).code == 202
    await asyncio.wait_for(snapshotting.wait(), 180)  # checkpointed and held
    code, body = await change_kernel()
    assert code == 409 and body["message"].startswith(f"{path!r} is being paused"), body
    assert jp_serverapp.kernel_manager.list_kernel_ids() == [kid]  # the held kernel lives on, no other started
    go_on.set()
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused" and paused["notebooks"][0]["status"] == "released", paused
    code, body = await change_kernel()
    assert code == 409 and body["message"].startswith(f"{path!r} is paused: resume it first"), body
    assert paused["notebooks"][0]["checkpoint"] in body["message"]
    assert jp_serverapp.kernel_manager.list_kernel_ids() == []  # nothing runs on the released GPU

    assert (await post(jp_fetch, "resume")).code == 202
    await asyncio.wait_for(waiting.wait(), 180)
    code, body = await change_kernel()
    assert code == 409 and body["message"].startswith(f"{path!r} is being resumed"), body
    capacity.set()
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active" and resumed["notebooks"][0]["verdict"] == "restored-from-checkpoint"
    assert "42" in await run_cell(jp_serverapp, kid, "print(x + 1)")
    code, body = await change_kernel()  # active: jupyter_server's change of kernel, as ever
    assert code == 200 and body["kernel"]["id"] != kid, body


async def test_two_kernels_with_sessions_at_one_path_are_left_running_with_their_own_state(
        jp_fetch, jp_serverapp, jp_root_dir):
    """b.ipynb saved as a.ipynb while a.ipynb is open: jupyter_server moves b's session to a.ipynb, two kernels
    at one path. The pause filed both checkpoints under that path, and the resume restored one kernel's
    variables into the other (one session left, "restored-from-checkpoint" twice). Neither is paused now;
    both keep what they hold, the others pause and resume as ever."""
    ka = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, ka, "who = 'A'")
    sb = await open_notebook(jp_fetch, jp_root_dir, "b.ipynb")
    kb = sb["kernel"]["id"]
    await run_cell(jp_serverapp, kb, "who = 'B'")
    kc = (await open_notebook(jp_fetch, jp_root_dir, "c.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kc, "who = 'C'")
    await jp_fetch("api", "sessions", sb["id"], method="PATCH", body=json.dumps({"path": "a.ipynb"}))

    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    by_kernel = {nb["kernel_id"]: nb for nb in paused["notebooks"]}
    assert by_kernel[kc]["status"] == "released"
    for kid in (ka, kb):
        assert by_kernel[kid]["status"] == "not-checkpointed" and "checkpoint" not in by_kernel[kid], by_kernel[kid]
        assert "2 sessions are at a.ipynb with different kernels" in by_kernel[kid]["error"]
    assert "still running, not paused: a.ipynb (2 sessions are at a.ipynb" in paused["message"], paused["message"]
    assert paused["message"].count("2 sessions are at a.ipynb") == 1, paused["message"]

    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    for kid, who in ((ka, "A"), (kb, "B"), (kc, "C")):
        assert (await run_cell(jp_serverapp, kid, "print(who)")).strip() == who
    assert sorted(s["kernel"]["id"] for s in await sessions(jp_fetch)) == sorted([ka, kb, kc])


async def test_another_session_moved_onto_a_paused_notebooks_path_is_refused(jp_fetch, jp_serverapp, jp_root_dir):
    """b.ipynb saved as the paused a.ipynb: the resume restored a's checkpoint into b's kernel (the session at
    a's path), which lost what it held. Refused until a.ipynb is resumed; after it, jupyter_server's as ever."""
    ka = (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, ka, "who = 'A'")
    assert (await post(jp_fetch, "pause", {"notebooks": ["a.ipynb"]})).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    sb = await open_notebook(jp_fetch, jp_root_dir, "b.ipynb")
    await run_cell(jp_serverapp, sb["kernel"]["id"], "who = 'B'")
    r = await jp_fetch("api", "sessions", sb["id"], method="PATCH", raise_error=False,
                       body=json.dumps({"path": "/a.ipynb"}))
    assert r.code == 409, r.body
    message = json.loads(r.body)["message"]
    assert message.startswith("'a.ipynb' is paused") and "Resume 'a.ipynb' first" in message, message

    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    assert (await run_cell(jp_serverapp, ka, "print(who)")).strip() == "A"
    assert (await run_cell(jp_serverapp, sb["kernel"]["id"], "print(who)")).strip() == "B"
    r = await jp_fetch("api", "sessions", sb["id"], method="PATCH", body=json.dumps({"path": "b2.ipynb"}))
    assert json.loads(r.body)["path"] == "b2.ipynb"


async def test_a_kernel_no_session_shows_is_named_as_still_running(jp_fetch, jp_serverapp, jp_root_dir):
    """A kernel started through api/kernels alone (a script, an extension) has no session: the pause leaves it
    running, and only the event's environment_released said the GPU was not all given back."""
    await run_cell(jp_serverapp, (await open_notebook(jp_fetch, jp_root_dir, "a.ipynb"))["kernel"]["id"], "x = 1")
    bare = json.loads((await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))).body)
    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    assert f"still running, not paused: 1 kernel(s) no session shows ({bare['id']})" in paused["message"], paused
    assert bare["id"] in jp_serverapp.kernel_manager
