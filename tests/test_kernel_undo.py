"""Kernel undo in real kernels: a checkpoint after every cell, written in the background, and rewind."""
from __future__ import annotations

import os
import time

import pytest

from kernels import SLOW_RESTORE, Kernel

pytest.importorskip("numpy")


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


def auto_status(k: Kernel, wait: float | None = None) -> dict:
    reply = k.call({"op": "auto", "action": "status", "wait": wait})
    assert reply["ok"], reply
    return reply["result"]


def settle(k: Kernel) -> dict:
    """Wait (on the writer, not the clock) until every staged checkpoint is written; not a cell itself."""
    status = auto_status(k, wait=120)
    assert not status["writing"] and not status["queued"], status
    return status


def silently(k: Kernel, code: str) -> None:
    msg_id = k.client.execute(code, silent=True)
    reply = k.client.get_shell_msg(timeout=120)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = k.client.get_shell_msg(timeout=120)
    assert reply["content"]["status"] == "ok", reply["content"]


def checkpoints_by_source(k: Kernel) -> dict:
    reply = k.call({"op": "list"})
    assert reply["ok"], reply
    return {r["label"]["source"]: r for r in reply["result"] if r.get("auto")}


def test_off_by_default_then_one_labelled_checkpoint_per_completed_cell(store):
    with Kernel(store) as k:
        assert auto_status(k)["enabled"] is False
        k.run("before = 1")
        assert checkpoints_by_source(k) == {}
        assert "Auto-checkpointing is on" in k.run("%gkews_checkpoint auto on")
        k.run("import numpy as np\nbig = np.arange(4_000_000.0)  # 32 MB")
        settle(k)
        k.run("big[:10] = -1\nsmall = {'lr': 0.1}")
        settle(k)
        k.run("raise ValueError('this cell does not complete')", allow_error=True)
        k.run("")  # an empty cell runs nothing: no checkpoint "after [None]" that no rewind can reach
        k.run("note = 'last'")
        status = settle(k)
        rows = checkpoints_by_source(k)
        assert set(rows) == {"%gkews_checkpoint auto on", "import numpy as np", "big[:10] = -1", "note = 'last'"}
        cells = sorted(r["label"]["cell"] for r in rows.values())
        assert cells == sorted(set(cells)) and len(cells) == 4
        assert status["written"] == 4 and status["error"] is None
        # rewind says why a cell has none: it raised, or it never ran (not "a checkpoint was being written")
        raised = rows["big[:10] = -1"]["label"]["cell"] + 1
        assert f"cell [{raised}] raised an exception" in k.run(f"%gkews_checkpoint rewind {raised}", allow_error=True)
        assert "this kernel has not run a cell [99]" in k.run("%gkews_checkpoint rewind 99", allow_error=True)
        listing = k.run("%gkews_checkpoint list")
        assert "auto, after [" in listing and "big[:10] = -1" in listing
        k.run("%gkews_checkpoint auto off")
        assert auto_status(k)["enabled"] is False
        k.run("after_off = 2")
        assert "after_off = 2" not in checkpoints_by_source(k)


def test_a_setting_turns_it_on_from_the_start_and_a_notebook_keeps_its_choice(store):
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1"}) as k:
        assert auto_status(k)["enabled"] is True
        k.run("x = 41 + 1")
        settle(k)
        assert "x = 41 + 1" in checkpoints_by_source(k)
    with Kernel(store, notebook="other.ipynb") as k:  # no setting: off; the page turns it on
        assert auto_status(k)["enabled"] is False
        assert k.call({"op": "auto", "action": "on"})["result"]["enabled"] is True
    with Kernel(store, notebook="other.ipynb") as k:  # the next kernel of that notebook (a resume) keeps it
        assert auto_status(k)["enabled"] is True
        k.run("%gkews_checkpoint auto off")
    with Kernel(store, notebook="other.ipynb", extra_env={"GKEWS_AUTO_CHECKPOINT": "1"}) as k:
        assert auto_status(k)["enabled"] is False  # the notebook's own choice wins over the default
    with Kernel(store, notebook="third.ipynb", extra_env={"GKEWS_AUTO_CHECKPOINT": "maybe"}) as k:
        assert auto_status(k)["enabled"] is False
        # said where the user looks, not only on the kernel's stderr (the server's log)
        assert "GKEWS_AUTO_CHECKPOINT='maybe' is neither 1 (on) nor 0 (off)" in k.run("%gkews_checkpoint auto status")
        assert "%gkews_checkpoint auto on|off|status" in k.run("%gkews_checkpoint?")


def test_a_wrong_auto_setting_is_said_and_switches_nothing(store):
    """GKEWS_AUTO_KEEP_LAST=0 with GKEWS_AUTO_CHECKPOINT=1 stopped kernel_state loading at the kernel's start
    (a traceback in the server's log, and no start hold: a resumed kernel could run a cell before its
    restore); `auto on` printed the error yet switched it on, `auto off` printed it too. The start says it in
    one line and loads the rest; `auto on` refuses before switching; `auto off` and `auto status` answer, and
    status says what is wrong."""
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1", "GKEWS_AUTO_KEEP_LAST": "0"}) as k:
        assert k.value("'kernel_state' in get_ipython().extension_manager.loaded") is True  # loaded to its end
        problem = "GKEWS_AUTO_KEEP_LAST must be at least 1 (got 0)"
        assert auto_status(k)["enabled"] is False
        assert problem in k.run("%gkews_checkpoint auto status")
        assert problem in k.run("%gkews_checkpoint auto on", allow_error=True)
        assert auto_status(k)["enabled"] is False
        out = k.run("%gkews_checkpoint auto off")
        assert "auto-checkpointing off" in out and "Error" not in out, out


def test_in_place_change_while_the_previous_checkpoint_is_written_and_coalescing(store):
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import numpy as np\na = np.arange(6_000_000.0)  # 48 MB, chunked")
        settle(k)
        k.run("a += 1  # cell A\nfrom kernel_state import auto; auto.AUTO.writer.hold()")
        # the writer has taken cell A's checkpoint and is held before writing a byte of it
        k.run("import time\nwhile not auto.AUTO.status()['writing']:\n    time.sleep(0.01)")
        k.run("a *= 2  # cell B mutates the same array in place")
        k.run("a[::2] = 3  # cell C")
        status = auto_status(k)
        assert status["writing"] and status["queued"] and status["coalesced"] == 2
        silently(k, "auto.AUTO.writer.release()")  # silent: no cell of its own, so no checkpoint
        settle(k)
        rows = checkpoints_by_source(k)
        assert "a += 1  # cell A" in rows and "a[::2] = 3  # cell C" in rows, (sorted(rows), status)
        # coalesced while A was being written: the newest (C) won
        assert "a *= 2  # cell B mutates the same array in place" not in rows and "import time" not in rows
        out = k.run(f"%gkews_checkpoint rewind {rows['a += 1  # cell A']['label']['cell']}")
        assert "changed: a" in out
        assert k.value("bool((a == np.arange(6_000_000.0) + 1).all())") is True
        k.run(f"%gkews_checkpoint rewind {rows['a[::2] = 3  # cell C']['label']['cell']}")
        assert k.value("[float(a[0]), float(a[1]), float(a[5_999_999]), bool((a[::2] == 3).all())]") \
            == [3.0, 4.0, 12_000_000.0, True]
        settle(k)
        assert os.listdir(store / "tmp") == []


