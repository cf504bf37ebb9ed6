"""The rules of docs/architecture.md ("Rules that hold everywhere", "The lifecycle") checked against a real server.

Authentication on every route, bad input answered 400/404 with a message that names the problem and the
fix and changes nothing, one transition at a time under concurrent requests, a silent kernel bridge,
a kernel that cannot import kernel_state, and a busy kernel that is never interrupted silently.
"""
from __future__ import annotations

import asyncio
import json
import queue
import sys

import pytest

from serverkit import events, open_notebook, post, run_cell, status, wait_for, wait_kernel_state, wait_until

CHECKPOINT_ID = "20260101-000000-000-abcd"

#: (method, url parts, body or None) for every route of the extension.
ROUTES = [
    ("GET", ("gkews", "status"), None),
    ("POST", ("gkews", "pause"), "{}"),
    ("POST", ("gkews", "resume"), "{}"),
    ("GET", ("gkews", "checkpoints"), None),
    ("DELETE", ("gkews", "checkpoints", CHECKPOINT_ID), None),
    ("GET", ("gkews", "events"), None),
]


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    # The extension exports its checkpoint root to os.environ for the kernels, unless it is already set;
    # undo that after each test, or every later server in this process would use the first test's root.
    monkeypatch.setenv("GKEWS_CHECKPOINT_ROOT", "")
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT")
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gkews": True}, "allow_unauthenticated_access": False},
            "GkewsApp": {"checkpoint_root": str(tmp_path / "ckpt"), "state_dir": str(tmp_path / "state"),
                         "busy_timeout": 2.0}}


async def snapshot(jp_fetch) -> tuple[dict, int]:
    """What an operator sees: the status document and how many events the log holds."""
    return await status(jp_fetch), len(await events(jp_fetch))


async def call(jp_fetch, method: str, parts, body=None, params=None, headers=None):
    kwargs = {"method": method, "raise_error": False}
    if body is not None:
        kwargs["body"] = body
    if params:
        kwargs["params"] = params
    if headers is not None:
        kwargs["headers"] = headers
    if method == "POST" and body is None:
        kwargs["body"] = ""
    return await jp_fetch(*parts, **kwargs)


# -- 1. every route is authenticated ----------------------------------------------------------------------
@pytest.mark.parametrize("credentials", [{"Authorization": ""}, {"Authorization": "token not-the-token"}],
                         ids=["no-token", "wrong-token"])
async def test_every_route_refuses_unauthenticated_requests(jp_fetch, jp_serverapp, jp_root_dir, credentials):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/auth.ipynb")
    kid = s["kernel"]["id"]
    before = await snapshot(jp_fetch)
    for method, parts, body in ROUTES:
        r = await call(jp_fetch, method, parts, body, headers=dict(credentials))
        assert r.code == 403, f"{method} {'/'.join(parts)} answered {r.code} without a valid token"
    # a pause or resume that was refused changed nothing: same status, no new event, the kernel still runs
    assert await snapshot(jp_fetch) == before
    assert kid in jp_serverapp.kernel_manager
    # and the same routes do answer with the token (the 403 above was about the token, not the route)
    assert (await call(jp_fetch, "GET", ("gkews", "status"))).code == 200


async def test_a_method_a_route_does_not_take_is_refused_like_any_error(jp_fetch, jp_serverapp):
    """GET pause, POST status: 405 {"message": "Method Not Allowed", "reason": null}, without a token too.
    Without credentials it is 403 like every request; with them the answer names the methods the route
    takes, with a reason class as every error."""
    for method, parts, takes in (("GET", ("gkews", "pause"), "POST"), ("POST", ("gkews", "status"), "GET"),
                                 ("DELETE", ("gkews", "checkpoints"), "GET")):
        r = await call(jp_fetch, method, parts, headers={"Authorization": ""})
        assert r.code == 403, (method, parts, r.code)
        r = await call(jp_fetch, method, parts)
        assert r.code == 405, (method, parts, r.code)
        body = json.loads(r.body)
        assert body["reason"] == "MethodNotAllowed", body
        assert body["message"] == f"{method} is not a method of {'/'.join(parts)}: it takes {takes}", body


