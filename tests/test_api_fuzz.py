"""Property-based fuzzing of every REST route of docs/rest-api.md against a real jupyter_server process.

Random methods, paths, query strings and bodies (JSON of every shape, broken JSON, raw bytes), with
and without credentials. Whatever comes in: never a 5xx; a request that is refused changes nothing
(the status document, the state file's bytes and the event log are compared before and after); without
valid credentials every route answers 403; a notebook path outside the contents root answers 400 even
while a notebook is open. Examples are bounded (GKEWS_FUZZ_EXAMPLES, default 150 per test) and
hypothesis prints the failing request.
"""
from __future__ import annotations

import http.client
import json
import os
import posixpath
import urllib.parse

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from serverproc import Server

EXAMPLES = int(os.environ.get("GKEWS_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: every route of docs/rest-api.md with the verbs it serves
ROUTES = {"status": ("GET",), "pause": ("POST",), "resume": ("POST",), "checkpoints": ("GET",),
          "checkpoints/20260101-000000-000-abcd": ("DELETE",), "events": ("GET",)}
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("fuzz"), request_timeout=30)
    srv.start()
    yield srv
    srv.stop()


def send(server: Server, method: str, path: str, query: dict | None = None, body: bytes | None = None,
         token: str | None = "valid") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token == "valid":
        headers["Authorization"] = f"token {server.token}"
    elif token:
        headers["Authorization"] = f"token {token}"
    url = "/" + path + ("?" + urllib.parse.urlencode(query, doseq=True) if query else "")
    try:
        conn.request(method, url, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def observed(server: Server) -> tuple:
    """What a rejected request must not change."""
    def read(name):
        try:
            return (server.state_dir / name).read_bytes()
        except FileNotFoundError:
            return None
    return server.status(), read("state.json"), read("events.jsonl")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)
fields = st.sampled_from(["notebooks", "interrupt", "since", "notebook", "extra", ""])
bodies = st.one_of(
    st.none(),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(fields, json_values, max_size=3).map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"notebooks": st.lists(st.text(max_size=20), max_size=3)}).map(
        lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.sampled_from([b"{", b"[" * 100_000, b'{"notebooks": NaN}', b'{"a":1,"a":2}', b"\xff\xfe",
                     b'{"notebooks": [1e999]}', b'{"interrupt": "yes"}', b'{"since": []}']),
)
paths = st.one_of(
    st.sampled_from(sorted(ROUTES)),
    st.sampled_from(["checkpoints/", "checkpoints/x", "checkpoints/20260101-000000-000-ABCD",
                     "checkpoints/../status", "status/", "pause/now", "%2e%2e/status", "events/1"]),
    st.from_regex(r"checkpoints/[0-9]{8}-[0-9]{6}-[0-9]{3}-[0-9a-f]{4}", fullmatch=True),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz/-._%0123456789", max_size=25),
).map(lambda p: "gkews/" + p)
queries = st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["since", "notebook", "x", "token"]),
    st.one_of(st.text(max_size=20), st.sampled_from(["nan", "inf", "-1", "1e400", "../../etc/passwd", "/abs"])),
    max_size=3))


@FUZZ
@given(method=st.sampled_from(METHODS), path=paths, query=queries, body=bodies)
@example(method="POST", path="gkews/pause", query=None, body=b"[" * 100_000)  # nesting deeper than the parser
@example(method="POST", path="gkews/resume", query=None, body=b'{"notebooks": [' * 5000)
@example(method="GET", path="gkews/events", query={"since": "nan"}, body=None)
@example(method="GET", path="gkews/checkpoints", query={"notebook": "../../etc/passwd"}, body=None)
def test_random_requests_never_fail_the_server_nor_change_state_when_refused(server, method, path, query, body):
    before = observed(server)
    code, raw = send(server, method, path, query, None if method in ("GET", "HEAD", "OPTIONS") else body)
    assert code < 500, (method, path, query, body[:200] if body else body, code, raw[:500])
    if code >= 400:
        assert observed(server) == before, (method, path, query, body[:200] if body else body, code)
        if code in (400, 409) and raw:  # ours; a 404 for an unknown path is Jupyter's own page
            message = json.loads(raw).get("message")
            assert message, (method, path, code, raw[:300])


@FUZZ
@given(route=st.sampled_from(sorted(ROUTES)), token=st.sampled_from([None, "", "wrong", "token", "x" * 64]),
       query=queries, body=bodies)
