"""The hold a pause puts a checkpointed kernel in (kernel_state.hold), and the calls a resume makes through it
(jupyter_gkews.bridge.call_held): the held loop runs here in a thread, as it runs in a kernel's main thread."""
from __future__ import annotations

import asyncio
import os
import threading
import time
from types import SimpleNamespace

import pytest

from jupyter_gkews.bridge import call_held
from kernel_state import hold


class Held:
    """kernel_state.hold._hold(path, bound) on a thread, until it leaves."""

    def __init__(self, path: str, bound: float):
        with open(path, "w"):
            pass  # the server makes the hold file
        self.path = path
        self.thread = threading.Thread(target=hold._hold, args=(path, bound), daemon=True)
        self.thread.start()
        wait_until(lambda: hold.held_pid(path) == os.getpid() or not self.thread.is_alive())

    def call(self, request: dict, timeout: float = 60) -> dict | None:
        return asyncio.run(call_held(self.path, os.getpid(), request, timeout))

    def release(self) -> None:
        os.remove(self.path)
        self.thread.join(60)
        assert not self.thread.is_alive()


def wait_until(condition, timeout: float = 60) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not met")


def test_a_held_kernel_signs_its_hold_and_answers_calls_through_it(tmp_path):
    held = Held(str(tmp_path / "gkews-hold-k"), bound=600)
    assert hold.held_pid(held.path) == os.getpid()
    answer = held.call({"op": "identity"})
    assert answer["ok"] and answer["result"]["pid"] == os.getpid(), answer
    bad = held.call({"op": "no-such-op"})
    assert bad == {"ok": False, "error": bad["error"], "type": "ValueError"} and "unknown op" in bad["error"]
    assert sorted(os.listdir(tmp_path)) == ["gkews-hold-k"]  # no call or answer file left behind
    held.release()


def test_a_hold_that_ended_says_so_and_a_call_then_returns_none(tmp_path):
    path = str(tmp_path / "gkews-hold-k")
    held = Held(path, bound=0.2)
    held.thread.join(60)
    assert not held.thread.is_alive() and os.path.exists(path)  # its bound ran out; the file is the server's
    assert hold.held_pid(path) is None  # but no kernel is in it any more
    assert held.call({"op": "identity"}, timeout=600) is None  # at once, not after the timeout


def test_a_hold_ends_when_its_file_is_replaced_by_the_next_pauses(tmp_path):
    """A client that pauses the moment the resume says "active": the resume removed the hold file and the
    pause made a new one under the same name, both between two looks of the kernel still in its hold. The
    old hold ends (the kernel must answer the pause), and leaves the new file as the pause made it."""
    path = str(tmp_path / "gkews-hold-k")
    held = Held(path, bound=600)
    os.remove(path)
    with open(path, "w"):
        pass  # the next pause's hold file (bridge.save_and_hold), empty until its kernel signs it
    held.thread.join(60)
    assert not held.thread.is_alive()
    assert os.path.exists(path) and hold.held_pid(path) is None


def test_time_the_process_did_not_run_does_not_count_against_the_bound(tmp_path, monkeypatch):
    """A Pod snapshot freezes the held kernel for hours; its monotonic clock may jump by all of that."""
    jumped = []

    def clock():
        if not jumped:
            jumped.append(True)
            return time.monotonic() - 36000  # the first reading was taken ten hours "before" every later one
        return time.monotonic()
    monkeypatch.setattr(hold, "time", SimpleNamespace(sleep=time.sleep, monotonic=clock))
    held = Held(str(tmp_path / "gkews-hold-k"), bound=30)
    wait_until(lambda: len(jumped) == 1)
    assert held.call({"op": "identity"})["ok"]  # still held after the jump
    assert held.thread.is_alive()
    held.release()


def test_a_detached_hold_has_no_bound(tmp_path, monkeypatch):
    detached, readings = [], []
    monkeypatch.setattr(hold, "detach_from_parent", lambda: detached.append(True) or 4242)
    monkeypatch.setattr(hold, "attach_to_parent", lambda parent: detached.append(parent))
    # the hold's clock (only its own): 1 s passes with every reading
    monkeypatch.setattr(hold, "time", SimpleNamespace(sleep=time.sleep,
                                                      monotonic=lambda: readings.append(1) or len(readings)))
    path = str(tmp_path / "gkews-hold-k")
    with open(path + hold.DETACH_SUFFIX, "w"):
        pass  # asked before it is held: at its first look
    held = Held(path, bound=0.5)
    wait_until(lambda: not os.path.exists(path + hold.DETACH_SUFFIX) and len(readings) > 40)
    assert held.call({"op": "identity"})["ok"] and held.thread.is_alive()  # 40 "seconds" past a bound of 0.5
    held.release()
    assert detached == [True, 4242]  # and it watches its parent again once let go


@pytest.mark.parametrize("text", ["", "not a pid"])
def test_a_hold_file_without_a_pid_names_no_kernel(tmp_path, text):
    path = tmp_path / "gkews-hold-k"
    path.write_text(text)
    assert hold.held_pid(str(path)) is None
    assert hold.held_pid(str(tmp_path / "missing")) is None
