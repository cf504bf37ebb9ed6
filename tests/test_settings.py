"""Settings the extension cannot use are refused when the server starts, never at first use.

One invalid value used to make jupyter_server's link step fail; it logged a warning and loaded the extension
anyway, on settings traitlets had put back to the traits' static defaults: state_dir and checkpoint_root ''
(the server's working directory: state.json and events.jsonl in the user's home) and the local backend
(on GKE: a pause that never releases the GPU). Now every gkews route answers 503 naming the bad setting,
and nothing is written anywhere.
"""
from __future__ import annotations

import json
import math
import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serverkit import gkews_server_config
from test_state_dir_unusable import ROUTES

BAD = {  # (class, setting): a value it refuses, and words its 503 message says
    ("GkewsApp", "max_age_days"): (-1, "c.GkewsApp.max_age_days must be 0 (no age limit) or positive, not -1"),
    ("GkewsApp", "keep_last"): (0, "c.GkewsApp.keep_last must be at least 1, not 0"),
    ("GkewsApp", "max_bytes"): (-100, "c.GkewsApp.max_bytes must be 0 (no budget) or positive, not -100"),
    ("GkewsApp", "kernel_call_timeout"): (-1, "c.GkewsApp.kernel_call_timeout must be more than 0, not -1"),
    ("GkewsApp", "busy_timeout"): (-5, "c.GkewsApp.busy_timeout must be at least 0, not -5"),
    ("GkewsApp", "idle_check_interval"): (1e-9, "c.GkewsApp.idle_check_interval must be at least 0.1, not 1e-09"),
    ("GkewsApp", "cleanup_interval"): (-5, "c.GkewsApp.cleanup_interval must be 0 (never) or positive, not -5"),
    ("GkewsApp", "gpu_count"): (-2, "c.GkewsApp.gpu_count must be at least 0, not -2"),
    ("GkewsApp", "backend_class"): ("jupyter_gkews.backends.Nope",
                                    "c.GkewsApp.backend_class must be a type, but 'jupyter_gkews.backends.Nope'"),
    ("GkewsApp", "idle_profiles"): ("interactive", "c.GkewsApp.idle_profiles expected a dict"),
    ("GkewsApp", "state_dir"): ("", "c.GkewsApp.state_dir is empty"),
    ("GkewsApp", "checkpoint_root"): ("  ", "c.GkewsApp.checkpoint_root is empty"),
    ("LocalBackend", "release_mode"): ("hibernate", "c.LocalBackend.release_mode expected any of ['auto'"),
    ("LocalBackend", "gpu_api"): ("amd", "c.LocalBackend.gpu_api expected any of ['nvidia', 'fake']"),
    ("LocalBackend", "capacity_timeout"): (-1, "c.LocalBackend.capacity_timeout must be at least 0, not -1"),
    ("LocalBackend", "capacity_poll_interval"): (0, "c.LocalBackend.capacity_poll_interval must be more than 0"),
    ("LocalBackend", "lock_timeout"): (0, "c.LocalBackend.lock_timeout must be at least 0.001, not 0"),
    ("LocalBackend", "release_check_timeout"): (-1, "c.LocalBackend.release_check_timeout must be at least 0"),
    ("LocalBackend", "dead_kernel_wait"): (-1, "c.LocalBackend.dead_kernel_wait must be at least 0"),
    ("LocalBackend", "host_memory_reserve"): (-1, "c.LocalBackend.host_memory_reserve must be at least 0, not -1"),
    ("LocalBackend", "start_hold_wait"): (-5, "c.LocalBackend.start_hold_wait must be at least 0, not -5"),
}
NOT_FINITE = {  # numbers that are not numbers: nan passes every comparison's `not`, inf never ends
    ("GkewsApp", "kernel_call_timeout"): (
        math.nan, "c.GkewsApp.kernel_call_timeout must be a finite number, more than 0, not nan"),
    ("GkewsApp", "idle_check_interval"): (
        math.inf, "c.GkewsApp.idle_check_interval must be a finite number, at least 0.1, not inf"),
    ("LocalBackend", "capacity_timeout"): (
        math.inf, "c.LocalBackend.capacity_timeout must be a finite number, at least 0, not inf"),
    ("LocalBackend", "start_hold_wait"): (
        math.nan, "c.LocalBackend.start_hold_wait must be a finite number, at least 0, not nan"),
}
GKE = {  # the GKE backend's own, with the backend chosen in the same configuration
    ("GkeBackend", "snapshot_timeout"): (0, "c.GkeBackend.snapshot_timeout must be more than 0, not 0"),
    ("GkeBackend", "poll_interval"): (
        math.nan, "c.GkeBackend.poll_interval must be a finite number, more than 0, not nan"),
    ("GkeBackend", "keep_snapshots"): (-1, "c.GkeBackend.keep_snapshots must be at least 0, not -1"),
}
CASES = [pytest.param({cls: {name: value}}, words, id=f"{cls}.{name}={value!r}")
         for (cls, name), (value, words) in [*BAD.items(), *NOT_FINITE.items()]] + \
    [pytest.param({"GkewsApp": {"backend_class": "jupyter_gkews.backends.gke.GkeBackend"}, cls: {name: value}}, words,
                  id=f"{cls}.{name}={value!r}") for (cls, name), (value, words) in GKE.items()]
