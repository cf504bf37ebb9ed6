"""`jupyter gkews resume-test` end to end on the local backend: on a server it starts itself, on one that
already runs (--url, --token), in two steps around an "upgrade" that loses the checkpoint, and the
decision between a live restore, a restore from the checkpoint and neither."""
from __future__ import annotations

import json
import shutil
import socket

import pytest

from clikit import jupyter_gkews
from jupyter_gkews import resumetest
from jupyter_gkews.resumetest import FRESH, LIVE, ResumeTest, judge
from serverproc import Server

pytestmark = pytest.mark.timeout(600)


def test_resume_test_on_a_server_it_starts(tmp_path):
    r = jupyter_gkews("resume-test", "--keep", home=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "fresh process: restored from checkpoint"
    assert "recorded a secret, a torch model" in r.stdout  # torch is installed by make test
    assert "verdict restored-from-checkpoint" in r.stdout
    base = r.stdout.split("starting a jupyter server with the extension in ", 1)[1].split()[0]
    try:
        # the kernel its pause shut down left no traceback in the server's log (ipykernel's stream watcher)
        log = open(f"{base}/server-1.log", errors="replace").read()
        assert "Kernel shutdown" in log and "Event loop is closed" not in log, log[-3000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "server")
    s.start()
    yield s
    s.stop()


def test_resume_test_against_a_running_server_and_around_an_upgrade(server, tmp_path):
    ok = jupyter_gkews("resume-test", f"--url={server.url}", f"--token={server.token}", home=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == FRESH
    # it left nothing behind on that server
    assert server.get("gkews/checkpoints")["checkpoints"] == []
    assert server.request("GET", "api/contents/gkews-resume-test")[0] == 404  # its folder too
    assert server.get("api/sessions") == []
    assert list((server.checkpoint_root / "notebooks").iterdir()) == []  # no empty folder a cleanup would count
    # its pause is the test's, not a user's: the report and the metrics count it apart
    report = jupyter_gkews("report", "--json", f"--state-dir={server.state_dir}",
                           f"--checkpoint-root={server.checkpoint_root}", home=tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    totals = json.loads(report.stdout)["totals"]
    assert (totals["cycles"], totals["by_resume_test"]) == (1, 1), totals
    # none of the users' resume figures: its verdict, success and times are on a line of their own
    assert (totals["notebooks_resumed"], totals["success_rate"], totals["ready_seconds_p50"]) == (0, None, None)
    assert totals["resume_test"]["notebooks_resumed"] == 1 and totals["resume_test"]["success_rate"] == 1.0, totals
    assert json.loads(report.stdout)["cycles"][0]["reason"] == "resume-test"

    record = tmp_path / "record.json"
    prep = jupyter_gkews("resume-test", f"--url={server.url}", f"--token={server.token}", "--step=prepare",
                         f"--record={record}", home=tmp_path)
    assert prep.returncode == 0, prep.stdout + prep.stderr
    assert server.status()["state"] == "paused"
    saved = json.loads(record.read_text())
    # an "upgrade" that loses the checkpoint store: the kernel cannot come back, and the check must say so
    shutil.rmtree(server.checkpoint_root / "blobs")
    check = jupyter_gkews("resume-test", f"--url={server.url}", f"--token={server.token}", "--step=check",
                          f"--record={record}", home=tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr
    out = check.stdout
    assert FRESH not in out and LIVE not in out
    assert "neither a live restore nor a restore from the checkpoint" in out or "the resume failed" in out
    assert f"kept for inspection: {saved['notebook']}" in out


@pytest.mark.parametrize("content", ["[1]", "{}", '{"notebook": 3}', '"a string"'])
def test_a_record_that_prepare_did_not_write_is_named(server, tmp_path, content):
    """A JSON file of another shape ended in a TypeError or KeyError traceback, exit 1 ("the test failed")."""
    record = tmp_path / "other.json"
    record.write_text(content)
    r = jupyter_gkews("resume-test", f"--url={server.url}", f"--token={server.token}", "--step=check",
                      f"--record={record}", home=tmp_path, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert f"{record} is not a record that --step=prepare wrote" in r.stderr, r.stderr


def test_checking_a_record_twice_says_it_was_checked_already(server, tmp_path):
    """The second check of one record said "verdict restored-from-checkpoint" (stale) and then failed with a
    404 traceback, exit 1; a passing check removes its notebook, and the second one says so."""
    record = tmp_path / "record.json"
    args = (f"--url={server.url}", f"--token={server.token}", f"--record={record}")
    assert jupyter_gkews("resume-test", *args, "--step=prepare", home=tmp_path).returncode == 0
    first = jupyter_gkews("resume-test", *args, "--step=check", home=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    again = jupyter_gkews("resume-test", *args, "--step=check", home=tmp_path, timeout=120)
    assert again.returncode == 2 and "Traceback" not in again.stderr, again.stdout + again.stderr
    assert "it was checked already (a check that passes removes it)" in again.stderr, again.stderr
    assert "verdict" not in again.stdout


def test_a_cell_whose_magic_failed_is_a_failure(server, monkeypatch):
    """A magic's UsageError sends no `error` message on IOPub, only its text on stderr, with an execute_reply
    of status "error": the client called such a cell a success, and the resume test went on without its
    setup (and broke on what it had not recorded, or said nothing of the cell)."""
    kid = server.open_notebook("usage.ipynb")["kernel"]["id"]
    assert server.execute(kid, "print('fine')") == "fine\n"
    with pytest.raises(RuntimeError, match="cell failed: UsageError: delete takes one checkpoint id"):
        server.execute(kid, "%gkews_checkpoint delete")
    with pytest.raises(RuntimeError, match="cell failed: UsageError: said on stderr only"):
        server.execute(kid, "from IPython.core.error import UsageError\nraise UsageError('said on stderr only')")
    with pytest.raises(RuntimeError, match="cell failed: ZeroDivisionError"):
        server.execute(kid, "1 / 0")

    monkeypatch.setattr(resumetest, "SETUP", "%gkews_checkpoint delete\n" + resumetest.SETUP)
    with pytest.raises(RuntimeError, match="cell failed: UsageError"):
        ResumeTest(server, say=lambda text: None, timeout=120).prepare()
    assert server.status()["state"] == "active"  # it never paused on a setup that did not run


@pytest.mark.parametrize("args, words", [
    (["--step=check"], "--step=check needs --url"),
    (["--url=http://127.0.0.1:9/", "--token=x"], "cannot reach the server at http://127.0.0.1:9/"),
    # 1 would read "the resume failed"; and named as typed, not in traitlets' CRITICAL log line
    (["--step=bogus"], "jupyter gkews resume-test: --step expected any of ['all', 'prepare', 'check'], not the str "
                       "'bogus' (`jupyter gkews resume-test --help` lists the options)"),
    (["--timeout=abc"], "jupyter gkews resume-test: --timeout expected a float, not the str 'abc'"),
    (["--url=notaurl", "--token=x"], "--url='notaurl' is not a server's address"),  # was a ValueError traceback
    (["--url=127.0.0.1:8888", "--token=x"], "give its base URL with the scheme, e.g. --url=http://127.0.0.1:8888/"),
    (["--url=http://[::1", "--token=x"], "--url='http://[::1' is not a server's address"),  # ValueError traceback
    (["--url=http://host:port/", "--token=x"], "--url='http://host:port/' is not a server's address"),
])
def test_bad_use_is_named(tmp_path, args, words):
    r = jupyter_gkews("resume-test", *args, home=tmp_path, timeout=120)
    assert r.returncode == 2 and words in r.stderr


def test_a_server_that_never_answers_is_given_up_on_after_the_timeout(tmp_path):
    """An https:// URL of a plain HTTP server: the TLS handshake is never answered. Each request waited its
    own 60 s whatever --timeout; with --timeout=1 the command gives up long before that."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"https://127.0.0.1:{silent.getsockname()[1]}/"
        r = jupyter_gkews("resume-test", f"--url={url}", "--token=x", "--timeout=1", home=tmp_path, timeout=45)
    assert r.returncode == 2 and f"cannot reach the server at {url}" in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_timeout_that_is_not_more_than_zero_is_named(tmp_path, value):
    """--timeout=0 started a server and a kernel, then said "cannot reach the server ... Check --url": 0 was
    each request's timeout. It is refused at once, naming --timeout and what it must be."""
    r = jupyter_gkews("resume-test", f"--timeout={value}", home=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--timeout must be a finite number of seconds more than 0 (each step's limit), not {float(value):g}" \
        in r.stderr, r.stderr
    assert "cannot reach" not in r.stderr and "starting a jupyter server" not in r.stdout, r.stdout + r.stderr


def test_a_wrong_token_is_named(server, tmp_path):
    r = jupyter_gkews("resume-test", f"--url={server.url}", "--token=wrong", home=tmp_path, timeout=120)
    assert r.returncode == 2 and "refused the token: give the right one with --token" in r.stderr


def test_no_token_is_named(server, tmp_path):
    """No --token and no $JUPYTER_TOKEN: it said the server "refused the token"."""
    r = jupyter_gkews("resume-test", f"--url={server.url}", home=tmp_path, timeout=120, env={"JUPYTER_TOKEN": ""})
    assert r.returncode == 2 and "refused the token" not in r.stderr
    assert f"the server at {server.url} asks for a token and none was given: give it with --token=TOKEN or in " \
           f"$JUPYTER_TOKEN" in r.stderr, r.stderr


BEFORE = {"pid": 10, "live_secret": "s3", "secret": "s3", "weights": "w", "output": "o", "model": "torch"}
RESULT = '{"weights": "w"}'


@pytest.mark.parametrize("after, verdict, result, passed, conclusion, problem", [
    (BEFORE, "live-verified", RESULT, True, LIVE, None),
    ({**BEFORE, "pid": 11, "live_secret": None}, "restored-from-checkpoint", RESULT, True, FRESH, None),
    # a new session that merely opened the same notebook: nothing of the old one is there
    ({**BEFORE, "pid": 11, "live_secret": None, "secret": None}, "restored-from-checkpoint", RESULT, False, None,
     "secret differ"),
    ({**BEFORE, "pid": 11, "live_secret": None}, "live-verified", RESULT, False, None,
     "a new process, but the server's verdict is 'live-verified'"),
    (BEFORE, "restored-from-checkpoint", RESULT, False, None, "the same process, but the server's verdict"),
    ({**BEFORE, "weights": "changed"}, "live-verified", RESULT, False, None, "weights differ"),
    (BEFORE, "live-verified", None, False, None, "the result file written before the pause is gone"),
    (BEFORE, "live-verified", '{"weights": "x"}', False, None, "the result file changed"),
])
def test_the_decision(after, verdict, result, passed, conclusion, problem):
    ok, said, problems = judge(BEFORE, after, verdict, RESULT, result)
    assert ok is passed
    if passed:
        assert said == conclusion and problems == []
    else:
        assert said == "neither a live restore nor a restore from the checkpoint"
        assert any(problem in p for p in problems), problems


def test_a_wrong_base_url_is_named_as_such(server, tmp_path):
    """A server behind a path (JupyterHub's /user/NAME/) given without it: not "no jupyter_gkews extension"."""
    r = jupyter_gkews("resume-test", f"--url={server.url}user/me/", f"--token={server.token}", home=tmp_path,
                      timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"no Jupyter server answers at {server.url}user/me/" in r.stderr and "check the base URL" in r.stderr


def test_a_server_with_a_notebook_paused_by_its_user_is_left_as_it_is(server, tmp_path):
    """The test's own pause and resume would resume the user's paused state to active (the user's notebook still
    released, the report's release ended): it refuses, and creates nothing."""
    kid = server.open_notebook("mine.ipynb")["kernel"]["id"]
    server.run_cell(kid, "x = 1")
    assert server.post("gkews/pause")[0] == 202
    assert server.wait_for(("paused", "failed"))["state"] == "paused"
    r = jupyter_gkews("resume-test", f"--url={server.url}", f"--token={server.token}", home=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"the server at {server.url} is paused" in r.stderr and "Run it when the state is active" in r.stderr
    s = server.status()
    assert s["state"] == "paused" and [nb["path"] for nb in s["notebooks"]] == ["mine.ipynb"]
    assert server.request("GET", "api/contents/gkews-resume-test")[0] == 404


def test_a_server_whose_extension_is_off_gets_no_scratch_notebook(tmp_path):
    """The extension answered 503 (a setting it cannot use): the test created its notebook and started a kernel
    (which would hold a GPU) before it found out."""
    server = Server(tmp_path / "server")
    server.extra_args = ["--LocalBackend.release_mode=bogus"]
    try:
        with pytest.raises(AssertionError, match="503"):  # it starts, and its routes say why they are off
            server.start()
        r = jupyter_gkews("resume-test", f"--url={server.url}", f"--token={server.token}", home=tmp_path,
                          timeout=120)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "cannot run the test: GET gkews/status answered 503: jupyter-gkews is off" in r.stderr, r.stderr
        assert server.get("api/sessions") == [] and server.request("GET", "api/contents/gkews-resume-test")[0] == 404
    finally:
        server.stop()


def test_a_record_it_cannot_write_is_refused_before_anything_is_made(server, tmp_path):
    """--step=prepare with a record in a folder that does not exist made a notebook and a kernel, paused them,
    then said "cannot reach the server ... No such file or directory: the record": the server stayed paused, and
    every later test refused to run on it."""
    for record, words in [("/nonexistent/rt.json", "the folder /nonexistent does not exist"),
                          (str(tmp_path), "is a folder: give the file prepare writes the record to")]:
        r = jupyter_gkews("resume-test", f"--url={server.url}", f"--token={server.token}", "--step=prepare",
                          f"--record={record}", home=tmp_path, timeout=120)
        assert r.returncode == 2 and words in r.stderr and "cannot reach" not in r.stderr, r.stdout + r.stderr
    assert server.status()["state"] == "active"
    assert server.get("api/sessions") == [] and server.request("GET", "api/contents/gkews-resume-test")[0] == 404


def test_a_test_that_stops_midway_says_what_it_left_and_how_to_get_the_server_back(server, tmp_path):
    """A step longer than --timeout said "cannot reach the server" of a server it had reached (or "still pausing"
    alone), and left the server paused, with its scratch notebook, saying neither."""
    r = jupyter_gkews("resume-test", f"--url={server.url}", f"--token={server.token}", "--timeout=1.5",
                      home=tmp_path, timeout=120)
    assert r.returncode == 2 and "cannot reach" not in r.stderr, r.stdout + r.stderr
    assert "left on the server: the scratch notebook gkews-resume-test/resume-test-" in r.stderr, r.stderr
    state = server.wait_for(("active", "paused", "failed"), timeout=120)["state"]
    if state != "active":  # it stopped after asking for the pause: the way back is said
        assert "resume it (the Resume button, or POST gkews/resume" in r.stderr, r.stderr
        server.post_ok("gkews/resume", {})
        assert server.wait_for(("active", "failed"), timeout=120)["state"] == "active"
