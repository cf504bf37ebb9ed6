"""The lifecycle's vocabulary and state machine, without kernels or servers."""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from jupyter_gkews.claim import Claim
from jupyter_gkews.errors import Conflict
from jupyter_gkews.journal import event_record
from jupyter_gkews.lifecycle import Lifecycle
from jupyter_gkews.state import StateStore, initial_state
from jupyter_gkews.states import (PAUSE_FROM, PHASES, RESUME_FROM, TRANSITIONS, Event, IllegalTransition, Phase,
                                  State, check_recovery, check_transition, mermaid)

ROOT = Path(__file__).resolve().parent.parent


def test_every_allowed_transition_passes_and_every_other_raises():
    for old in State:
        for new in State:
            if (old, new) in TRANSITIONS:
                check_transition(old, new)
                check_transition(old.value, new.value)  # the strings on disk work the same
            else:
                with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value} is not a transition"):
                    check_transition(old, new)


@pytest.mark.parametrize("old, new", [("active", "paused"), ("active", "failed"), ("paused", "paused"),
                                      ("paused", "failed"), ("active", "active"), ("failed", "active")])
def test_the_transitions_a_user_must_never_see_are_refused(old, new):
    with pytest.raises(IllegalTransition):
        check_transition(old, new)


def test_phases_belong_to_their_state():
    check_transition("active", "pausing", "checkpointing")
    check_transition("pausing", "resuming", "restoring")
    check_transition("resuming", "active", None)
    with pytest.raises(IllegalTransition, match="pausing has no phase 'restoring'"):
        check_transition("active", "pausing", Phase.RESTORING)
    with pytest.raises(IllegalTransition, match="has no phase"):
        check_transition("resuming", "active", "verifying")
    with pytest.raises(IllegalTransition, match="unknown state"):
        check_transition("active", "asleep")
    assert {p for phases in PHASES.values() for p in phases if p} == set(Phase)


def test_every_state_is_reachable_from_active_and_can_get_back():
    reach = {State.ACTIVE}
    while True:
        more = {b for a, b in TRANSITIONS if a in reach} - reach
        if not more:
            break
        reach |= more
    assert reach == set(State)
    for s in State:  # no dead end: from every state some path leads back to active
        seen, frontier = {s}, {s}
        while frontier:
            frontier = {b for a, b in TRANSITIONS if a in frontier} - seen
            seen |= frontier
        assert State.ACTIVE in seen or s == State.ACTIVE, s


def test_the_claims_start_from_states_the_table_leaves():
    assert all((s, State.PAUSING) in TRANSITIONS for s in PAUSE_FROM)
    assert all((s, State.RESUMING) in TRANSITIONS for s in RESUME_FROM)


def test_str_enums_equal_the_strings_on_disk():
    assert State.PAUSED == "paused" and f"{State.PAUSED}" == "paused"
    assert {"paused": 1}[State.PAUSED] == 1
    assert Event("kernel-usable") is Event.KERNEL_USABLE


class Holder:
    def __init__(self, state="active"):
        self.state = {**initial_state("local"), "state": state}
        self._busy = False


def test_a_claim_is_exclusive_and_given_back_on_error():
    async def main():
        h = Holder()
        async with Claim(h, "pause", PAUSE_FROM) as claim:
            assert h._busy
            with pytest.raises(Conflict, match=r"cannot resume: a pause is running \(it has just begun\)"):
                async with Claim(h, "resume", RESUME_FROM):
                    pass
            claim.hand_over()
        assert h._busy  # handed over: the background task releases it
        claim.release()
        with pytest.raises(ValueError):
            async with Claim(h, "pause", PAUSE_FROM):
                raise ValueError("a check refused")
        assert not h._busy
        async with Claim(h, "pause", PAUSE_FROM):
            pass
        assert not h._busy  # not handed over: released at the end of the block
        h.state["state"] = "resuming"
        with pytest.raises(Conflict, match="cannot pause while the session is resuming"):
            async with Claim(h, "pause", PAUSE_FROM):
                pass
    asyncio.run(main())


