"""The idle policy against a real server and real kernels, with an idle limit of a few seconds.

What counts as activity is the users' own (cells, terminals, a notebook connecting); the extension's
own calls into the kernels never do; a busy kernel holds the session; the auto-pause is an ordinary
lifecycle pause whose event says "idle policy"; the profile comes from configuration or GKEWS_PROFILE.
"""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from jupyter_gkews.app import GkewsApp
from jupyter_gkews.idle import BUILTIN_PROFILES, choose_profile
from serverkit import (events, gkews_server_config, open_notebook, post, run_cell, server_sees_idle, status, wait_for,
                       wait_until)

IDLE_SECONDS = 3.0  # the test profile's limit
CHECK_EVERY = 0.2


@pytest.fixture
def profile_fields():
    return {"idle_minutes": IDLE_SECONDS / 60, "snapshot": False, "min_running_minutes": 0.0}


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch, profile_fields):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path, busy_timeout=2.0, idle_profile="test", idle_profiles={"test": profile_fields},
                               idle_check_interval=CHECK_EVERY, cleanup_interval=0)


@pytest.fixture
def jp_serverapp(jp_serverapp, jp_asyncio_loop):
    """pytest-jupyter never runs the extensions' start hooks (the server's loop does, once it runs): run them,
    as a real server does. Each test then starts the idle watcher once its setup is done: on a loaded machine
    opening a notebook can take longer than the tests' idle limit of a few seconds."""
    jp_asyncio_loop.run_until_complete(jp_serverapp.extension_manager.start_all_extensions())
    gkews_app(jp_serverapp).idle_watcher.stop()
    return jp_serverapp


def gkews_app(serverapp) -> GkewsApp:
    return next(iter(serverapp.extension_manager.extension_apps["jupyter_gkews"]))


def kernel_activity(serverapp, kid) -> float:
    return serverapp.kernel_manager.get_kernel(kid).last_activity.timestamp()


async def settled_activity(serverapp, kid) -> float:
    """The kernel's last activity once the server has seen the cell's last message: the server reads IOPub
    on its own socket, a moment after the test's client saw the cell end (CI caught an 11 ms lag)."""
    await server_sees_idle(serverapp, kid)
    kernel = serverapp.kernel_manager.get_kernel(kid)
    loop = asyncio.get_running_loop()
    last, since, deadline = None, loop.time(), loop.time() + 60
    while loop.time() < deadline:
        if kernel.execution_state != "idle" or kernel.last_activity != last:
            last, since = kernel.last_activity, loop.time()
        elif loop.time() - since >= 0.3:
            return last.timestamp()
        await asyncio.sleep(0.02)
    raise AssertionError(f"the server's view of kernel {kid} did not settle in 60 s ({kernel.execution_state!r})")


async def idle_pause(jp_fetch) -> dict:
    """The pause-requested event of the policy's pause, once the session is paused."""
    paused = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)
    assert paused["state"] == "paused", paused["message"]
    return next(e for e in await events(jp_fetch) if e["event"] == "pause-requested")