# -- 2. bad input: 400/404, a message naming the problem and the fix, nothing changed -----------------------
BAD_INPUT = [
    # (id, method, parts, body, params, code, words the message must contain)
    ("pause-malformed-json", "POST", ("gkews", "pause"), "{not json", None, 400,
     ["not valid JSON", '{"notebooks": ["path/to/notebook.ipynb"]}', "or nothing"]),
    ("resume-malformed-json", "POST", ("gkews", "resume"), '{"notebooks": [', None, 400,
     ["not valid JSON", '{"notebooks": ["path/to/notebook.ipynb"]}']),
    # each route's own example: "notebook", not "notebooks", and never "or nothing" where a body is needed
    ("checkpoint-now-malformed-json", "POST", ("gkews", "checkpoints", "now"), "{", None, 400,
     ["not valid JSON", 'send e.g. {"notebook": "path/to/notebook.ipynb"}']),
    ("rewind-malformed-json", "POST", ("gkews", "checkpoints", "rewind"), "{", None, 400,
     ["not valid JSON", 'send e.g. {"notebook": "path/to/notebook.ipynb", "cell": 12}']),
    # json keeps the last of a key given twice, silently: which one the client meant is not known
    ("pause-repeated-key", "POST", ("gkews", "pause"), '{"notebooks": ["work/a.ipynb"], "notebooks": []}', None,
     400, ["not valid JSON", "the key 'notebooks' is given twice"]),
    ("pause-body-is-list", "POST", ("gkews", "pause"), '["work/a.ipynb"]', None, 400,
     ["must be a JSON object", '{"notebooks": [...]}']),
    ("resume-body-is-list", "POST", ("gkews", "resume"), "[]", None, 400, ["must be a JSON object"]),
    ("pause-unknown-field", "POST", ("gkews", "pause"), '{"notebook": ["work/a.ipynb"]}', None, 400,
     ["unknown field(s) notebook", "accepted: interrupt, notebooks"]),
    ("resume-unknown-field", "POST", ("gkews", "resume"), '{"interrupt": true}', None, 400,
     ["unknown field(s) interrupt", "accepted: notebooks"]),
    ("pause-notebooks-not-list", "POST", ("gkews", "pause"), '{"notebooks": "work/a.ipynb"}', None, 400,
     ['"notebooks" must be a list of notebook paths relative to the contents root']),
    ("pause-notebooks-non-string", "POST", ("gkews", "pause"), '{"notebooks": ["work/a.ipynb", 3]}', None, 400,
     ['"notebooks" must be a list of notebook paths relative to the contents root']),
    ("resume-notebooks-not-list", "POST", ("gkews", "resume"), '{"notebooks": {"a": 1}}', None, 400,
     ['"notebooks" must be a list of notebook paths relative to the contents root']),
    ("pause-notebooks-empty", "POST", ("gkews", "pause"), '{"notebooks": []}', None, 400,
     ['"notebooks" is empty', 'leave "notebooks" out for all']),
    ("resume-notebooks-empty", "POST", ("gkews", "resume"), '{"notebooks": []}', None, 400,
     ['"notebooks" is empty', 'leave "notebooks" out for all']),
    ("pause-notebooks-nul", "POST", ("gkews", "pause"), '{"notebooks": ["a\\u0000.ipynb"]}', None, 400,
     ["contains a NUL character"]),
    ("pause-traversal-parent", "POST", ("gkews", "pause"), '{"notebooks": ["../x.ipynb"]}', None, 400,
     ["notebook path '../x.ipynb' is outside the contents root", "give a path relative to it"]),
    ("pause-traversal-absolute", "POST", ("gkews", "pause"), '{"notebooks": ["/etc/passwd"]}', None, 400,
     ["notebook path '/etc/passwd' is outside the contents root", "give a path relative to it"]),
    ("pause-traversal-inner", "POST", ("gkews", "pause"), '{"notebooks": ["a/../../b.ipynb"]}', None, 400,
     ["notebook path 'a/../../b.ipynb' is outside the contents root", "give a path relative to it"]),
    ("resume-traversal", "POST", ("gkews", "resume"), '{"notebooks": ["../x.ipynb"]}', None, 400,
     ["notebook path '../x.ipynb' is outside the contents root", "give a path relative to it"]),
    ("pause-no-running-kernel", "POST", ("gkews", "pause"), '{"notebooks": ["work/nowhere.ipynb"]}', None, 400,
     ["no running kernel for 'work/nowhere.ipynb'", "open the notebook and start its kernel, or leave it out"]),
    # a long list was deduplicated in quadratic time on the event loop (200,000 names: 3 minutes of a frozen
    # server), and its 400 named every one of them
    ("pause-too-many-notebooks", "POST", ("gkews", "pause"),
     json.dumps({"notebooks": [f"x{i}.ipynb" for i in range(200_000)]}), None, 400,
     ['"notebooks" has 200000 items; at most 10000 are accepted', 'leave "notebooks" out to act on every notebook']),
    ("resume-too-many-notebooks", "POST", ("gkews", "resume"),
     json.dumps({"notebooks": [f"x{i}.ipynb" for i in range(10_001)]}), None, 400, ["at most 10000 are accepted"]),
    ("pause-10000-unknown-notebooks", "POST", ("gkews", "pause"),
     json.dumps({"notebooks": [f"x{i}.ipynb" for i in range(10_000)]}), None, 400,
     ["no running kernel for 'x0.ipynb', 'x1.ipynb'", "'x9.ipynb' and 9990 more; open the notebook"]),
    ("pause-interrupt-not-bool", "POST", ("gkews", "pause"), '{"interrupt": "yes"}', None, 400,
     ['"interrupt" must be true or false']),
    ("delete-unknown-checkpoint", "DELETE", ("gkews", "checkpoints", CHECKPOINT_ID), None, None, 404,
     [f"no checkpoint {CHECKPOINT_ID}", "GET gkews/checkpoints lists them"]),
    ("events-since-not-a-number", "GET", ("gkews", "events"), None, {"since": "abc"}, 400,
     ["since must be a number", "seconds since the epoch"]),
    ("events-since-nan", "GET", ("gkews", "events"), None, {"since": "nan"}, 400,  # was 200 with no events
     ["since must be a number", "seconds since the epoch"]),
    ("events-since-inf", "GET", ("gkews", "events"), None, {"since": "1e400"}, 400,  # was 200 with no events
     ["since must be a number", "seconds since the epoch"]),
    # a path no file can have: named by its start (the whole 5 MB path came back in the message)
    ("pause-path-too-long", "POST", ("gkews", "pause"), json.dumps({"notebooks": ["a" * 5_000_000]}), None, 400,
     ['"notebooks" holds a path of 5000000 characters (\'aaaa', "no file path is longer than 4096"]),
    ("restore-path-too-long", "POST", ("gkews", "checkpoints", CHECKPOINT_ID, "restore"),
     json.dumps({"notebook": "b" * 5000}), None, 400, ['"notebook" holds a path of 5000 characters']),
]


