"""A restore writes nowhere outside the checkpoint store: live resources, and values whose pickle would open or
delete files, are skipped, named with the cell that made them, and the files they point at keep their bytes and
their mtime."""
from __future__ import annotations

import os

from kernels import Kernel


def _state(paths):
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in paths}


def test_live_resources_are_skipped_and_their_files_untouched(tmp_path):
    store, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    log, data, appended = outside / "train.log", outside / "data.bin", outside / "append.txt"
    data.write_bytes(os.urandom(4096))
    appended.write_text("kept\n")
    build = f'''
import os, socket, threading, subprocess, tempfile, mmap, time
log = open({str(log)!r}, "w"); log.write("epoch 1\\n"); log.flush()
reader = open({str(data)!r}, "rb")
appender = open({str(appended)!r}, "a")
sock = socket.socket()
_r, _w = os.pipe(); pipe = os.fdopen(_w, "w")
lock = threading.Lock(); rlock = threading.RLock(); cond = threading.Condition()
worker = threading.Thread(target=time.sleep, args=(60,), daemon=True); worker.start()
done_worker = threading.Thread(target=len, args=((),), name="loader"); done_worker.start(); done_worker.join()
child = subprocess.Popen(["sleep", "60"])
scratch = tempfile.TemporaryDirectory(dir={str(outside)!r})
mapped = mmap.mmap(reader.fileno(), 0, access=mmap.ACCESS_READ)
holder = {{"log": log, "epochs": 1}}
kept = [1, 2, 3]
with open({str(data)!r}, "rb") as done: head = done.read(2)
'''
    with Kernel(store) as first:
        first.run(build)
        scratch = first.value("scratch.name")
        before = _state([log, data, appended])
        out = first.run("%gkews_checkpoint save")
        reasons = {
            "log": f"cannot pickle 'TextIOWrapper' object: an open file ({log}) is a live resource",
            "reader": f"cannot pickle 'BufferedReader' object: an open file ({data}) is a live resource",
            "appender": f"an open file ({appended}) is a live resource",
            "sock": "cannot pickle 'socket' object: an open socket is a live resource",
            "pipe": "cannot pickle 'TextIOWrapper' object:",
            "lock": "cannot pickle 'lock' object: a lock",
            "rlock": "cannot pickle 'RLock' object: a lock",
            "cond": "cannot pickle 'RLock' object: a lock",
            "worker": "cannot pickle a running thread",
            "done_worker": "cannot pickle a thread (loader, finished): a Thread object holds live locks",  # "a lock"
            "child": "cannot pickle 'Popen' object: a child process is a live resource",
            "scratch": "cannot pickle 'TemporaryDirectory' object: a temporary file or directory",
            "mapped": "cannot pickle 'mmap' object: a memory map",
            "holder": f"an open file ({log})",
            "done": f"a closed file ({data}): file objects are never saved",  # it said "an open file"
        }
        for name, reason in reasons.items():
            line = next((x for x in out.splitlines() if x.startswith(f"  {name}: TypeError: ")), "")
            assert reason in line, (name, out)
            assert "; re-run cell [1]: " in line, line
        assert "re-run cell [1]: log = open(" in out and f"Skipped {len(reasons)} (not saved):" in out
        assert _state([log, data, appended]) == before
        out = first.run("%gkews_checkpoint restore")  # in the same kernel
        assert "Not restored" not in out and "Never saved (re-run these cells):" in out
        assert _state([log, data, appended]) == before
    before = _state([log, data, appended])

    with Kernel(store) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out and "  log: TypeError: cannot pickle 'TextIOWrapper'" in out
        assert fresh.value("[kept, 'log' in dir(), 'scratch' in dir()]") == [[1, 2, 3], False, False]
        fresh.run("import gc; gc.collect()")
        assert _state([log, data, appended]) == before
        assert log.read_text() == "epoch 1\n"
        assert os.path.isdir(scratch)