def test_rewind_across_a_redefined_class_and_undo(store):
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import numpy as np, torch\n"
              "class Model:\n    version = 1\n    def __init__(self): self.w = torch.ones(300_000)\n"
              "m = Model(); gone_later = [1, 2, 3]; x = 1")
        settle(k)
        k.run("class Model:\n    version = 2\n    def __init__(self): self.w = torch.zeros(300_000)\n"
              "m = Model(); m.w += 5; new_var = 'after'; del gone_later; x = 2")
        settle(k)
        rows = checkpoints_by_source(k)
        first = rows["import numpy as np, torch"]["label"]["cell"]
        out = k.run(f"%gkews_checkpoint rewind {first}")
        assert f"Rewound to the end of cell [{first}]" in out
        assert "changed: " in out and "Model" in out and "m" in out
        assert "came back: gone_later" in out
        assert "removed (defined after that cell): new_var" in out
        assert k.value("[Model.version, type(m) is Model, float(m.w.sum()), gone_later, x, 'new_var' in dir()]") \
            == [1, True, 300_000.0, [1, 2, 3], 1, False]
        undo = int(out.split("Undo with %gkews_checkpoint rewind ")[1].split(".")[0])
        k.run(f"%gkews_checkpoint rewind {undo}")
        assert k.value("[Model.version, type(m) is Model, float(m.w.sum()), new_var, x, 'gone_later' in dir()]") \
            == [2, True, 1_500_000.0, "after", 2, False]
        # the same through the JSON API the page uses
        reply = k.call({"op": "rewind", "cell": first})
        assert reply["ok"] and "gone_later" in reply["result"]["came_back"]
        assert k.value("Model.version") == 1
        missing = k.call({"op": "rewind", "cell": 999})
        assert not missing["ok"] and "no automatic checkpoint after cell [999]" in missing["error"]