def test_concurrent_claims_let_exactly_one_through():
    async def main():
        h = Holder("paused")
        won = []

        async def try_once(i):
            try:
                async with Claim(h, "resume", RESUME_FROM) as claim:
                    won.append(i)
                    claim.hand_over()
            except Conflict:
                pass
        await asyncio.gather(*(try_once(i) for i in range(20)))
        assert len(won) == 1
    asyncio.run(main())


def test_one_record_shape_for_every_write_path():
    state = {**initial_state("local"), "state": State.PAUSING, "phase": Phase.CHECKPOINTING, "cycle": 3}
    record = event_record(state, "pause-requested", notebooks=["a.ipynb"])
    assert record == {"time": state["updated"], "event": "pause-requested", "state": "pausing",
                      "phase": "checkpointing", "cycle": 3, "notebooks": ["a.ipynb"]}
    assert type(record["state"]) is str and type(record["event"]) is str
    with pytest.raises(ValueError):
        event_record(state, "no-such-event")


def test_the_architecture_doc_draws_the_transition_table():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    drawn = re.search(r"```mermaid\n(.*?)```", doc, re.S).group(1).strip()
    assert drawn == mermaid(), ("docs/architecture.md's diagram differs from jupyter_gkews.states.TRANSITIONS; "
                                "paste the output of `python -c 'from jupyter_gkews.states import mermaid; "
                                "print(mermaid())'`")


def test_a_late_release_never_frees_a_newer_claim():
    async def main():
        h = Holder("paused")
        async with Claim(h, "resume", RESUME_FROM) as first:
            first.hand_over()
        first.release()  # the transition published its last state
        h.state["state"] = "active"
        async with Claim(h, "pause", PAUSE_FROM) as second:
            second.hand_over()
        first.release()  # the first transition's task ends now: its claim was already given back
        assert h._busy and not second.released
        second.release()
        assert not h._busy
    asyncio.run(main())


def test_recoveries_are_checked_against_their_own_table():
    check_recovery("pausing", "paused")
    check_recovery(State.RESUMING, State.PAUSED)
    with pytest.raises(IllegalTransition, match="active -> paused is not a recovery"):
        check_recovery("active", "paused")
    with pytest.raises(IllegalTransition, match="not a recovery"):
        check_recovery("pausing", "active")


class _Backend:
    name = "local"


class _Sessions:
    async def list_sessions(self):
        return []


class _Server:
    session_manager = _Sessions()


def _lifecycle(tmp_path) -> Lifecycle:
    return Lifecycle(serverapp=_Server(), backend=_Backend(), bridge=None,
                     store=StateStore(str(tmp_path / "state")), checkpoint_root=str(tmp_path / "checkpoints"))


def test_the_lifecycle_refuses_an_illegal_change_before_writing_it(tmp_path):
    lc = _lifecycle(tmp_path)

    async def main():
        with pytest.raises(IllegalTransition, match="active -> paused"):
            await lc._enter(State.PAUSED, None, "paused", Event.PAUSED, final=True)
        with pytest.raises(IllegalTransition, match="active -> failed"):
            await lc._write_then_publish(lambda s: s.update(state=State.FAILED, phase=None), Event.FAILED)
        with pytest.raises(IllegalTransition, match="pausing has no phase 'verifying'"):
            await lc._write_then_publish(lambda s: s.update(state=State.PAUSING, phase=Phase.VERIFYING),
                                         Event.PAUSE_REQUESTED)
    asyncio.run(main())
    assert lc.state["state"] == "active" and not (tmp_path / "state" / "state.json").exists()


def test_a_refused_request_gives_its_claim_back(tmp_path):
    lc = _lifecycle(tmp_path)

    async def main():
        with pytest.raises(Conflict, match="nothing to pause"):
            await lc.request_pause()
        assert not lc.busy
        with pytest.raises(Conflict, match="nothing to resume: no notebook is paused"):
            await lc.request_resume()
        assert not lc.busy
    asyncio.run(main())


@pytest.mark.parametrize("found, event", [("pausing", "recovered-interrupted-pause"),
                                          ("resuming", "recovered-interrupted-resume")])