@pytest.mark.parametrize("case", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
async def test_bad_input_is_refused_and_changes_nothing(jp_fetch, jp_serverapp, case):
    _, method, parts, body, params, code, words = case
    before = await snapshot(jp_fetch)
    r = await call(jp_fetch, method, parts, body, params=params)
    assert r.code == code, r.body
    message = json.loads(r.body)["message"]
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert len(message) < 1000, message[:2000]  # a message names the problem; it does not echo the request
    assert await snapshot(jp_fetch) == before
    assert before[0]["state"] == "active"


# -- 3. one transition at a time -----------------------------------------------------------------------
async def test_concurrent_requests_start_exactly_one_transition(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/race.ipynb")
    await run_cell(jp_serverapp, s["kernel"]["id"], "x = 41 + 1")

    mixed = await asyncio.gather(*[post(jp_fetch, "pause" if i % 2 == 0 else "resume") for i in range(24)])
    codes = sorted(r.code for r in mixed)
    assert codes == [202] + [409] * 23, codes
    for r in mixed:
        body = json.loads(r.body)
        if r.code == 409:
            # a resume the server took before the pause finds nothing paused yet
            assert body["message"].startswith(("cannot ", "nothing to resume")), body
            assert body["status"]["state"] in ("active", "pausing"), body
            if "a pause is running" in body["message"]:  # what a second tab's page reads: "already under way"
                assert body["status"]["state"] == "pausing", body
        else:
            assert body["state"] == "pausing"
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]

    resumes = await asyncio.gather(*[post(jp_fetch, "resume") for _ in range(24)])
    codes = sorted(r.code for r in resumes)
    assert codes == [202] + [409] * 23, codes
    for r in resumes:
        if r.code == 409:
            body = json.loads(r.body)
            assert "state" in body["status"] and body["status"]["state"] in ("paused", "resuming"), body
            if "a resume is running" in body["message"]:
                assert body["status"]["state"] == "resuming", body
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]
    assert resumed["cycle"] == 1
    assert [e["event"] for e in await events(jp_fetch)].count("pause-requested") == 1