def test_auto_on_refused_for_a_folder_that_is_no_store_switches_nothing(tmp_path):
    """`auto on` with GKEWS_CHECKPOINT_ROOT at a user's folder said it was refused, yet turned automatic
    checkpoints on (every cell then printed that they were failing)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.txt").write_text("my notes")
    with Kernel(mine) as k:
        said = k.run("%gkews_checkpoint auto on", allow_error=True)
        assert "is not a gkews checkpoint store" in said and "nothing was written" in said, said
        assert auto_status(k)["enabled"] is False
        assert "failing" not in k.run("x = 1")
        assert sorted(os.listdir(mine)) == ["README.txt"]


def test_retention_of_automatic_checkpoints_keeps_saved_ones(store):
    with Kernel(store, extra_env={"GKEWS_AUTO_KEEP_LAST": "3", "GKEWS_KEEP_LAST": "1"}) as k:
        k.run("y = 0")
        k.run("%gkews_checkpoint save")
        k.run("%gkews_checkpoint auto on")
        for i in range(6):
            k.run(f"y = {i + 1}")
            settle(k)
        rows = k.call({"op": "list"})["result"]
        auto_rows = [r for r in rows if r["auto"]]
        assert [r["label"]["source"] for r in auto_rows] == ["y = 6", "y = 5", "y = 4"]
        assert len([r for r in rows if not r["auto"]]) == 1  # the saved one is not an automatic one's to drop


def test_pause_flag_a_failing_save_said_once_and_shutdown_not_delayed(store):
    k = Kernel(store)
    try:
        k.run("%gkews_checkpoint auto on")
        assert k.call({"op": "auto", "action": "pause"})["result"]["paused"] is True
        k.run("during_pause = 1")
        assert "during_pause = 1" not in checkpoints_by_source(k)
        assert k.call({"op": "auto", "action": "unpause"})["result"]["paused"] is False
        settle(k)
        # the disk refuses the writes: said once, not after every cell, and the kernel goes on
        k.run("import resource, numpy as np\n_soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, _hard))")
        outs = []
        for i in range(4):
            # random: 8 MB that no compression brings under the 1 MiB limit
            outs.append(k.run(f"big{i} = np.random.default_rng({i}).standard_normal(1_000_000)"))
            settle(k)
        said = "".join(outs).count("automatic checkpoints are failing")
        assert said == 1, outs
        assert "file size limit" in auto_status(k)["error"]
        k.run("resource.setrlimit(resource.RLIMIT_FSIZE, (_soft, _hard))")
        k.run("ok_again = 1")
        assert settle(k)["error"] is None
        assert "ok_again = 1" in checkpoints_by_source(k)
        # a snapshot held in the writer does not keep the kernel from shutting down politely
        k.run("from kernel_state import auto; auto.AUTO.writer.hold()")
        k.run("last = np.ones(2_000_000)")
        k.run("import time\nwhile not auto.AUTO.status()['writing']:\n    time.sleep(0.01)")  # its thread runs niced
        assert auto_status(k)["writing"]
        # nor from being interrupted: a cell that loops is stopped while the writer holds a snapshot
        msg_id = k.client.execute("import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.05)")
        seen = None
        while seen != "looping":  # the cell's own code runs ("busy" comes before it, and so could the signal)
            msg = k.client.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                seen = msg["content"]["text"].strip()
        k.km.interrupt_kernel()
        while True:
            msg = k.client.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "error":
                assert msg["content"]["ename"] == "KeyboardInterrupt"
                break
        process = k.km.provisioner.process
        k.km.request_shutdown()
        # it exits by itself (a writer that kept it alive would be killed after this wait, failing it)
        assert process.wait(timeout=60) == 0
    finally:
        k.client.stop_channels()
        try:
            k.km.shutdown_kernel(now=True)
        except Exception:
            pass
    with Kernel(store) as fresh:
        rows = checkpoints_by_source(fresh)
        assert "last = np.ones(2_000_000)" not in rows and "ok_again = 1" in rows
        # a new kernel numbers its cells from [1]: the previous one's are reached by id
        fresh.run("%gkews_checkpoint rewind --checkpoint " + rows["ok_again = 1"]["id"])
        assert fresh.value("[ok_again, bool((big3 == np.random.default_rng(3).standard_normal(1_000_000)).all())]") \
            == [1, True]


def test_a_rewind_the_disk_refuses_says_it_changed_nothing_and_why_it_writes(store):
    """A rewind first checkpoints the state it replaces (its undo); when the disk refused that, the magic
    said only "could not write the checkpoint", as if a save had been asked for."""
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import resource, numpy as np\nx = 1")
        cell = k.quietly("get_ipython().execution_count") - 1
        settle(k)
        # random: 8 MB that no compression brings under the 1 MiB limit
        k.run("big = np.random.default_rng(0).standard_normal(1_000_000)\nx = 2\n"
              "_soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, _hard))")
        settle(k)
        out = k.run(f"%gkews_checkpoint rewind {cell}", allow_error=True)
        assert f"the rewind to the end of cell [{cell}] was not done, and nothing was changed: it first " \
               "checkpoints the state it replaces, so that it can be undone" in out, out
        assert "file size limit" in out, out
        assert k.quietly("(x, big.shape)") == (2, (1_000_000,))
        k.run("resource.setrlimit(resource.RLIMIT_FSIZE, (_soft, _hard))")
        assert "Rewound to the end of cell" in k.run(f"%gkews_checkpoint rewind {cell}")
        assert k.quietly("(x, 'big' in globals())") == (1, False)


def test_byte_budget_of_automatic_checkpoints_and_the_two_sets_apart(tmp_path):
    import numpy as np

    import kernel_state
    from kernel_state.store import Store

    root, nb = str(tmp_path / "store"), "nb.ipynb"
    ns = {"w": np.full(1 << 17, -1.0)}  # 1 MiB
    manual = kernel_state.save(ns, root=root, notebook=nb)["id"]
    autos = []
    for cell in range(1, 5):
        ns["w"] = np.full(1 << 17, float(cell))  # 1 MiB of new bytes per checkpoint
        autos.append(kernel_state.save(ns, root=root, notebook=nb, auto_label={"cell": cell, "source": f"c{cell}"},
                                       keep_last=50, max_bytes=0)["id"])
    store = Store(root)
    out = store.apply_retention(nb, max_bytes=int(2.5 * (1 << 20)), auto=True)
    assert sorted(out["deleted"]) == sorted(autos[:2])  # the two oldest automatic ones go
    assert set(store.checkpoint_ids(nb)) == {manual, *autos[2:]}
    # the saved checkpoints' own limit (keep 1) never counts the automatic ones
    assert store.apply_retention(nb, keep_last=1)["deleted"] == []
    assert set(store.checkpoint_ids(nb)) == {manual, *autos[2:]}


def _blob_bytes(store) -> int:
    return sum(p.stat().st_size for p in (store / "blobs").iterdir())


def test_small_changes_to_large_data_are_stored_small_and_come_back_exact(store):
    """A slice of a big array and a small update of every weight: each cell's checkpoint stores the
    XOR with the previous version, compressed, not the changed chunk and tensor whole; every rewind is
    bit-exact, also after retention removed the checkpoint that first wrote those bytes; and what a
    pause saves stays plain safetensors."""
    from kernel_state.store import Store
    with Kernel(store, extra_env={"GKEWS_AUTO_KEEP_LAST": "3"}) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import hashlib, numpy as np, torch\n"
              "a = np.random.default_rng(0).standard_normal(6_000_000)  # 48 MB: six 8 MiB chunks\n"
              "w = torch.nn.Parameter(torch.randn(1_000_000, generator=torch.Generator().manual_seed(0)))\n"
              "state = lambda: hashlib.sha256(a.tobytes() + w.detach().numpy().tobytes()).hexdigest()")
        settle(k)
        before = _blob_bytes(store)
        cells, states = [], {}
        for i in range(4):
            out = k.run(f"a[{i} * 1_000_000:{i} * 1_000_000 + 1000] += 1.0  # change {i}\n"
                        f"with torch.no_grad(): w.add_(1e-6 * torch.randn_like(w))\nprint(state())")
            cell = settle(k)["last"]["label"]["cell"]
            cells.append(cell)
            states[cell] = out.strip()
        # stored plainly, each cell would add its 8 MiB chunk and the 4 MB tensor: 50 MB for the four
        plain = 4 * ((8 << 20) + 4_000_000)
        assert _blob_bytes(store) - before < plain / 4, (_blob_bytes(store) - before, plain)
        assert any(p.suffix == ".enc" for p in (store / "blobs").iterdir())
        kept = sorted(r["label"]["cell"] for r in k.call({"op": "list"})["result"] if r.get("auto"))
        assert kept == cells[-3:]  # the setup cell's checkpoint, which wrote the bases, is gone
        for cell in (cells[-3], cells[-1]):
            out = k.run(f"%gkews_checkpoint rewind {cell}")
            assert k.value("state()") == states[cell], out
        k.run("%gkews_checkpoint save")
        saved = next(m for m in (Store(str(store)).load_manifest("work/experiment.ipynb", c)
                                 for c in Store(str(store)).checkpoint_ids("work/experiment.ipynb"))
                     if not m.get("auto"))
        for digest in saved["blobs"]:
            assert (store / "blobs" / f"{digest}.safetensors").exists() or \
                (store / "blobs" / f"{digest}.pkl").exists(), digest


def test_staging_memory_is_reused_bounded_and_never_while_the_writer_needs_it(store):
    """A cell that changes the same arrays again copies them into the memory the last written snapshot
    used (no page faults), the pool stays under GKEWS_AUTO_STAGING_MB, and a held writer's bytes are
    never reused: every checkpoint still holds exactly the state at the end of its cell."""
    with Kernel(store, extra_env={"GKEWS_AUTO_STAGING_MB": "40"}) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import numpy as np\na = np.arange(6_000_000.0)  # 48 MB: six chunks of at most 8 MiB")
        settle(k)
        k.run("a += 1  # one")
        first = settle(k)["staging"]
        assert 0 < first["pooled"] <= 40 << 20 and first["limit"] == 40 << 20, first
        k.run("a += 1  # two")
        second = settle(k)["staging"]
        assert second["reused"] >= first["reused"] + (32 << 20), (first, second)  # at least four chunks warm
        assert second["pooled"] <= 40 << 20
        k.run("from kernel_state import auto; auto.AUTO.writer.hold()\na += 1  # three")
        k.run("import time\nwhile not auto.AUTO.status()['writing']:\n    time.sleep(0.01)")
        k.run("a += 1  # four: staged while three is held, into other memory")
        silently(k, "auto.AUTO.writer.release()")
        settle(k)
        rows = checkpoints_by_source(k)
        for source, value in (("a += 1  # two", 2.0), ("a += 1  # one", 1.0),
                              ("a += 1  # four: staged while three is held, into other memory", 4.0)):
            k.run(f"%gkews_checkpoint rewind {rows[source]['label']['cell']}")
            assert k.value("bool((a == np.arange(6_000_000.0) + %r).all())" % value) is True, source
        assert "Warm staging memory: " in k.run("%gkews_checkpoint auto status")
        k.run("%gkews_checkpoint auto off")
        assert auto_status(k)["staging"]["pooled"] == 0


def test_only_written_chunks_are_hashed_and_every_checkpoint_is_still_exact(store, tmp_path):
    """After a cell that wrote a few bytes of a 64 MB array (a store, a file read into it, a copy), the
    foreground hashes the chunks those bytes are in, not the whole array, where the kernel can tell
    (Linux 6.7+); on any kernel, a rewind to each cell gives back exactly the array it ended with."""
    import platform
    release = tuple(int(x) for x in platform.release().split(".")[:2])
    (tmp_path / "block").write_bytes(bytes(range(256)) * 64)
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import numpy as np, hashlib\na = np.arange(8_000_000.0)  # 64 MB, eight chunks\n"
              "digest = lambda: hashlib.sha256(a.tobytes()).hexdigest()")
        settle(k)
        cells = {
            "a[10] = -1.0": None,
            f"with open({str(tmp_path / 'block')!r}, 'rb') as f:\n    f.readinto(memoryview(a)[3_000_000:3_002_048])":
                None,
            "np.copyto(a[7_999_000:], 5.0)": None,
            "a[4_200_000:4_200_100] *= 3": None,
        }
        hashed = []
        for source in cells:
            k.run(source)
            status = settle(k)
            hashed.append(status["last_stage"]["hashed"])
            cells[source] = k.value("digest()")
        if release >= (6, 7):
            assert auto_status(k)["dirty_pages"]["off"] is None
            assert max(hashed) <= 2 * (8 << 20), hashed  # at most two of the eight chunks per cell
        rows = checkpoints_by_source(k)
        for source, expected in reversed(list(cells.items())):
            k.run(f"%gkews_checkpoint rewind {rows[source.splitlines()[0]]['label']['cell']}")
            assert k.value("digest()") == expected, source


def test_an_array_written_between_the_cells_hash_and_its_copy_is_named_by_the_copy(store):
    """A thread (a data loader) writes an array after the checkpoint hashed it and before it copied it. The copy
    was filed under the older hash: a rewind to that cell failed ("does not match its hash"), and so did one to a
    later cell that left the array with those older bytes, which found them "written" already."""
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import numpy as np, hashlib\na = np.zeros(1_000_000)  # one blob\nb = np.zeros(6_000_000)  # chunks\n"
              "digest = lambda: hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest()")
        settle(k)
        silently(k, "import kernel_state.auto as _auto\n_copy = _auto._staged_copy\n"
                    "def _racing(mv, hasher=None):\n"
                    "    m = memoryview(mv).cast('B')\n"
                    "    m[0] = (m[0] + 1) % 256  # the thread's write: after the cell's hash, before the copy\n"
                    "    return _copy(mv, hasher)\n"
                    "_auto._staged_copy = _racing")
        k.run("a[:] = 3.0; b[:] = 3.0  # raced")
        settle(k)
        raced = k.value("digest()")
        silently(k, "_auto._staged_copy = _copy")
        k.run("a[:] = 0.0; b[:] = 0.0")
        k.run("a[:] = 3.0; b[:] = 3.0  # clean")
        settle(k)
        clean = k.value("digest()")
        rows = checkpoints_by_source(k)
        for note, expected in (("clean", clean), ("raced", raced)):
            out = k.run(f"%gkews_checkpoint rewind {rows[f'a[:] = 3.0; b[:] = 3.0  # {note}']['label']['cell']}")
            assert "could not" not in out, out
            assert k.value("digest()") == expected, note


def test_a_rewind_names_the_variables_holding_a_changed_ones_objects(store):
    """`history = log`, `cfg = {"log": log}`: a rewind over `log.append(2)` brought all three back, and said that
    history and cfg were unchanged (their pickles name log's objects, not their contents)."""
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("log = [1]; history = log; cfg = {'log': log}; other = [1]")
        settle(k)
        k.run("log.append(2)")
        settle(k)
        cell = checkpoints_by_source(k)["log = [1]; history = log; cfg = {'log': log}; other = [1]"]["label"]["cell"]
        out = k.run(f"%gkews_checkpoint rewind {cell}")
        assert "changed: log, history, cfg\n" in out and "1 unchanged" in out, out
        assert k.value("[log, history, cfg, history is log]") == [[1], [1], {"log": [1]}, True]


def test_arrays_no_cell_wrote_are_not_hashed_again_and_come_back_exact(store):
    """Arrays of 1 MiB to 32 MiB (a list of images) were hashed whole after every cell, written or not: 800 of
    4 MB cost 160 ms a cell. Those no write reached since the last cell keep their digests (where the kernel can
    tell which pages were written); every rewind still gives back exactly what each cell ended with."""
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import numpy as np, hashlib\nimgs = [np.random.default_rng(i).random(250_000) for i in range(20)]\n"
              "digest = lambda: hashlib.sha256(b''.join(a.tobytes() for a in imgs)).hexdigest()")
        settle(k)
        tracking = auto_status(k)["dirty_pages"]["off"] is None
        cells, hashed = {}, {}
        for source in ("x = 1", "imgs[7][3] = -1.0", "x = 2", "imgs[15][:10] = 5.0"):
            k.run(source)
            hashed[source] = settle(k)["last_stage"]["hashed"]
            cells[source] = k.value("digest()")
        if tracking:
            assert hashed == {"x = 1": 0, "imgs[7][3] = -1.0": 2_000_000, "x = 2": 0, "imgs[15][:10] = 5.0": 2_000_000}
        rows = checkpoints_by_source(k)
        for source, expected in reversed(list(cells.items())):
            out = k.run(f"%gkews_checkpoint rewind {rows[source]['label']['cell']}")
            assert "could not" not in out and k.value("digest()") == expected, (source, out)