def test_definitions_holding_an_open_file_are_skipped_and_the_file_untouched(tmp_path):
    """A notebook function or class is pickled by value: an open file in its defaults, its closure or a
    class attribute would be re-opened by a restore (mode 'w' empties it). Each is skipped instead."""
    store, log = tmp_path / "store", tmp_path / "results.log"
    with Kernel(store) as first:
        first.run(f'''
log = open({str(log)!r}, "w"); log.write("precious results\\n"); log.flush()
def record(msg, f=log): f.write(msg)
def make():
    fh = log
    def write(msg): fh.write(msg)
    return write
writer = make()
class Logger:
    fh = log
def clean(x): return x + 1
''')
        before = _state([log])
        out = first.run("%gkews_checkpoint save")
        for name in ("record", "writer", "Logger"):
            line = next((x for x in out.splitlines() if x.startswith(f"  {name}: TypeError: ")), "")
            assert f"an open file ({log}) is a live resource" in line, (name, out)
        assert "clean" not in out.split("Skipped")[1]
        out = first.run("%gkews_checkpoint restore")
        assert "Not restored" not in out
        assert _state([log]) == before
    with Kernel(store) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out
        assert fresh.value("[clean(1), 'record' in dir(), 'Logger' in dir()]") == [2, False, False]
        fresh.run("import gc; gc.collect()")
        assert _state([log]) == before and log.read_text() == "precious results\n"


def _shelf_keys(path) -> list:
    import shelve
    with shelve.open(str(path), "r") as shelf:
        return sorted(shelf.keys())


def test_shelves_and_shared_memory_are_live_resources(tmp_path):
    """A restored dbm.dumb shelf rewrote its index on close (keys written after the checkpoint were
    gone from disk); a restored SharedMemory re-attached the owner's segment and unlinked it at exit."""
    store, shelf = tmp_path / "store", tmp_path / "results"
    with Kernel(store) as first:
        first.run(f'''
import shelve
from multiprocessing import shared_memory
sh = shelve.open({str(shelf)!r}); sh["k1"] = 1
segment = shared_memory.SharedMemory(create=True, size=4096)
kept = {{"epochs": 3}}
''')
        name = first.value("segment.name")
        out = first.run("%gkews_checkpoint save")
        assert "  sh: TypeError: cannot pickle 'DbfilenameShelf' object: an open shelf" in out, out
        assert f"  segment: TypeError: cannot pickle 'SharedMemory' object: a shared memory segment ({name})" in out
        first.run('sh["k2"] = 2; sh.close()')
        assert _shelf_keys(shelf) == ["k1", "k2"]
        with Kernel(store) as fresh:
            out = fresh.run("%gkews_checkpoint restore")
            assert "Not restored" not in out and fresh.value("[kept, 'sh' in dir()]") == [{"epochs": 3}, False]
            fresh.km.shutdown_kernel(now=False)  # a graceful exit runs the atexit and finalizers
        assert _shelf_keys(shelf) == ["k1", "k2"]
        assert os.path.exists(f"/dev/shm/{name.lstrip('/')}")
        first.run("segment.close(); segment.unlink()")


def test_the_cell_that_made_a_skipped_value_is_found_parsing_each_cell_once(monkeypatch):
    """Each skipped name parsed the whole history again, newest first, at every save: a session of 1000
    cells holding six live resources spent 1.4 s of every cell's automatic checkpoint there, and 3000
    generators made a pause take minutes. Each cell's source is parsed once now."""
    import ast
    import types

    from kernel_state import history
    parsed = []
    real = ast.parse
    monkeypatch.setattr(history.ast, "parse", lambda source, *a, **k: parsed.append(source) or real(source, *a, **k))
    cells = [""] + [f"v{i} = {i}\nw{i} = [v{i}] * 2" for i in range(1000)]
    cells[3] = "log = open('train.log')\ngen = (i for i in range(3))"
    shell = types.SimpleNamespace(history_manager=types.SimpleNamespace(input_hist_parsed=cells))
    for _save in range(3):
        found = [history.defining_cell(shell, name) for name in ("log", "gen", "lock", "sock", "ev", "cond")]
    assert found[1] == {"cell": 3, "source": "gen = (i for i in range(3))", "line": 2, "lines": 2}
    assert found[2] is None and len(parsed) <= 1000, len(parsed)