# -- 4. the bridge is silent ----------------------------------------------------------------------------
async def test_bridge_calls_leave_no_trace_of_activity(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/quiet.ipynb")
    kid = s["kernel"]["id"]
    km = jp_serverapp.kernel_manager
    count_before = int(await run_cell(jp_serverapp, kid, "print(get_ipython().execution_count)"))
    await wait_kernel_state(jp_serverapp, kid, "idle")
    await asyncio.sleep(0.3)  # let the server's activity tracker see the last IOPub message of that cell
    kernel = km.get_kernel(kid)
    activity, server_activity = kernel.last_activity, km.last_kernel_activity

    bridge = jp_serverapp.web_app.settings["gkews_lifecycle"].bridge
    for _ in range(10):  # what the lifecycle does, call after call, during a pause and a resume
        identity = await bridge.call(kid, {"op": "identity"}, label="work/quiet.ipynb")
        assert identity
    await asyncio.sleep(0.5)  # any stray IOPub message of the calls has been recorded by now
    assert kernel.last_activity == activity, "a bridge call counted as user activity in the kernel"
    assert km.last_kernel_activity == server_activity, "a bridge call counted as user activity in the server"

    count_after = int(await run_cell(jp_serverapp, kid, "print(get_ipython().execution_count)"))
    assert count_after == count_before + 1  # only the user's own cell advanced the count


async def test_a_bridge_call_the_tracker_reads_late_is_still_not_activity(jp_fetch, jp_serverapp, jp_root_dir):
    """The tracker reads IOPub on its own socket: it may read a call's busy/idle after the call returned
    and its activity was put back (seen at 1-3 ms on a loaded machine), and the idle timer restarted.
    Here it reads every message 0.2 s late; a user's cell still counts."""
    s = await open_notebook(jp_fetch, jp_root_dir, "work/late.ipynb")
    kid = s["kernel"]["id"]
    km = jp_serverapp.kernel_manager
    bridge = jp_serverapp.web_app.settings["gkews_lifecycle"].bridge
    await bridge.call(kid, {"op": "identity"}, label="work/late.ipynb")
    kernel = km.get_kernel(kid)
    stream, record = kernel._activity_stream, kernel._activity_stream._recv_callback
    loop, arrived, recorded = asyncio.get_running_loop(), [], []
    stream._recv_callback = lambda msg: arrived.append(loop.call_later(0.2, lambda: recorded.append(record(msg))))

    async def recorded_after(work):
        count = len(arrived)
        await work
        await wait_until(lambda: len(arrived) >= count + 2 and len(recorded) == len(arrived),
                         "the tracker to read the busy and idle messages")

    activity, server_activity = kernel.last_activity, km.last_kernel_activity
    await recorded_after(bridge.call(kid, {"op": "identity"}, label="work/late.ipynb"))
    assert kernel.last_activity == activity, "a bridge call counted as user activity in the kernel"
    assert km.last_kernel_activity == server_activity, "a bridge call counted as user activity in the server"
    await recorded_after(run_cell(jp_serverapp, kid, "x = 1"))
    assert kernel.last_activity > activity and km.last_kernel_activity > server_activity


# -- 5. a kernel whose environment lacks kernel_state -----------------------------------------------------
@pytest.fixture
def nokstate_kernel(jp_data_dir, tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "kernel_state").mkdir(parents=True)
    (shadow / "kernel_state" / "__init__.py").write_text('raise ImportError("kernel_state is not installed here")\n')
    spec = jp_data_dir / "kernels" / "nokstate"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python without kernel_state", "language": "python",
        "env": {"PYTHONPATH": str(shadow)}}))
    return "nokstate"