def test_tensors_named_by_the_writer_while_later_cells_refer_to_them(store):
    """A changed torch storage is staged under a placeholder and named by the writer thread. Cells that
    end while it is still unnamed (the writer held), one that leaves it unchanged and one that changes it
    again, and a write that fails with the next snapshot queued: no manifest on disk ever holds a
    placeholder, and every rewind gives back exactly the weights of its cell."""
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import hashlib, torch\nfrom kernel_state import auto\n"
              "w = torch.nn.Parameter(torch.randn(2_000_000, generator=torch.Generator().manual_seed(1)))\n"
              "state = lambda: hashlib.sha256(w.detach().numpy().tobytes()).hexdigest()")
        settle(k)
        expected = {}
        k.run("auto.AUTO.writer.hold()\nwith torch.no_grad(): w.mul_(2)  # one")
        k.run("import time\nwhile not auto.AUTO.status()['writing']:\n    time.sleep(0.01)")
        expected["import time"] = k.quietly("state()")  # w unchanged since "one": the same placeholder
        silently(k, "auto.AUTO.writer.release()")
        settle(k)
        k.run("with torch.no_grad(): w.add_(1)  # two")
        settle(k)
        expected["with torch.no_grad(): w.add_(1)  # two"] = k.quietly("state()")
        # the next write fails once (a full disk, say) while the snapshot after it waits: that one takes
        # over the bytes it shares with the failed one, under their placeholder, and writes them
        k.run("from kernel_state.errors import CheckpointWriteError\n_put, _failed = auto.Writer._put_tensors, []\n"
              "def _once(*a):\n    if not _failed:\n        _failed.append(1)\n"
              "        raise CheckpointWriteError('the disk is full (injected)')\n    return _put(*a)\n"
              "auto.Writer._put_tensors = staticmethod(_once)\n"
              "auto.AUTO.writer.hold()\nwith torch.no_grad(): w.sub_(3)  # three")
        k.run("while not auto.AUTO.status()['writing']:\n    time.sleep(0.01)")
        k.run("x = 4  # four: w as three left it, staged only in the snapshot that fails")
        silently(k, "auto.AUTO.writer.release()")
        status = settle(k)
        assert status["error"] is None and k.quietly("_failed") == [1], status
        expected["x = 4  # four: w as three left it, staged only in the snapshot that fails"] = k.quietly("state()")
        k.run("ok = 1  # five")
        assert settle(k)["error"] is None
        expected["ok = 1  # five"] = k.quietly("state()")
        manifests = list((store / "notebooks").rglob("*.json"))
        assert manifests and not [m for m in manifests if "pending-" in m.read_text()]
        rows = checkpoints_by_source(k)
        for source in ("ok = 1  # five", "x = 4  # four: w as three left it, staged only in the snapshot that fails",
                       "with torch.no_grad(): w.add_(1)  # two", "import time"):
            k.run(f"%gkews_checkpoint rewind {rows[source]['label']['cell']}")
            assert k.quietly("state()") == expected[source], source
        k.run(f"%gkews_checkpoint rewind {rows['auto.AUTO.writer.hold()']['label']['cell']}")  # "one"
        assert k.quietly("state()") == expected["import time"]