VICTIM = {"path": ""}


class Truncates:
    """A value whose pickle calls io.open(path, "w") as it loads: every restore emptied that file."""

    def __reduce__(self):
        import io
        return (io.open, (VICTIM["path"], "w"))


class Removes:
    def __reduce__(self):
        return (os.remove, (VICTIM["path"],))


def test_a_value_whose_pickle_opens_or_deletes_a_file_is_never_saved_nor_loaded(tmp_path, monkeypatch):
    import functools
    import pathlib
    import kernel_state
    from kernel_state import resources
    victim = tmp_path / "results.csv"
    victim.write_text("epoch,loss\n1,0.5\n")
    VICTIM["path"] = str(victim)
    ns = {"truncates": Truncates(), "removes": Removes(), "opener": functools.partial(open, str(victim), "w"),
          "writer": pathlib.Path(victim).write_text, "reader": pathlib.Path(victim).read_text,
          "where": pathlib.Path(victim), "kept": [1, 2]}
    saved = kernel_state.save(ns, notebook="a.ipynb", root=str(tmp_path / "store"))
    assert saved["saved"] == ["reader", "where", "kept"], saved
    reasons = {name: info["reason"] for name, info in saved["skipped"].items()}
    assert "io.open could open, write or delete a file (or start a process) outside the checkpoint store" \
           in reasons["truncates"], reasons
    assert "posix.remove could" in reasons["removes"] or "nt.remove could" in reasons["removes"], reasons
    assert "io.open could" in reasons["opener"] and "pathlib.Path.write_text could" in reasons["writer"], reasons

    # a checkpoint that holds one anyway (an earlier version's, or made by hand): refused where its pickle names
    # it, before anything is called
    monkeypatch.setattr(resources, "outside_call", lambda module, name, obj: False)
    kernel_state.save({"truncates": Truncates(), "kept": [3]}, notebook="b.ipynb", root=str(tmp_path / "store"))
    monkeypatch.undo()
    back = {}
    result = kernel_state.restore(back, notebook="b.ipynb", root=str(tmp_path / "store"))
    assert back == {"kept": [3]} and victim.read_text() == "epoch,loss\n1,0.5\n", back
    assert "its pickle names io.open could open, write or delete a file" in result["failed"]["truncates"], result


def test_the_refusals_a_notebook_meets_most_say_what_to_keep_instead(tmp_path):
    """A memoryview, an SQLite connection, a DataLoader's iterator and get_ipython() were skipped with the
    pickler's own words ("cannot pickle memoryview objects", "('{} cannot be pickled',
    '_SingleProcessDataLoaderIter')"); the shell's even named an SQLite connection (its history database)."""
    from kernels import Kernel
    with Kernel(tmp_path) as k:
        out = k.run("import sqlite3, torch\nmv = memoryview(b'abc')\nip = get_ipython()\n"
                    "conn = sqlite3.connect(':memory:')\n"
                    "it = iter(torch.utils.data.DataLoader(list(range(10)), batch_size=2))\n%gkews_checkpoint save")
        assert "mv: TypeError: cannot pickle memoryview objects (a memoryview: keep the bytes, bytearray or array " \
               "it views instead, which is saved)" in out, out
        assert "ip: TypeError: IPython's own shell (get_ipython()) is the kernel itself, never saved; call " \
               "get_ipython() again after a restore" in out, out
        assert "conn: TypeError: cannot pickle 'sqlite3.Connection' object (an SQLite connection or cursor: the " \
               "database's tables are not saved with it" in out, out
        assert "(a DataLoader's iterator (iter(loader)): the DataLoader itself is saved, but not how far this epoch " \
               "had got: iter() on it after a restore starts a new epoch" in out, out