async def test_an_idle_session_is_paused_by_the_policy_through_the_lifecycle(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/idle.ipynb")
    kid = s["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "weights = list(range(10)); print('ready')")
    last_cell = await settled_activity(jp_serverapp, kid)
    # the extension's own calls into the kernel while the session idles: they must not count
    bridge = gkews_app(jp_serverapp).lifecycle.bridge
    for _ in range(3):
        await bridge.call(kid, {"op": "identity"})
    watcher = gkews_app(jp_serverapp).idle_watcher
    watcher.start()

    requested = await idle_pause(jp_fetch)
    watcher.stop()  # what follows checks the resume, not another idle pause
    assert requested["reason"] == "idle policy" and requested["snapshot"] is False
    # the user's last act is the cell, not the bridge calls after it
    assert requested["last_activity"] == pytest.approx(last_cell, abs=0.01)
    assert requested["time"] - requested["last_activity"] >= IDLE_SECONDS
    names = [e["event"] for e in await events(jp_fetch)]
    assert "snapshotting" not in names  # this profile keeps the checkpoint only
    assert names[-1] == "paused"
    # what the page reads to say so ("Unused for 1 min, the idle policy paused idle.ipynb; ...")
    paused = json.loads((await jp_fetch("gkews", "status")).body)
    assert paused["paused_by"] == "idle policy"
    assert paused["timeline"]["pause_requested"] - paused["timeline"]["last_activity"] >= IDLE_SECONDS
    # an ordinary pause: resume brings the values back
    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    assert "45" in await run_cell(jp_serverapp, kid, "print(sum(weights))")


async def test_a_busy_kernel_is_never_paused_by_the_policy(jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/train.ipynb")
    kid = s["kernel"]["id"]
    go = tmp_path / "go"
    # a "training run" that prints nothing and ends when the test says so
    cell = asyncio.ensure_future(run_cell(jp_serverapp, kid, f"import os, time\n"
                                          f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\nprint('done')"))
    watcher = gkews_app(jp_serverapp).idle_watcher
    km = jp_serverapp.kernel_manager
    while km.get_kernel(kid).execution_state != "busy":
        await asyncio.sleep(0.05)
    watcher.start()
    started = kernel_activity(jp_serverapp, kid)
    # wait until the session has been idle past the limit for several checks, with the kernel still busy
    while time.time() - max(started, watcher.last_activity()) < IDLE_SECONDS + 5 * CHECK_EVERY:
        await asyncio.sleep(CHECK_EVERY)
    assert (await status(jp_fetch))["state"] == "active"
    assert watcher.verdict() == (False, "a kernel is running a cell")
    go.write_text("")
    assert "done" in await cell
    finished = await settled_activity(jp_serverapp, kid)
    requested = await idle_pause(jp_fetch)  # once the run is over, the idle limit applies
    assert requested["reason"] == "idle policy"
    assert requested["last_activity"] == pytest.approx(finished, abs=0.01)


async def test_terminals_and_connecting_notebooks_are_activity(jp_fetch, jp_ws_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/shell.ipynb")
    watcher = gkews_app(jp_serverapp).idle_watcher
    # a notebook page connecting to its kernel
    before = time.time()
    ws = await jp_ws_fetch("api", "kernels", s["kernel"]["id"], "channels")
    assert watcher.last_activity() >= before
    ws.close()
    # a terminal a user types in
    term = json.loads((await jp_fetch("api", "terminals", method="POST", body="{}")).body)["name"]
    tws = await jp_ws_fetch("terminals", "websocket", term)
    await asyncio.sleep(IDLE_SECONDS / 2)
    typed = time.time()
    tws.write_message(json.dumps(["stdin", "echo gkews-$((40+2))\r"]))
    while "gkews-42" not in await tws.read_message():  # None (closed) fails the test here
        pass
    terminal = jp_serverapp.web_app.settings["terminal_manager"].terminals[term]
    assert terminal.last_activity.timestamp() >= typed
    kernel_last = await settled_activity(jp_serverapp, s["kernel"]["id"])
    watcher.start()
    requested = await idle_pause(jp_fetch)
    tws.close()
    # the pause came IDLE_SECONDS after the typing, and says the typing was the last act
    assert requested["last_activity"] == pytest.approx(terminal.last_activity.timestamp(), abs=0.01)
    assert requested["last_activity"] > kernel_last


async def test_a_notebook_reconnecting_between_two_looks_is_activity(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                     jp_root_dir):
    """A page reload closes its kernel's websocket and opens another: between two looks of the policy the count of
    connections stayed the same, and the policy paused IDLE_SECONDS after the last cell, not after the reload."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "work/reload.ipynb"))["kernel"]["id"]
    km, watcher = jp_serverapp.kernel_manager, gkews_app(jp_serverapp).idle_watcher
    ws = await jp_ws_fetch("api", "kernels", kid, "channels")
    kernel_last = await settled_activity(jp_serverapp, kid)
    watcher.last_activity()  # a look: one connection
    await asyncio.sleep(IDLE_SECONDS / 2)
    reloaded = time.time()
    ws.close()
    await wait_until(lambda: km.kernel_model(kid)["connections"] == 0, "the server to see the socket close")
    ws = await jp_ws_fetch("api", "kernels", kid, "channels")  # the reloaded page; the next look sees one again
    assert km.kernel_model(kid)["connections"] == 1
    assert watcher.last_activity() >= reloaded > kernel_last
    watcher.start()
    requested = await idle_pause(jp_fetch)
    ws.close()
    assert requested["last_activity"] >= reloaded


@pytest.mark.parametrize("profile_fields", [{"idle_minutes": IDLE_SECONDS / 60, "connected_keeps_active": True}])
async def test_a_connected_notebook_can_be_made_to_hold_the_session(jp_fetch, jp_ws_fetch, jp_serverapp,
                                                                    jp_root_dir, profile_fields):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/open-tab.ipynb")
    watcher = gkews_app(jp_serverapp).idle_watcher
    ws = await jp_ws_fetch("api", "kernels", s["kernel"]["id"], "channels")
    watcher.start()
    while time.time() - watcher.last_activity() < IDLE_SECONDS + 5 * CHECK_EVERY:
        await asyncio.sleep(CHECK_EVERY)
    assert watcher.verdict() == (False, "1 notebook connection(s) open")
    assert (await status(jp_fetch))["state"] == "active"
    ws.close()  # the tab closes: from now on only the idle limit counts
    requested = await idle_pause(jp_fetch)
    assert requested["reason"] == "idle policy" and requested["snapshot"] is True


@pytest.mark.parametrize("profile_fields", [{"idle_minutes": 0.01, "min_running_minutes": 600}])
async def test_minimum_running_time_holds_back_the_policy(jp_fetch, jp_serverapp, jp_root_dir, profile_fields):
    await open_notebook(jp_fetch, jp_root_dir, "work/fresh.ipynb")
    watcher = gkews_app(jp_serverapp).idle_watcher
    watcher.start()
    while time.time() - watcher.last_activity() < 0.01 * 60 + 5 * CHECK_EVERY:
        await asyncio.sleep(CHECK_EVERY)
    assert watcher.verdict() == (False, "running for less than 600 min")
    assert (await status(jp_fetch))["state"] == "active"


def test_the_profile_comes_from_configuration_or_the_environment(monkeypatch):
    monkeypatch.setenv("GKEWS_PROFILE", "scripted")
    assert GkewsApp().idle_profile == "scripted"  # e.g. set in a Workspace's pod config
    assert GkewsApp(idle_profile="training").idle_profile == "training"  # configuration wins
    monkeypatch.delenv("GKEWS_PROFILE")
    assert GkewsApp().idle_profile == "interactive"
    name, p = choose_profile("scripted", {})
    assert (p.idle_minutes, p.snapshot, p.busy_blocks) == (15.0, False, True)
    name, p = choose_profile("interactive", {"interactive": {"idle_minutes": 45}})
    assert (p.idle_minutes, p.snapshot, p.min_running_minutes) == (45.0, True, 10.0)
    assert set(BUILTIN_PROFILES) == {"interactive", "training", "scripted", "off"}


@pytest.mark.parametrize("name, overrides, words", [
    ("nightly", {}, ["unknown idle profile 'nightly'", "known: interactive, off, scripted, training",
                     "c.GkewsApp.idle_profiles"]),
    ("x", {"x": {"idle_minute": 5}}, ["unknown field(s) idle_minute", "accepted: busy_blocks"]),
    ("x", {"x": {"idle_minutes": -1}}, ["idle_minutes must be 0 or more"]),
    ("x", {"x": {"idle_minutes": float("nan")}}, ["idle profile 'x': idle_minutes must be 0 or more, and finite "
                                                  "(got nan)"]),
    ("x", {"x": {"min_running_minutes": float("inf")}}, ["min_running_minutes must be 0 or more, and finite"]),
    ("x", {"x": {"snapshot": "maybe"}}, ["idle profile 'x': snapshot must be True or False (got 'maybe')",
                                         "c.GkewsApp.idle_profiles['x'], e.g. {'snapshot': False}"]),
    ("x", {"x": {"idle_minutes": "30"}}, ["idle_minutes must be a number of minutes (got '30')",
                                          "c.GkewsApp.idle_profiles['x'], e.g. {'idle_minutes': 30}"]),
    ("x", {"x": {"min_running_minutes": True}}, ["min_running_minutes must be a number of minutes (got True)"]),
    ("x", {"x": 30}, ["must be a dict of fields"]),
])
def test_a_wrong_profile_is_named_with_the_fix(name, overrides, words):
    with pytest.raises(ValueError) as info:
        choose_profile(name, overrides)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("profile_fields", [{"idle_minutes": 0.01}])
async def test_a_server_with_an_unknown_profile_leaves_the_session_alone(
        jp_fetch, jp_serverapp, jp_root_dir, profile_fields, caplog):
    # the fixture's profile exists; reconfigure a second watcher as a server with a typo would
    app = gkews_app(jp_serverapp)
    app.idle_watcher.stop()
    app.idle_profile = "tset"
    app._start_operations()
    assert app.idle_watcher.name == "off"
    assert "the idle policy is off: unknown idle profile 'tset'" in caplog.text
    await open_notebook(jp_fetch, jp_root_dir, "work/typo.ipynb")
    assert app.idle_watcher.verdict() == (False, "profile 'off' never pauses")


async def test_a_users_cell_that_ran_behind_one_of_our_calls_is_activity(jp_fetch, jp_serverapp, jp_root_dir):
    """A cell the user ran while one of our calls was in the kernel (the Checkpoints panel's "checkpoint now")
    waits behind it, then runs: it is the user's activity, and the end of our call must not set the kernel's
    activity back to before it (the idle policy paused the session right after that cell)."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "work/queued.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 1")
    bridge = gkews_app(jp_serverapp).lifecycle.bridge
    await bridge.call(kid, {"op": "identity"})  # as any call: our messages are not activity from now on
    kernel = jp_serverapp.kernel_manager.get_kernel(kid)
    before = kernel.last_activity, jp_serverapp.kernel_manager.last_kernel_activity
    await run_cell(jp_serverapp, kid, "y = 2")  # the user's cell, ended while our call was finishing
    users = await settled_activity(jp_serverapp, kid)
    assert users > before[0].timestamp()
    await bridge._restore_activity(kernel, before)  # how every call of ours ends
    assert kernel_activity(jp_serverapp, kid) == users


@pytest.mark.parametrize("profile_fields", [{"idle_minutes": IDLE_SECONDS / 60, "snapshot": False,
                                             "min_running_minutes": 0.0, "busy_blocks": False}])
async def test_a_policy_pause_that_found_every_kernel_busy_is_tried_again_once_idle(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path):
    """busy_blocks False: the policy pauses a busy session, which fails releasing nothing (the cell outlived
    busy_timeout). Once the cell ended and the session idled again, the policy pauses it: it never came back
    to a failed session, and the GPU stayed held for good."""
    kid = (await open_notebook(jp_fetch, jp_root_dir, "work/long.ipynb"))["kernel"]["id"]
    # the kernel's first call imports kernel_state's API: done now, not queued behind the cell (the failed
    # pause's calls run once the cell ends, and a slow first import on a loaded machine read as a busy kernel)
    await gkews_app(jp_serverapp).lifecycle.bridge.call(kid, {"op": "identity"})
    go = tmp_path / "go"
    cell = asyncio.ensure_future(run_cell(jp_serverapp, kid, f"import os, time\n"
                                          f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\nw = 41"))
    km = jp_serverapp.kernel_manager
    while km.get_kernel(kid).execution_state != "busy":
        await asyncio.sleep(0.05)
    watcher = gkews_app(jp_serverapp).idle_watcher
    watcher.start()
    failed = await wait_for(jp_fetch, ("failed", "paused"), timeout=60)
    assert failed["state"] == "failed" and "still running a cell" in failed["error"]["reason"], failed
    assert watcher.verdict() == (False, "the last pause failed and a kernel is still running a cell")
    go.write_text("")
    await cell
    while [e["event"] for e in await events(jp_fetch)].count("pause-requested") < 2:  # the policy's second try
        await asyncio.sleep(CHECK_EVERY)
    # paused by a later try of the policy (on a loaded machine a try can still find the kernel busy: the
    # policy then tries again once it is idle, which is what this test is about)
    await wait_for(jp_fetch, ("paused",), timeout=120)
    watcher.stop()
    requested = [e for e in await events(jp_fetch) if e["event"] == "pause-requested"][-1]
    assert requested["reason"] == "idle policy"
    assert (await post(jp_fetch, "resume")).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
    assert "42" in await run_cell(jp_serverapp, kid, "print(w + 1)")