def test_arrays_freed_and_made_again_in_the_same_memory_come_back_exact(store, tmp_path):
    """Dirty-page tracking trusts memory, not objects: arrays deleted and made again (often at the same
    address and size), written in place, read into from a file, zeroed, copied over; after every cell a
    checkpoint, and a rewind to each of them gives back exactly what that cell left."""
    import random
    rng = random.Random(7)
    n = 5_000_000  # 40 MB: chunked, tracked
    ops = [
        "a[{i}:{i} + 1000] += 1.5",
        "b[{i}] = -2.0",
        "del a\na = np.empty(N)\na[:] = np.arange(N) * {k}",
        "del b\nb = np.zeros(N)",
        "b[{i}:{i} + 500] = np.arange(500.0)",
        "with open(blob, 'rb') as f:\n    f.readinto(memoryview(a)[{i}:{i} + 4096])",
        "np.copyto(b, a)",
        "a, b = b, a",
        "c = a[::7].copy()",
    ]
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run(f"import hashlib, os, numpy as np\nN = {n}\na = np.arange(N, dtype=float)\nb = np.ones(N)\n"
              f"blob = {str(tmp_path / 'blob.bin')!r}\nopen(blob, 'wb').write(os.urandom(32768))\n"
              "state = lambda: hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest()")
        settle(k)
        expected = {}
        for step in range(16):
            source = f"# step {step}\n" + rng.choice(ops).format(i=rng.randrange(0, n - 5000), k=step)
            k.run(source)
            settle(k)  # a checkpoint of its own for every cell
            expected[f"# step {step}"] = k.quietly("state()")
        assert auto_status(k)["dirty_pages"]["tracked"] >= 1 or auto_status(k)["dirty_pages"]["off"]
        rows = checkpoints_by_source(k)
        for source in rng.sample(sorted(expected), 8):
            k.run(f"%gkews_checkpoint rewind {rows[source]['label']['cell']}")
            assert k.quietly("state()") == expected[source], source


def test_dirty_page_tracking_turned_off_is_said_and_changes_nothing_saved(store):
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1", "GKEWS_AUTO_DIRTY_PAGES": "0"}) as k:
        k.run("import numpy as np\na = np.arange(5_000_000.0)")
        k.run("a[7] = -1")
        status = settle(k)
        assert status["last_stage"]["hashed"] == 40_000_000  # the whole array, every cell
        assert ("Dirty-page tracking is off (turned off by GKEWS_AUTO_DIRTY_PAGES=0)"
                in k.run("%gkews_checkpoint auto status"))
        k.run("a[8] = -2")
        settle(k)
        k.run(f"%gkews_checkpoint rewind {checkpoints_by_source(k)['a[7] = -1']['label']['cell']}")
        assert k.quietly("[float(a[7]), float(a[8])]") == [-1.0, 8.0]


def test_changes_a_version_counter_misses_are_in_the_cells_checkpoint(store):
    """A fused optimizer step, a write through .data and one through .numpy() leave torch's version counter
    as it was: each cell's checkpoint still holds that cell's weights (the kernel says which pages were
    written where it can, else the weights are fingerprinted), and a rewind gives them back exactly."""
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import torch, hashlib\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(1024, 1024)\n"
              "opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)\n"
              "digest = lambda: hashlib.sha256(model.weight.detach().numpy().tobytes()).hexdigest()")
        settle(k)
        cells = {"model(torch.randn(8, 1024)).sum().backward(); opt.step()": None,
                 "label = 'no change to the model'": None,
                 "model.weight.data -= 1": None,
                 "model.weight.detach().numpy()[:4] = 7": None,
                 "other = 'nor here'": None}
        for source in cells:  # (no other cell in between: its checkpoint would replace this one's)
            version = k.quietly("model.weight._version")
            k.run(source)
            assert k.quietly("model.weight._version") == version, source  # torch did not see any of it
            cells[source] = k.quietly("digest()")
            settle(k)
        rows = checkpoints_by_source(k)
        for source, expected in reversed(list(cells.items())):
            k.run(f"%gkews_checkpoint rewind {rows[source]['label']['cell']}")
            assert k.quietly("digest()") == expected, source


