"""The state directory's two files stay consistent when a write fails: a refused change (507, "nothing
was changed") changes neither state.json nor events.jsonl, and the event log never glues two events
into one unreadable line."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jupyter_gkews.state import StateStore


def test_a_half_line_left_by_a_crash_does_not_swallow_the_next_event(tmp_path):
    store = StateStore(str(tmp_path))
    store.append_event({"event": "pause-requested", "time": 1.0})
    with open(store.events_path, "a") as f:
        f.write('{"event":"pause-fin')  # the process died mid-append
    store.append_event({"event": "resume-requested", "time": 3.0})
    assert [e["event"] for e in store.events()] == ["pause-requested", "resume-requested"]


def test_an_event_that_cannot_be_written_is_cut_off_again(tmp_path):
    """A file size limit (or a full disk) lets part of a line in: it is taken back."""
    script = f"""
import resource, sys
sys.path[:0] = {sys.path!r}
from jupyter_gkews.state import StateStore
store = StateStore({str(tmp_path)!r})
store.append_event({{"event": "first", "time": 1.0}})
size = open(store.events_path, "rb").seek(0, 2)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, resource.RLIM_INFINITY))
try:
    store.append_event({{"event": "second", "time": 2.0, "padding": "x" * 100}})
except OSError as exc:
    print("refused", exc.errno)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("refused"), out.stderr
    store = StateStore(str(tmp_path))
    assert open(store.events_path).read().count("\n") == 1
    store.append_event({"event": "third", "time": 3.0})
    assert [e["event"] for e in store.events()] == ["first", "third"]


@pytest.mark.parametrize("failing", ["append_event", "save"])
def test_a_refused_write_changes_neither_file(tmp_path, monkeypatch, failing):
    """The event log full (a file size limit: the log is the bigger file) or the state not writable: the
    answer says nothing was changed, and neither file was."""
    from jupyter_gkews.lifecycle.persistence import Persistence

    class Writer(Persistence):
        checkpoint_root, log, listeners, _pins = str(tmp_path / "ckpt"), None, [], {}

        def __init__(self, store):
            self.store = store

    store = StateStore(str(tmp_path / "state"))
    store.save({"state": "active"})
    store.append_event({"event": "started", "time": 1.0})
    before = (open(store.state_path).read(), open(store.events_path).read())

    def refused(*_args, **_kwargs):
        raise OSError(27, "File too large")
    monkeypatch.setattr(store, failing, refused)
    with pytest.raises(OSError):
        Writer(store)._write({"state": "pausing", "notebooks": []}, {"event": "pause-requested", "time": 2.0})
    assert (open(store.state_path).read(), open(store.events_path).read()) == before
    assert json.loads(before[0])["state"] == "active"