def test_every_route_refuses_requests_without_valid_credentials(server, route, token, query, body):
    before = observed(server)
    for method in ROUTES[route]:
        code, raw = send(server, method, "gkews/" + route, query, body if method != "GET" else None, token=token)
        assert code == 403, (method, route, token, code, raw[:300])
    assert observed(server) == before


outside = st.one_of(
    st.text(max_size=15).map(lambda s: "/" + s),
    st.text(max_size=15).map(lambda s: "../" + s),
    st.lists(st.sampled_from(["a", "..", ".", "b.ipynb"]), min_size=1, max_size=6).map(
        lambda parts: "/".join(parts) + "/../../..").filter(lambda p: posixpath.normpath(p).startswith("..")),
    st.text(max_size=10).map(lambda s: s + "\0.ipynb"),
    st.sampled_from(["..", "../", "a/../../b.ipynb", "..\\..\\x.ipynb", "work/../../x.ipynb"]),
)


@pytest.fixture(scope="module")
def open_notebook(server):
    server.open_notebook("work/open.ipynb")  # a running kernel: a valid pause would now do something
    return "work/open.ipynb"


@FUZZ
@given(bad=outside, action=st.sampled_from(["pause", "resume"]), with_open=st.booleans())
def test_notebook_paths_outside_the_root_are_refused(server, open_notebook, bad, action, with_open):
    notebooks = [open_notebook, bad] if with_open else [bad]
    before = observed(server)
    code, raw = send(server, "POST", f"gkews/{action}", body=json.dumps({"notebooks": notebooks}).encode())
    if action == "pause" or code != 409:  # a resume of an active server may be refused as a conflict first
        assert code == 400 and (b"outside the contents root" in raw or b"NUL character" in raw), (bad, code, raw[:300])
    assert observed(server) == before, bad


def test_an_unknown_route_or_a_malformed_checkpoint_id_answers_json_naming_the_routes(server):
    for method, path in [("DELETE", "gkews/checkpoints/not-an-id"), ("GET", "gkews/statuss"),
                         ("POST", "gkews/checkpoints/20260101-000000-000-abcd/restor")]:
        code, body = send(server, method, path)
        assert code == 404, (method, path, body)
        message = json.loads(body)["message"]  # JSON, as every route answers: not the server's HTML page
        assert message.startswith(f"no route {path}: the routes are status, pause, resume"), message
    assert send(server, "DELETE", "gkews/checkpoints/not-an-id", token=None)[0] == 403
    code, body = send(server, "GET", "gkews/checkpoints", query={"notebook": ""})
    assert code == 400 and json.loads(body)["message"].startswith('the "notebook" parameter is empty'), body


def test_an_unknown_or_repeated_query_parameter_is_named(server):
    """`events?snce=...` (a typo) answered every event with 200, `checkpoints?bogus=1` its list, and `since`
    given twice took the last one: each looked like an answer to what was asked."""
    before = observed(server)
    cases = [("gkews/events", {"snce": "1"}, "unknown query parameter 'snce': this route takes since"),
             ("gkews/checkpoints", {"bogus": "1"}, "unknown query parameter 'bogus': this route takes notebook"),
             ("gkews/status", {"verbose": "1"}, "unknown query parameter 'verbose': this route takes none"),
             ("gkews/events", {"since": ["1", "2"]}, "the query parameter 'since' is given 2 times: give it once")]
    for path, query, named in cases:
        code, body = send(server, "GET", path, query)
        assert code == 400 and json.loads(body)["message"] == named, (path, query, code, body)
    code, body = send(server, "POST", "gkews/resume", {"notebook": "a.ipynb"}, body=b"{}")
    assert code == 400 and "unknown query parameter 'notebook'" in json.loads(body)["message"], body
    assert send(server, "GET", "gkews/events", {"since": "1"})[0] == 200
    # JupyterLab's page asks every route with a cache buster: `?1765000000000`
    assert send(server, "GET", "gkews/status", {"1765000000000": ""})[0] == 200
    assert send(server, "GET", "gkews/checkpoints", {"notebook": "a.ipynb", "1765000000000": ""})[0] == 200
    # the token may be given in the query, as for every Jupyter Server route
    assert send(server, "GET", "gkews/status", {"token": server.token}, token=None)[0] == 200
    assert observed(server) == before