@pytest.mark.parametrize("env", [{"GKEWS_AUTO_DIRTY_PAGES": "0"}, {}], ids=["untracked", "shared memory"])
def test_a_change_torch_does_not_see_while_the_writer_is_behind_is_in_the_cells_checkpoint(store, env):
    """Cells run back to back while the writer is still busy with an earlier snapshot: a tensor staged there
    (not named yet), then written through .data (no version bump), must not be taken for unchanged. Where pages
    cannot be tracked (a kernel older than Linux 6.7, memory shared with DataLoader workers), only its bytes
    can tell."""
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1", **env}) as k:
        k.run("import torch\nfrom kernel_state import auto\nt = torch.zeros(2_000_000)\nx = 0"
              + ("" if env else "\nt.share_memory_()"))
        settle(k)
        k.run("auto.AUTO.writer.hold()\nt.add_(1)")
        k.run("import time\nwhile not auto.AUTO.status()['writing']:\n    time.sleep(0.01)")
        k.run("t.data[0] = 99")
        k.run("x = 1")
        silently(k, "auto.AUTO.writer.release()")
        settle(k)
        k.run("t.data[0] = -5; x = 2")
        settle(k)
        k.run(f"%gkews_checkpoint rewind {checkpoints_by_source(k)['x = 1']['label']['cell']}")
        assert k.quietly("[float(t[0]), float(t[1]), x]") == [99.0, 1.0, 1]


def test_a_snapshot_cut_short_leaves_no_later_checkpoint_stale(store):
    """A Ctrl-C landing while the post-cell snapshot stages (here: a value whose pickling is interrupted once)
    costs that cell its checkpoint, nothing more: a tensor written through .data in that cell (no version bump)
    is in the next cells' checkpoints. The page scan of the cut snapshot had forgotten those writes."""
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1"}) as k:
        k.run("import torch\nt = torch.zeros(2_000_000)\nx = 0")
        settle(k)
        k.run("class Boom:\n    fired = False\n    def __reduce__(self):\n        if not Boom.fired:\n"
              "            Boom.fired = True\n            raise KeyboardInterrupt\n        return (Boom, ())\n"
              "t.data[1_000_000] = 5\nboom = Boom()")
        settle(k)
        k.run("x = 1")
        settle(k)
        k.run("t.data[1_000_000] = 6; x = 2")
        settle(k)
        k.run(f"%gkews_checkpoint rewind {checkpoints_by_source(k)['x = 1']['label']['cell']}")
        assert k.quietly("[float(t[1_000_000]), x]") == [5.0, 1]


def test_rewind_says_why_a_cell_has_no_checkpoint_and_brings_back_ipython_s_own_names(store):
    """rewind N to a cell without an automatic checkpoint said "automatic checkpoints were off then, or a save
    or restore was running" for the cell typing the rewind itself and for a cell whose checkpoint an interrupt
    dropped, and blamed a cell that raised when the checkpoint a rewind took for it (the state it replaced)
    had been retired. Each gets its own reason. And a rewind over a cell that rebound IPython's In and Out
    took the names away: IPython's own come back."""
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1", "GKEWS_AUTO_KEEP_LAST": "2"}) as k:
        k.run("x = 1")  # [1]
        settle(k)
        k.run("x = 2")  # [2]
        settle(k)
        k.run("x = 3; In = 'mine'; Out = 0\nraise ValueError('oops')", allow_error=True)  # [3]
        settle(k)
        assert "Undo with %gkews_checkpoint rewind 3" in k.run("%gkews_checkpoint rewind 2")  # [4]
        assert k.quietly("[type(In).__name__, type(Out).__name__, x]") == ["list", "dict", 2]
        for code in ("y = 1", "y = 2"):  # [5], [6]: retention (the newest 2) retires the state before [4]
            k.run(code)
            settle(k)
        out = k.run("%gkews_checkpoint rewind 3", allow_error=True)  # [7]
        assert "its automatic checkpoint (the state before the rewind to cell [2]) was deleted since" in out, out
        out = k.run("%gkews_checkpoint rewind 8", allow_error=True)  # [8]
        assert "cell [8] is this cell, still running" in out, out
        k.run("class Boom:\n    fired = False\n    def __reduce__(self):\n        if not Boom.fired:\n"
              "            Boom.fired = True\n            raise KeyboardInterrupt\n        return (Boom, ())\n"
              "boom = Boom()")  # [9]: an interrupt lands while its checkpoint is staged
        settle(k)
        out = k.run("%gkews_checkpoint rewind 9", allow_error=True)  # [10]
        assert "an interrupt came while its checkpoint was being taken, which dropped it" in out, out


def restart(k: Kernel) -> None:
    """Restart the kernel the way the notebook's Restart does: a new process, cells numbered from [1]."""
    k.km.restart_kernel(now=True)
    k.client.stop_channels()
    k.client = k.km.client()
    k.client.start_channels()
    k.client.wait_for_ready(timeout=60)