def test_a_starting_server_recovers_a_half_done_transition_to_paused(tmp_path, found, event):
    store = StateStore(str(tmp_path / "state"))
    store.save({**initial_state("local"), "state": found, "phase": PHASES[State(found)][0], "cycle": 1,
                "timeline": {"pause_requested": 0},
                "notebooks": [{"path": "a.ipynb", "status": "released", "checkpoint": "c1", "kernel_id": "k"}]})
    lc = _lifecycle(tmp_path)
    lc.load()
    assert lc.state["state"] == "paused" and lc.state["phase"] is None
    assert store.events()[-1]["event"] == event
    assert json.loads((tmp_path / "state" / "state.json").read_text())["state"] == "paused"


def test_a_pause_the_server_stopped_before_any_checkpoint_is_failed_not_paused(tmp_path):
    """Nothing was committed, nothing paused before: the state said "paused, 0 notebook(s) paused", the
    page held the notebook's cells until a Resume that had nothing to bring back, and the report counted
    GPU hours released. Now it is failed, naming the notebooks to run again and where older checkpoints are."""
    from jupyter_gkews.cycles import build_cycles, gpu_hours_released
    store = StateStore(str(tmp_path / "state"))
    store.save({**initial_state("local"), "state": "pausing", "phase": "checkpointing", "cycle": 1,
                "timeline": {"pause_requested": 0},
                "notebooks": [{"path": "a.ipynb", "status": "running", "kernel_id": "k"}]})
    lc = _lifecycle(tmp_path)
    lc.load()
    s = lc.status()
    assert s["state"] == "failed" and s["phase"] is None, s
    assert s["notebooks"][0]["status"] == "lost"
    assert "before any checkpoint was written: nothing was paused" in s["error"]["reason"]
    assert "Run the cells of a.ipynb again" in s["error"]["next_step"], s["error"]
    event = store.events()[-1]
    assert event["event"] == "recovered-interrupted-pause" and event["state"] == "failed"
    (cycle,) = [c for c in build_cycles(store.events()) if c["cycle"] == 1]
    assert cycle["result"] == "pause failed" and gpu_hours_released(cycle, until=10 ** 10) == 0, cycle


def test_a_resume_cut_short_by_a_server_stop_is_resumed_again_for_every_notebook(tmp_path):
    """The notebooks it had already restored lost their kernels with the server: they are paused again
    (the next resume restores them too), not shown as resumed with no kernel; one still suspended stays."""
    store = StateStore(str(tmp_path / "state"))
    store.save({**initial_state("local"), "state": "resuming", "phase": "verifying", "cycle": 1,
                "timeline": {"pause_requested": 0}, "notebooks": [
                    {"path": "a.ipynb", "status": "resumed", "verdict": "restored-from-checkpoint",
                     "checkpoint": "c1", "kernel_id": "k1"},
                    {"path": "b.ipynb", "status": "released", "checkpoint": "c2", "kernel_id": "k2"},
                    {"path": "c.ipynb", "status": "suspended", "checkpoint": "c3", "kernel_id": "k3",
                     "gpu": {"kernel_pid": 1}}]})
    lc = _lifecycle(tmp_path)
    lc.load()
    assert lc.state["state"] == "paused"
    assert [(nb["status"], nb.get("verdict")) for nb in lc.state["notebooks"]] == [
        ("released", None), ("released", None), ("suspended", None)]


def test_a_pause_cut_short_keeps_the_notebooks_it_carried_over(tmp_path):
    """A notebook an earlier resume left failed, carried over by the pause, is still to be resumed from its
    checkpoint after the roll-forward: not marked lost for want of a checkpoint of this pause."""
    store = StateStore(str(tmp_path / "state"))
    store.save({**initial_state("local"), "state": "pausing", "phase": "checkpointing", "cycle": 2,
                "timeline": {"pause_requested": 4102444800}, "notebooks": [
                    {"path": "a.ipynb", "status": "checkpointed", "checkpoint": "c1", "kernel_id": "k1"},
                    {"path": "b.ipynb", "status": "failed", "verdict": "failed", "checkpoint": "c2",
                     "kernel_id": "k2"}]})
    lc = _lifecycle(tmp_path)
    lc.load()
    assert lc.state["state"] == "paused"
    assert [(nb["status"], nb["checkpoint"]) for nb in lc.state["notebooks"]] == [("released", "c1"), ("failed", "c2")]