async def test_kernel_without_kernel_state_is_reported_and_left_running(
        nokstate_kernel, jp_fetch, jp_serverapp, jp_root_dir):
    bare = await open_notebook(jp_fetch, jp_root_dir, "lab/bare.ipynb", kernel_name=nokstate_kernel)
    ok = await open_notebook(jp_fetch, jp_root_dir, "work/ok.ipynb")
    bare_kid, ok_kid = bare["kernel"]["id"], ok["kernel"]["id"]
    assert bare["kernel"]["name"] == "nokstate"
    await run_cell(jp_serverapp, ok_kid, "y = [1, 2, 3]")
    assert "ok" in await run_cell(jp_serverapp, bare_kid, "z = 5; print('ok')")  # a working kernel otherwise

    r = await post(jp_fetch, "pause")
    assert r.code == 202, r.body
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    by_path = {nb["path"]: nb for nb in paused["notebooks"]}
    assert by_path["work/ok.ipynb"]["status"] == "released"
    assert ok_kid not in jp_serverapp.kernel_manager
    nb = by_path["lab/bare.ipynb"]
    assert nb["status"] == "not-checkpointed"
    assert "cannot import kernel_state" in nb["error"] and "install jupyter-gkews" in nb["error"], nb["error"]
    assert bare_kid in jp_serverapp.kernel_manager  # left running, with its state
    assert "5" in await run_cell(jp_serverapp, bare_kid, "print(z)")
    assert "paused 1 notebook(s)" in paused["message"]
    assert "still running, not paused: lab/bare.ipynb" in paused["message"], paused["message"]


# -- 6. a busy kernel is never interrupted silently --------------------------------------------------------
async def test_busy_kernel_is_reported_then_interrupted_only_when_asked(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/busy.ipynb")
    kid = s["kernel"]["id"]
    km = jp_serverapp.kernel_manager
    await run_cell(jp_serverapp, kid, "kept = 'before the long cell'")
    client = km.get_kernel(kid).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        msg_id = client.execute("import time; time.sleep(30)")
        await wait_kernel_state(jp_serverapp, kid, "busy")

        r = await post(jp_fetch, "pause")
        assert r.code == 202, r.body
        failed = await wait_for(jp_fetch, ("paused", "failed"), timeout=30)
        # right after: not interrupted, not shut down, the cell is still running
        assert kid in km
        assert km.get_kernel(kid).execution_state == "busy"
        with pytest.raises(queue.Empty):
            await client.get_shell_msg(timeout=0.05)  # no execute_reply: the sleep goes on
        assert failed["state"] == "failed", failed["message"]
        nb = failed["notebooks"][0]
        assert nb["status"] == "busy"
        assert "still running a cell" in nb["error"] and "interrupt" in nb["error"], nb["error"]
        assert not nb.get("interrupted")
        assert failed["error"]["reason"].startswith("No notebook could be checkpointed"), failed["error"]
        assert "work/busy.ipynb" in failed["error"]["reason"]
        assert "every kernel is still running" in failed["error"]["next_step"], failed["error"]

        r = await post(jp_fetch, "pause", {"interrupt": True})
        assert r.code == 202, r.body
        paused = await wait_for(jp_fetch, ("paused", "failed"), timeout=60)
        assert paused["state"] == "paused", paused["message"]
        nb = paused["notebooks"][0]
        assert nb["status"] == "released" and nb["checkpoint"] and nb.get("interrupted") is True, nb
        assert kid not in km
        reply = await client.get_shell_msg(timeout=10)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    finally:
        client.stop_channels()