def test_after_a_restart_rewind_goes_back_only_to_cells_of_this_kernel(store):
    """After a restart the cells are numbered from [1] again: `rewind 3` means this kernel's cell [3], never
    the previous process's, and the list tells the two apart."""
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1"}) as k:
        for code in ("secret_old = 'OLD KERNEL'; x = 1", "x = 2", "x = 3", "x = 4"):
            k.run(code)
            settle(k)
        old = checkpoints_by_source(k)
        assert old["x = 3"]["label"]["cell"] == 3 and old["x = 3"]["earlier_kernel"] is False, old["x = 3"]
        restart(k)
        k.run("y = 'new kernel'")  # [1] again
        k.run("y = 'new 2'")  # [2]
        settle(k)
        out = k.run("%gkews_checkpoint rewind 3", allow_error=True)
        assert "cell [3] ran in an earlier kernel" in out, out
        assert f"%gkews_checkpoint rewind --checkpoint {old['x = 3']['id']}" in out, out
        assert k.quietly("[y, 'x' in dir(), 'secret_old' in dir()]") == ["new 2", False, False]
        reply = k.call({"op": "rewind", "cell": 3})  # the page's and REST's way: the same answer
        assert not reply["ok"] and "cell [3] ran in an earlier kernel" in reply["error"], reply
        missing = k.call({"op": "rewind", "cell": 99})
        assert "no automatic checkpoint after cell [99]" in missing["error"] and "[1], [2])" in missing["error"]
        # [1] and [2] are this kernel's, though the previous one had cells [1] and [2] too
        out = k.run("%gkews_checkpoint rewind 1")
        assert "Rewound to the end of cell [1] (y = 'new kernel')" in out, out
        assert k.quietly("[y, 'x' in dir(), 'secret_old' in dir()]") == ["new kernel", False, False]
        settle(k)
        rows = k.call({"op": "list"})["result"]
        earlier = {r["label"]["source"] for r in rows if r["auto"] and r.get("earlier_kernel")}
        assert earlier == {"secret_old = 'OLD KERNEL'; x = 1", "x = 2", "x = 3", "x = 4"}, rows
        listing = k.run("%gkews_checkpoint list")
        marked = [line for line in listing.splitlines() if "earlier kernel" in line]
        assert len(marked) == 4 and all("y = " not in line for line in marked), listing
        # that checkpoint by id: a rewind to it, on purpose
        out = k.run(f"%gkews_checkpoint rewind --checkpoint {old['x = 3']['id']}")
        assert "Rewound to the end of cell [3] of an earlier kernel (x = 3)" in out, out
        assert "removed (defined after that cell): y" in out, out
        assert k.quietly("[x, secret_old, 'y' in dir()]") == [3, "OLD KERNEL", False]


def test_a_rewind_to_an_earlier_kernel_leaves_this_kernels_own_cell_numbers_its_own(store):
    """After a restart, a rewind by id to the earlier kernel's [6] continued its counter, and every number
    below it became the earlier kernel's: `rewind 2`, meaning this kernel's [2] (a cell that raised, so without a
    checkpoint), brought back the earlier kernel's [2]. Numbers this kernel had used stay its own."""
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1"}) as k:
        for n in range(1, 7):
            k.run(f"x = {n}")
            settle(k)
        old = checkpoints_by_source(k)
        restart(k)
        k.run("y = 'own'")  # [1]
        k.run("1 / 0", allow_error=True)  # [2]: raised, so no checkpoint of its own
        k.run("z = 3")  # [3]
        settle(k)
        out = k.run(f"%gkews_checkpoint rewind --checkpoint {old['x = 6']['id']}")  # [4]
        assert "Rewound to the end of cell [6] of an earlier kernel" in out, out
        assert k.quietly("[x, 'y' in dir()]") == [6, False]
        out = k.run("%gkews_checkpoint rewind 2", allow_error=True)
        assert "Rewound" not in out and "no automatic checkpoint after cell [2]" in out, out
        assert k.quietly("[x, 'y' in dir()]") == [6, False]
        out = k.run("%gkews_checkpoint rewind 5")  # numbers it had not used carry on the earlier kernel's
        assert "Rewound to the end of cell [5] (x = 5)" in out and k.quietly("x") == 5, out


def test_after_a_resume_rewind_still_reaches_the_cells_from_before_the_pause(store):
    """A resumed kernel continues the execution counter of the one it was restored from: the notebook reads
    as one session, so its cells from before the pause stay reachable by number, across several resumes;
    a plain restart (nothing restored) starts a new numbering."""
    env = {"GKEWS_AUTO_CHECKPOINT": "1"}
    with Kernel(store, extra_env=env) as first:
        for code in ("a = 1", "a = 2", "a = 3"):
            first.run(code)
            settle(first)
        assert first.call({"op": "save"})["ok"]  # what a pause does
    with Kernel(store, extra_env=env) as second:
        assert second.call({"op": "restore"})["ok"]  # what a resume does: the next cell is [4]
        second.run("b = 'after the first resume'")
        settle(second)
        assert all(not r.get("earlier_kernel") for r in second.call({"op": "list"})["result"])
        out = second.run("%gkews_checkpoint rewind 2")
        assert "removed (defined after that cell): b" in out, out
        assert second.quietly("[a, 'b' in dir()]") == [2, False]
        second.run("%gkews_checkpoint rewind 4")  # undo: this kernel's own cell
        assert second.quietly("[a, b]") == [3, "after the first resume"]
        second.run("c = 'more'")
        settle(second)
        assert second.call({"op": "save"})["ok"]
    with Kernel(store, extra_env=env) as third:
        assert third.call({"op": "restore"})["ok"]
        third.run("d = 'after the second resume'")
        settle(third)
        third.run("%gkews_checkpoint rewind 2")  # a cell of the first kernel, two resumes ago
        assert third.quietly("[a, 'b' in dir(), 'd' in dir()]") == [2, False, False]
    with Kernel(store, extra_env=env) as fresh:  # a start with nothing restored: numbered from [1] again
        fresh.run("z = 1")
        assert "cell [2] ran in an earlier kernel" in fresh.run("%gkews_checkpoint rewind 2", allow_error=True)


def test_the_save_message_names_the_notebook_it_saved_under(store):
    with Kernel(store, extra_env={"GKEWS_NOTEBOOK": "work/console-7"}) as k:
        out = k.run("v = 1\n%gkews_checkpoint save")
        assert "Saved checkpoint " in out and "for 'work/console-7'" in out, out
        out = k.run("%gkews_checkpoint save --notebook elsewhere.ipynb")
        assert "for 'elsewhere.ipynb'" in out, out


def test_verify_and_restore_take_the_newest_saved_checkpoint_and_its_probes(store):
    """With kernel undo on, verify compared the live state with the last cell's automatic checkpoint, which
    holds no probe results: a changed probe read "Verified". And a plain restore after a rewind brought back
    the rewind's "before" checkpoint instead of the user's own save."""
    with Kernel(store) as k:
        k.run("import os\nos.environ['MODE'] = 'a'\nx = 1")
        k.run("%gkews_checkpoint probe os.environ.get('MODE')")
        saved = k.call({"op": "save"})["result"]["id"]
        k.run("%gkews_checkpoint auto on")
        k.run("os.environ['MODE'] = 'b'\ny = 2")
        settle(k)
        out = k.run("%gkews_checkpoint verify")
        assert f"Checkpoint {saved}:" in out and "1 probe(s) differ: os.environ.get('MODE')" in out, out
        k.run("x = 5")
        k.run("%gkews_checkpoint restore")
        assert k.value("x") == 1  # the save's, not the last cell's automatic checkpoint