FIX = "fix it in jupyter_server_config.py (or on the command line) and restart the server"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The server's working directory: where '' resolved to (`jupyter lab` started from the home folder)."""
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture
def settings():
    """{class: {setting: value}} on top of a good configuration (tests parametrize it)."""
    return {}


@pytest.fixture
def jp_server_config(tmp_path, home, settings):
    config = gkews_server_config(tmp_path, keep_last=3, backend_class="jupyter_gkews.backends.LocalBackend")
    for cls, values in settings.items():
        config.setdefault(cls, {}).update(values)
    return config


async def unavailable(jp_fetch) -> str:
    """The 503 message every gkews route answers (the same on each)."""
    messages = set()
    for method, parts in ROUTES:
        r = await jp_fetch(*parts, method=method, body="{}" if method == "POST" else None, raise_error=False)
        assert r.code == 503, (method, parts, r.code, r.body[:300])
        body = json.loads(r.body)
        assert body["reason"] == "ExtensionUnavailable", body
        messages.add(body["message"])
    assert len(messages) == 1, messages
    return messages.pop()


def assert_nothing_written(tmp_path, home):
    assert os.listdir(home) == []  # no state.json, events.jsonl, owner.lock or pins in the working directory
    assert not (tmp_path / "state").exists() and not (tmp_path / "ckpt").exists()  # nor where it was configured


@pytest.mark.parametrize(("settings", "words"), CASES)
async def test_a_bad_setting_turns_the_extension_off_and_names_itself(capfd, jp_fetch, jp_serverapp, tmp_path, home,
                                                                      settings, words):
    message = await unavailable(jp_fetch)
    assert message.startswith("jupyter-gkews is off: pause and resume are unavailable: "), message
    assert words in message and FIX in message, message
    log = capfd.readouterr().err  # the server's log (its own handler, on stderr), from the start
    assert f"GkewsApp] jupyter_gkews: {message}" in log and "[C " in log.split(message)[0].splitlines()[-1], log
    assert_nothing_written(tmp_path, home)
    assert "GKEWS_CHECKPOINT_ROOT" not in os.environ  # kernels are not told a checkpoint root


@pytest.mark.parametrize("jp_argv", [["--GkewsApp.keep_last=0"]])
async def test_the_metrics_of_a_server_whose_extension_is_off_say_so(jp_fetch, jp_serverapp, jp_argv):
    """/metrics said gkews_session_state{...="active"} 1 while every route answered 503: alerting saw a
    session that could pause. It says unavailable."""
    await unavailable(jp_fetch)
    states = {s.labels["gkews_session_state"]: s.value
              for family in text_string_to_metric_families((await jp_fetch("metrics")).body.decode())
              for s in family.samples if s.name == "gkews_session_state"}
    assert states["unavailable"] == 1.0 and states["active"] == 0.0, states


@pytest.mark.parametrize("jp_argv", [["--GkewsApp.idle_profiles=nightly"], ["--GkewsApp.max_age_days=-3"]])
async def test_a_bad_setting_on_the_command_line_is_named_too(jp_fetch, jp_serverapp, tmp_path, home, jp_argv):
    message = await unavailable(jp_fetch)
    name = jp_argv[0].split("=")[0].lstrip("-")
    assert f"c.{name} " in message and FIX in message, message
    assert_nothing_written(tmp_path, home)


@pytest.mark.parametrize("settings", [{
    "GkewsApp": {"cleanup_interval": 0, "max_age_days": 0, "max_bytes": 0, "busy_timeout": 0, "gpu_count": 0,
                 "keep_last": 1},
    "LocalBackend": {"capacity_timeout": 0, "release_check_timeout": 0, "dead_kernel_wait": 0,
                     "host_memory_reserve": 0, "lock_timeout": 0.001, "release_mode": "Shutdown"}}])
async def test_the_ends_of_each_range_are_accepted(jp_fetch, jp_serverapp, settings):
    assert (await jp_fetch("gkews", "status")).code == 200


@pytest.fixture
def file_root(tmp_path):
    (tmp_path / "ckpt").write_text("i am a file\n")
    return tmp_path / "ckpt"


async def test_a_checkpoint_root_that_is_a_file_is_named_as_the_checkpoint_root(file_root, jp_fetch, jp_serverapp):
    message = await unavailable(jp_fetch)
    assert f"the checkpoint root {file_root} cannot be written (Not a directory: {file_root}" in message, message
    assert "c.GkewsApp.checkpoint_root" in message and "the state directory" not in message, message