def test_verify_with_only_automatic_checkpoints_waits_for_the_last_cells(store):
    """Right after a cell changed a large array, verify compared with the previous cell's checkpoint (the
    writer had not written this one yet) and said it changed; a few seconds later, Verified."""
    with Kernel(store) as k:
        k.run("%gkews_checkpoint auto on")
        k.run("import numpy as np\nA = np.zeros(5_000_000)")
        settle(k)
        k.run("from kernel_state import auto; auto.AUTO.writer.hold()\nA += 1")
        k.run("import threading\nthreading.Timer(0.5, auto.AUTO.writer.release).start()")  # after verify began
        out = k.run("%gkews_checkpoint verify")
        assert "Verified" in out and "Not verified" not in out, out


@pytest.mark.parametrize("how", ["restore", "rewind"])
def test_an_interrupted_restore_or_rewind_changes_nothing_and_says_so(store, tmp_path, how):
    """An interrupt while the checkpoint was being loaded left the variables before the one being loaded
    restored and those after it not (a rewind half done), and said only KeyboardInterrupt."""
    gate = tmp_path / "gate"
    with Kernel(store) as k:
        k.run(SLOW_RESTORE.format(gate=str(gate)))
        k.run("x = 1\nslow = SlowRestore()\ny = 1")  # restored in this order: x, slow, y
        if how == "restore":
            k.run("%gkews_checkpoint save")
            command = "%gkews_checkpoint restore"
        else:
            k.run("%gkews_checkpoint auto on")
            k.run("z = 0")  # its own cell, with its own automatic checkpoint
            settle(k)
            command = f"%gkews_checkpoint rewind {k.value('get_ipython().execution_count') - 2}"
        k.run("x = 2\ny = 2\nlater = 3")
        # (stop_on_error=False: ipykernel would abort the next cell, sent moments after this one's error)
        msg_id = k.client.execute(command, stop_on_error=False)
        reached = tmp_path / "gate.reached"
        deadline = time.monotonic() + 120
        while not reached.exists():  # the restore is loading `slow`, after x and before y
            assert time.monotonic() < deadline, "the restore never reached the slow variable"
            time.sleep(0.05)
        k.km.interrupt_kernel()
        out = []
        while True:
            msg = k.client.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            if msg["msg_type"] == "error":
                assert msg["content"]["ename"] == "KeyboardInterrupt"
                break
        while k.client.get_shell_msg(timeout=60)["parent_header"].get("msg_id") != msg_id:
            pass  # its reply, before the next cell's
        assert f"Interrupted: the {how} changed nothing: the variables are as they were." in "".join(out), out
        assert k.value("[x, y, later]") == [2, 2, 3]
        gate.touch()
        k.run(command)  # not interrupted: done whole
        assert k.value("[x, y, 'later' in globals()]") == [1, 1, how == "restore"]


def test_rewind_to_a_cell_whose_checkpoint_retention_deleted_says_so(store):
    """It said "the next one replaced it" (a coalesced snapshot) for a checkpoint the automatic checkpoints'
    retention had deleted, whose fix is a larger GKEWS_AUTO_KEEP_LAST."""
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1", "GKEWS_AUTO_KEEP_LAST": "2"}) as k:
        for value in range(4):
            k.run(f"v = {value}")
            settle(k)
        first = k.value("get_ipython().execution_count") - 5  # the cell of "v = 0"
        out = k.run(f"%gkews_checkpoint rewind {first}", allow_error=True)
        assert "its automatic checkpoint was deleted since: automatic checkpoints keep the newest 2" in out, out
        assert "GKEWS_AUTO_KEEP_LAST" in out and "replaced" not in out, out


def test_after_a_resume_a_rewind_to_a_cell_retention_deleted_says_it_may_have_been_deleted(store):
    """After a resume, a cell of the kernel before the pause whose automatic checkpoint the retention had
    deleted was said to have had none taken ("automatic checkpoints were off then"), with no word of the
    setting that keeps more."""
    env = {"GKEWS_AUTO_CHECKPOINT": "1", "GKEWS_AUTO_KEEP_LAST": "2"}
    with Kernel(store, extra_env=env) as first:
        for value in range(4):
            first.run(f"v = {value}")
            settle(first)
        first_cell = first.value("get_ipython().execution_count") - 5  # the cell of "v = 0"
        assert first.call({"op": "save"})["ok"]  # what a pause does
    with Kernel(store, extra_env=env) as second:
        assert second.call({"op": "restore"})["ok"]  # what a resume does
        out = second.run(f"%gkews_checkpoint rewind {first_cell}", allow_error=True)
        assert f"cell [{first_cell}] ran before the resume" in out and "GKEWS_AUTO_KEEP_LAST" in out, out
        assert "were off then" not in out.split("deleted since")[0], out


def test_a_rewind_over_variables_no_checkpoint_holds_says_what_it_cannot_undo(store, tmp_path):
    """A variable that became an open file or a generator after cell [N] was replaced by the rewind without a
    word (listed as "came back"), though its undo cannot bring it back; one made after [N] stayed, unnamed."""
    log = tmp_path / "log.txt"
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1"}) as k:
        k.run("f = 5\ng = 0")
        settle(k)
        cell = k.value("get_ipython().execution_count") - 2
        k.run(f"f = open({str(log)!r}, 'w')\ng = (i for i in range(3))\nh = open({str(log)!r}, 'a')")
        settle(k)
        out = k.run(f"%gkews_checkpoint rewind {cell}")
        assert "changed: f, g" in out and "came back" not in out, out
        assert f"f, g held what no checkpoint can (f: an open file ({log}), g: a generator)" in out, out
        assert "undoing it cannot bring that back" in out and "left as they are, since no checkpoint holds them: h" \
            in out, out
        assert k.value("[f, g, type(h).__name__]") == [5, 0, "TextIOWrapper"]


def test_a_second_live_kernel_of_the_notebook_is_not_called_an_earlier_one(store):
    """Two kernels of one notebook (a second tab, a console): rewinding in the second to a cell only the first
    ran said it "ran in an earlier kernel ... before this kernel's restart", and left out why the second had
    none (its automatic checkpoints were off)."""
    with Kernel(store, extra_env={"GKEWS_AUTO_CHECKPOINT": "1"}) as first:
        first.run("x = 'first'")
        settle(first)
        cell = first.value("get_ipython().execution_count") - 2
        pid = first.value("__import__('os').getpid()")
        with Kernel(store) as second:
            second.run("%gkews_checkpoint auto off")
            out = second.run(f"%gkews_checkpoint rewind {cell}", allow_error=True)
            assert f"another kernel of this notebook that still runs (pid {pid}" in out, out
            assert "restart" not in out and "turn them on with %gkews_checkpoint auto on" in out, out
