"""Save in one real kernel, restore in a fresh one: what a notebook user checks."""
from __future__ import annotations

import json
import os

import pytest

import kernel_state
from kernels import Kernel

torch = pytest.importorskip("torch", reason="the torch extra is installed by make test")

BUILD = r'''
import numpy as np, torch
torch.manual_seed(0)
class Counter:
    def __init__(self, start): self.n = start
    def bump(self): self.n += 1; return self.n
def double(x): return 2 * x
class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
        self.head = torch.nn.Linear(16, 50, bias=False)
        self.head.weight = self.emb.weight
    def forward(self, ids): return self.head(self.body(self.emb(ids)))
model = Tied()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
ids = torch.arange(20) % 50
def step():
    opt.zero_grad(); loss = model(ids).logsumexp(-1).mean(); loss.backward(); opt.step(); return float(loss)
losses = [step() for _ in range(3)]
arr = np.random.default_rng(1).standard_normal((512, 256))
half = arr[:, ::2]
counter = Counter(41)
words = {"alpha": [1, 2, 3], "beta": (4.5, "x")}
gen = (i * i for i in range(10))
import socket, sqlite3, threading, time
sock = socket.socket()
db = sqlite3.connect(":memory:")
worker = threading.Thread(target=time.sleep, args=(30,), daemon=True); worker.start()
'''


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


def test_round_trip_in_a_fresh_kernel(store):
    first = Kernel(store)
    try:
        first.run(BUILD)
        out = first.run("%gkews_checkpoint save")
        assert "Saved checkpoint" in out
        assert "gen: TypeError: cannot pickle 'generator' object" in out
        lines = len(BUILD.strip("\n").splitlines())
        gen_line = BUILD.strip("\n").splitlines().index("gen = (i * i for i in range(10))") + 1
        assert f"re-run cell [1]: gen = (i * i for i in range(10)) (line {gen_line} of its {lines}: re-run the " \
               "whole cell)" in out
        assert "sock: TypeError: cannot pickle 'socket' object" in out
        assert "db: TypeError: cannot pickle 'sqlite3.Connection' object" in out
        assert "worker: TypeError: cannot pickle a running thread" in out
        assert "Skipped 4 (not saved):" in out
        # what the uninterrupted run does next
        expected = first.value("[step(), step(), model(ids).detach().tolist(), counter.bump(), double(21)]")
    finally:
        first.close()

    second = Kernel(store)
    try:
        assert second.run("print('model' in dir())").strip() == "False"
        out = second.run("%gkews_checkpoint restore")
        assert "Restored" in out and "Not restored" not in out
        assert "gen: TypeError" in out  # told what never came back, and which cell rebuilds it
        assert second.value("model.head.weight is model.emb.weight") is True
        assert second.value("all(p is q for p, q in zip(opt.param_groups[0]['params'], model.parameters()))")
        assert second.value("np.shares_memory(half, arr) and half.base is not None")
        assert second.value("[type(counter).__name__, isinstance(counter, Counter), words]") == [
            "Counter", True, {"alpha": [1, 2, 3], "beta": [4.5, "x"]}]
        got = second.value("[step(), step(), model(ids).detach().tolist(), counter.bump(), double(21)]")
        assert got == expected  # bit-identical losses and outputs: the optimizer state came back whole
    finally:
        second.close()


def test_long_saves_show_progress(store):
    k = Kernel(store, extra_env={"GKEWS_PROGRESS_AFTER": "0"})
    try:
        k.run("import torch\nlayers = [torch.randn(1 << 21) for _ in range(6)]\nmore = torch.randn(1 << 22)")
        out = k.run("%gkews_checkpoint save")
        assert "saving: 2/2 variables, " in out and "MiB written" in out
        assert "Saved checkpoint" in out
        # what the line shows in the end (its last update): it stayed at a count short of the whole
        assert out[out.rindex("saving: "):].startswith("saving: done, 64.0"), out
    finally:
        k.close()


def test_a_wrong_progress_setting_is_said_and_the_save_still_runs(store):
    """GKEWS_PROGRESS_AFTER=abc failed every save with "could not convert string to float: 'abc'", naming no
    setting; it only decides when the progress line shows. And one variable is "1 variable"."""
    k = Kernel(store, extra_env={"GKEWS_PROGRESS_AFTER": "abc"})
    try:
        k.run("x = 1")
        out = k.run("%gkews_checkpoint save")
        assert "GKEWS_PROGRESS_AFTER='abc' is not a number of seconds" in out, out
        assert ": 1 variable, " in out, out
        assert "Restored 1 variable from checkpoint" in k.run("%gkews_checkpoint restore")
    finally:
        k.close()


def test_many_tiny_tensors_show_progress_as_they_go(store):
    """20,000 tiny tensors: the progress said 0 B until the end, since small storages, packed into one blob,
    were never counted (their speed against torch.save is benchmarks/bench_checkpoint.py's "tiny tensors")."""
    k = Kernel(store, extra_env={"GKEWS_PROGRESS_AFTER": "0"})
    try:
        k.run("import torch\nts = [torch.randn(4) for _ in range(20000)]")
        out = k.run("%gkews_checkpoint save", timeout=300)
        assert "Saved checkpoint" in out, out
        assert "saving: 0/1 variables, " in out and "saving: 0/1 variables, 0 B" not in out, out
    finally:
        k.close()


def test_a_local_module_that_is_gone_says_where_it_came_from(tmp_path):
    """A module imported from beside the notebook was reported as 'install it': it is no package to
    install, but a folder to put on sys.path."""
    here = tmp_path / "project"
    here.mkdir()
    (here / "helpers_gkews.py").write_text("SCALE = 3\nclass Config:\n    depth = 2\n")
    with Kernel(tmp_path / "store", cwd=here) as first:
        first.run("import helpers_gkews, json\ncfg = helpers_gkews.Config()")  # an instance of its class too
        assert "Skipped" not in first.run("%gkews_checkpoint save")
    saved_in = here.resolve()
    here.rename(tmp_path / "moved")  # gone (a full restore enters the saved working directory, where it was)
    with Kernel(tmp_path / "store", cwd=tmp_path) as fresh:
        failed = fresh.call({"op": "restore", "notebook": "work/experiment.ipynb"})["result"]["failed"]
        assert sorted(failed) == ["cfg", "helpers_gkews"], failed
        for name in failed:  # the instance's reason was a bare "No module named 'helpers_gkews'"
            assert f"put {saved_in} on sys.path (or start the kernel there)" in failed[name], failed
            assert "install it" not in failed[name] and "install helpers" not in failed[name], failed
        assert fresh.value("json.__name__") == "json"


HELPERS = {
    "helpers_edit.py": "class Scaler:\n    def __call__(self, x): return 2 * x\n",
    "helpers_same.py": "def shift(x): return x + 1\n",
    "base_edit.py": "class Base:\n    def hello(self): return 'v1'\n",
    "tools/nsmod.py": "class Tool:\n    pass\n",  # a folder without __init__.py
    "dill_edit.py": "class D:\n    pass\n",
}
USES_HELPERS = """import json, helpers_same
from helpers_edit import Scaler
from tools.nsmod import Tool
scale, tool = Scaler(), Tool()
class Sub(__import__('base_edit').Base): pass
sub = Sub()
weird = (compile('1', 'x', 'eval'), __import__('dill_edit').D())
fns = [helpers_same.shift, json.dumps]"""


def test_a_restore_names_a_helper_module_edited_since_the_save(tmp_path):
    """A class of `helpers.py` beside the notebook, edited after the save: the restore imported today's file
    and the objects ran other code than they were saved with, without a word. It names each module edited
    since: one a value's class comes from, one in a folder without __init__.py, the base of a notebook class,
    one inside a variable only dill saves, and one the new kernel imported before the restore. An unedited
    one and an installed package are not named; a helper deleted since is said to be gone from its folder."""
    here = tmp_path / "project"
    for name, text in HELPERS.items():
        (here / name).parent.mkdir(parents=True, exist_ok=True)
        (here / name).write_text(text)
    with Kernel(tmp_path / "store", cwd=here) as first:
        first.run(USES_HELPERS)
        assert "Skipped" not in first.run("%gkews_checkpoint save")
        assert "changed since" not in first.run("%gkews_checkpoint restore")  # the kernel that saved
    for name in HELPERS:
        if name != "helpers_same.py":
            (here / name).write_text(HELPERS[name].replace("2 * x", "3 * x") + "EDITED = True\n")
    with Kernel(tmp_path / "store", cwd=here) as fresh:
        fresh.run("import helpers_edit")  # what it imported before the restore is today's code too
        out = fresh.run("%gkews_checkpoint restore")
        [warning] = [line for line in out.splitlines() if "changed since checkpoint" in line]
        edited = ("base_edit.py", "dill_edit.py", "helpers_edit.py", "tools/nsmod.py")
        named = [f"{f[:-3].replace('/', '.')} ({here / f})" for f in edited]
        assert warning.startswith(f"Warning: {', '.join(named)} changed since") and "as it is now" in warning, out
        assert fresh.value("scale(1)") == 3
    for name, text in HELPERS.items():
        (here / name).write_text(text)
    with Kernel(tmp_path / "store", cwd=here) as unedited:
        assert "changed since" not in unedited.run("%gkews_checkpoint restore")
    (here / "helpers_same.py").unlink()
    with Kernel(tmp_path / "store", cwd=here) as gone:
        failed = gone.call({"op": "restore", "notebook": "work/experiment.ipynb"})["result"]["failed"]
        assert "which no longer has it: put helpers_same back there" in failed["helpers_same"], failed


def test_magic_is_loaded_without_load_ext_and_explains_itself(store):
    k = Kernel(store)
    try:
        help_text = k.run("%gkews_checkpoint?")
        assert "save [NAMES...]" in help_text and "--device" in help_text
        out = k.run("%gkews_checkpoint sav", allow_error=True)
        assert "UsageError" in out and "invalid choice: 'sav'" in out
        out = k.run("%gkews_checkpoint", allow_error=True)  # it said "required: action, names"
        assert "UsageError: %gkews_checkpoint takes an action: save, restore" in out and "names" not in out, out
        out = k.run("%gkews_checkpoint restore --device tpu", allow_error=True)
        assert "UsageError" in out and "--device" in out
        out = k.run("%gkews_checkpoint restore", allow_error=True)
        assert "UsageError: no checkpoint for notebook 'work/experiment.ipynb'" in out
        out = k.run("%gkews_checkpoint save nothere", allow_error=True)
        assert "no variable named 'nothere'" in out
        # names argparse took and the action ignored, or named and excluded at once (x was left out silently)
        out = k.run("%gkews_checkpoint list extra", allow_error=True)
        assert "UsageError: list takes no names (got extra): %gkews_checkpoint list" in out, out
        k.run("x = 1")
        out = k.run("%gkews_checkpoint save x --exclude x", allow_error=True)
        assert "UsageError: x is both named and excluded" in out, out
        out = k.run("%gkews_checkpoint save --exclude xx")  # a typo: x was saved, not left out
        assert "Note: --exclude xx: no such variable in this kernel, so nothing was left out for it." in out, out
        # argparse kept the last of a repeated option: `--exclude a --exclude b` saved the a it was told to leave out
        k.run("big = 3")
        k.run("%gkews_checkpoint save --exclude x --exclude big")
        assert "without big, x" in k.run("%gkews_checkpoint list").splitlines()[1]
        out = k.run("%gkews_checkpoint restore --checkpoint A --checkpoint B", allow_error=True)
        assert "UsageError: --checkpoint was given twice (A and B): give it once" in out, out
        k.run("del big")
        # restore refuses a name the checkpoint lacks as save does, and restores nothing of the rest
        k.run("y = 2\n%gkews_checkpoint save")
        k.run("x = 10; y = 20")
        out = k.run("%gkews_checkpoint restore x yy", allow_error=True)
        assert "UsageError: checkpoint" in out and "has no variable named 'yy'; it holds: x, y" in out, out
        assert k.value("[x, y]") == [10, 20]
    finally:
        k.close()


def test_verify_says_why_not_and_what_it_does_not_cover(store):
    """A fresh kernel whose restored values all match is still not the live state: verify says why; a verified
    state names the variables the save never held (a generator), which no verify can cover."""
    with Kernel(store) as k:
        k.run("import numpy as np; a = np.arange(10); gen = (i for i in range(3))")
        k.run("%gkews_checkpoint save")
        out = k.run("%gkews_checkpoint verify")
        assert "Verified: the live state is the checkpointed state. Not covered (never saved): gen." in out
        pid = k.value("__import__('os').getpid()")
    with Kernel(store) as fresh:
        fresh.run("%gkews_checkpoint restore")
        out = fresh.run("%gkews_checkpoint verify")
        assert "2/2 variables bit-identical" in out  # a, and the module np
        fresh_pid = fresh.value("__import__('os').getpid()")
        assert f"Not verified: this kernel (pid {fresh_pid}) is not the process that took the checkpoint " \
               f"(pid {pid})" in out


def test_list_verify_probe_delete(store):
    k = Kernel(store)
    try:
        k.run("import torch; torch.manual_seed(3); net = torch.nn.Linear(300, 300); x = torch.ones(2, 300); "
              "note = 'kept'")
        assert "Probe recorded: net(x).sum().item() =" in k.run("%gkews_checkpoint probe net(x).sum().item()")
        k.run("%gkews_checkpoint save")
        k.run("%gkews_checkpoint save --exclude note")
        listing = k.run("%gkews_checkpoint list").splitlines()
        assert listing[0].split() == ["id", "created", "(UTC)", "size", "variables", "skipped"]
        assert len(listing) == 3
        out = k.run("%gkews_checkpoint verify")
        assert "same process" in out and "Verified" in out and "Not verified" not in out
        k.run("with torch.no_grad(): net.weight[0, 0] += 1")
        out = k.run("%gkews_checkpoint verify")
        assert "net: changed (1 of 2 tensors/arrays differ)" in out
        assert "probe net(x).sum().item(): differs" in out
        assert "Not verified: 1 variable(s) differ or are missing: net; 1 probe(s) differ: net(x).sum().item()." in out
        newest = listing[1].split()[0]
        assert f"Deleted checkpoint {newest}" in k.run(f"%gkews_checkpoint delete {newest}")
        assert len(k.run("%gkews_checkpoint list").splitlines()) == 2
    finally:
        k.close()

    fresh = Kernel(store)
    try:
        fresh.run("%gkews_checkpoint restore")
        result = fresh.call({"op": "verify"})
        assert result["ok"], result
        verdict = result["result"]
        assert verdict["same_process"] is False  # a new process: the identity token changed
        assert verdict["variables"]["net"]["verdict"] == "match"
        assert verdict["probes"][0]["verdict"] == "match"
    finally:
        fresh.close()


def test_json_api_answers_errors_as_json(store):
    k = Kernel(store)
    try:
        ident = k.call({"op": "identity"})["result"]
        assert ident["pid"] == k.value("__import__('os').getpid()")
        bad = k.call({"op": "restore", "checkpoint": "nope"})
        assert bad == {"ok": False, "type": "CheckpointNotFound",
                       "error": "checkpoint 'nope' does not exist for notebook 'work/experiment.ipynb': it has no "
                                f"checkpoint in {store} (deleted since, or another store)"}
        bad = k.call({"op": "restore"})
        assert bad["error"] == (f"no checkpoint for notebook 'work/experiment.ipynb' in {store}; save one with "
                                "%gkews_checkpoint save")
    finally:
        k.close()


def test_incremental_save_writes_almost_nothing_when_tensors_are_unchanged(store):
    k = Kernel(store)
    try:
        k.run("import torch, numpy as np\nbig = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)])\n"
              "table = np.zeros((2000, 1000))")
        first = k.call({"op": "save"})["result"]
        second = k.call({"op": "save"})["result"]
        assert first["bytes_written"] > 40e6
        assert second["bytes_written"] < 0.01 * first["bytes_written"]
        k.run("with torch.no_grad(): big[3].weight.mul_(2)")
        third = k.call({"op": "save"})["result"]
        # only the changed layer's weight is rewritten: 4 MiB of the 33 MiB model
        assert 4e6 < third["bytes_written"] < 5e6
    finally:
        k.close()


def test_corrupt_blob_fails_only_its_variables(store):
    k = Kernel(store)
    try:
        k.run("import numpy as np\na = np.arange(300000.0)\nb = np.ones(300000) * 7\nc = {'k': 1}")
        saved = k.call({"op": "save"})["result"]
    finally:
        k.close()
    manifest = json.loads((store / "notebooks").glob("*/manifests/*.json").__next__().read_text())
    blob_of_a = manifest["storages"][manifest["arrays"]["a0"]["buffer"]]["blob"]
    path = store / "blobs" / f"{blob_of_a}.safetensors"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))

    fresh = Kernel(store)
    try:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored (1):" in out
        assert f"a: blob {blob_of_a[:12]} does not match its hash" in out
        assert fresh.value("[float(b.sum()), c]") == [2100000.0, {"k": 1}]
        assert fresh.run("print('a' in dir())").strip() == "False"
    finally:
        fresh.close()
    assert saved["skipped"] == {}


def test_disk_full_keeps_the_previous_checkpoint(store):
    k = Kernel(store)
    try:
        k.run("import torch; w = torch.arange(1000.0)")
        k.run("%gkews_checkpoint save")
        k.run("import resource; _soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, _hard))\n"
              "big = torch.ones(4 << 20); w += 1")
        out = k.run("%gkews_checkpoint save", allow_error=True)
        assert "UsageError: could not write the checkpoint to" in out
        assert "the file size limit was reached" in out and "the checkpoints saved before it (if any) are intact" in out
        k.run("resource.setrlimit(resource.RLIMIT_FSIZE, (_soft, _hard))")
        assert len(k.run("%gkews_checkpoint list").splitlines()) == 2
        assert os.listdir(store / "tmp") == []
    finally:
        k.close()
    fresh = Kernel(store)
    try:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value("[float(w.sum()), 'big' in dir()]") == [499500.0, False]
    finally:
        fresh.close()


def test_private_names_are_saved_and_ipythons_history_only_when_named(tmp_path):
    """A full save left out every name starting with _: a pause dropped a user's `_cache` and `_df`, and
    `import math as _m` (a restored function using it raised NameError), without a word. IPython's output
    history (`_`, `_3`) is left out, and saved when named."""
    import math
    ns = {"_model_cache": {"w": [1, 2]}, "x": 1, "_m": math, "_": "last output", "_3": "an output"}
    full = kernel_state.save(ns, notebook="p.ipynb", root=tmp_path)
    assert sorted(full["saved"]) == ["_m", "_model_cache", "x"]
    named = kernel_state.save(ns, names=["_"], notebook="p.ipynb", root=tmp_path)
    assert named["saved"] == ["_"] and named["skipped"] == {}
    back = {}
    kernel_state.restore(back, notebook="p.ipynb", root=tmp_path, checkpoint=full["id"])
    assert back == {"_model_cache": {"w": [1, 2]}, "x": 1, "_m": math}


def test_lazily_conjugated_and_negated_views_come_back_with_their_values(tmp_path):
    """z.conj(), A.mH and z.conj().imag are views with a conj or neg bit: they came back without it, so with
    the other sign, and verify said match."""
    torch = pytest.importorskip("torch")
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    a = torch.tensor([[1 + 1j, 2j], [3, 4 - 1j]], dtype=torch.complex64)
    ns = {"z": z, "zc": z.conj(), "ah": a.mH, "im": z.conj().imag}
    kernel_state.save(ns, notebook="c.ipynb", root=tmp_path)
    back = {}
    kernel_state.restore(back, notebook="c.ipynb", root=tmp_path)
    for name, value in ns.items():
        assert torch.equal(back[name], value), name
    assert back["zc"].is_conj() and back["ah"].is_conj()
    verdicts = kernel_state.verify(back, notebook="c.ipynb", root=tmp_path)["variables"]
    assert {k: v["verdict"] for k, v in verdicts.items()} == dict.fromkeys(ns, "match")
    back["zc"] = back["zc"].resolve_conj().conj()  # the same bits stored, the other values
    assert kernel_state.verify(back, notebook="c.ipynb", root=tmp_path)["variables"]["zc"]["verdict"] == "changed"


def test_verify_names_what_the_checkpoint_does_not_hold(store):
    """After `save --exclude a`, a changed `a` and a new variable, verify said "Verified: the live state is
    the checkpointed state" and named neither."""
    with Kernel(store) as k:
        k.run("a = [1]\nb = 2")
        k.run("%gkews_checkpoint save --exclude a")
        k.run("a.append(3)\nnew_var = 4")
        out = k.run("%gkews_checkpoint verify")
        assert ("Verified: the live state is the checkpointed state. Not covered (not in the checkpoint: made "
                "since, or left out of its save): a, new_var.") in out, out


def test_a_restore_of_a_save_of_some_variables_says_it_holds_only_those(store):
    """`save w` made the newest checkpoint hold w alone; a plain restore in a new kernel brought back w and
    said nothing of the notebook's other variables, which an earlier checkpoint held."""
    k = Kernel(store)
    try:
        k.run("w = 1\nb = 2\ncfg = {'lr': 0.1}")
        k.run("%gkews_checkpoint save")
        k.run("w = 3")
        k.run("%gkews_checkpoint save w")
    finally:
        k.close()
    k = Kernel(store)
    try:
        out = k.run("%gkews_checkpoint restore")
        assert "Restored 1 variable from checkpoint" in out, out
        assert "holds only the variables its save named (w): the notebook's other variables are as they were; " \
               "an earlier checkpoint may hold them" in out, out
        assert "holds only" not in k.run("%gkews_checkpoint restore w")  # asked for by name: nothing to add
    finally:
        k.close()


def test_saves_of_some_variables_never_retire_the_last_whole_checkpoint(store):
    """A whole save holding the model, then more `save results` than GKEWS_KEEP_LAST keeps: retention retired
    the only checkpoint that held the model, and a new kernel could not get it back. The newest whole one stays
    (and so does one saved with --exclude: it lacks what it left out); the list marks the partial saves, and a
    restore of an --exclude save says what it left as it was."""
    k = Kernel(store, extra_env={"GKEWS_KEEP_LAST": "2"})
    try:
        k.run("import numpy as np\nweights = np.arange(1000.0)\nresults = []")
        k.run("%gkews_checkpoint save")
        for i in range(4):
            k.run(f"results.append({i})")
            k.run("%gkews_checkpoint save results")
        k.run("%gkews_checkpoint save --exclude weights")
        listed = k.run("%gkews_checkpoint list")
    finally:
        k.close()
    rows = [line for line in listed.splitlines()[1:] if line.strip()]
    assert len(rows) == 3, listed  # the two newest, and the whole one
    assert "without weights" in rows[0] and "only results" in rows[1], listed
    assert "only" not in rows[2] and "without" not in rows[2], listed
    k = Kernel(store)
    try:
        out = k.run("%gkews_checkpoint restore")
        assert "was saved with --exclude weights: that variable is as it was" in out, out
        assert "NameError" in k.run("weights", allow_error=True)
        whole = rows[2].split()[0]
        out = k.run(f"%gkews_checkpoint restore --checkpoint {whole}")
        assert "Restored" in out, out
        assert k.run("print(weights.sum(), results)").strip() == "499500.0 []"
    finally:
        k.close()


def test_the_restore_command_a_deleted_notebook_s_status_gives_works_for_a_path_with_spaces(store):
    """The status of a notebook deleted while paused says which command brings its variables back in another
    notebook; for `with space/my nb.ipynb` it failed as given ("unrecognized arguments: space/my nb.ipynb"),
    and quoted, the quotes became part of the name: no spelling of it worked."""
    from jupyter_gkews.lifecycle.resume import mark_lost
    with Kernel(store, notebook="with space/my nb.ipynb") as k:
        k.run("secret = 'kept'")
        cid = k.value("__import__('kernel_state').save(notebook='with space/my nb.ipynb')['id']")
    nb = {"path": "with space/my nb.ipynb", "checkpoint": cid}
    mark_lost(nb, "so no kernel will be started for it")
    command = nb["next_step"].split("in another notebook run ", 1)[1]
    assert command == f'%gkews_checkpoint restore --notebook "with space/my nb.ipynb" --checkpoint {cid}', command
    with Kernel(store, notebook="rescue.ipynb") as k:
        out = k.run(command)
        assert "Restored 1 variable" in out, out
        assert k.value("secret") == "kept"
        out = k.run('%gkews_checkpoint list --notebook "with space/my nb.ipynb')
        assert "UsageError: No closing quotation" in out and 'in double quotes' in out, out


def test_what_a_restore_could_not_bring_back_is_named_by_later_saves_and_its_checkpoint_kept(store, tmp_path):
    """A restore failed for `results` (its class's module was not importable there); the saves after it held
    the rest without a word, and after GKEWS_KEEP_LAST of them retention deleted the only checkpoint holding
    `results`. Now each later save names it as skipped, with the checkpoint that holds it, which retention keeps;
    once the module is back, the command the message gives brings it back."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "helpers2.py").write_text("class Box:\n    def __init__(self, v): self.v = v\n")
    with Kernel(store, cwd=project) as k:
        k.run("from helpers2 import Box\nresults = Box([1, 2, 3])")
        saved = k.value("__import__('kernel_state').save()['id']")
    (project / "helpers2.py").rename(project / "helpers2_moved.py")
    with Kernel(store, cwd=project, extra_env={"GKEWS_KEEP_LAST": "2"}) as k:
        out = k.run("%gkews_checkpoint restore")
        assert "Not restored (2)" in out and "results" in out, out
        k.run("other = 0")
        for _ in range(4):
            out = k.run("%gkews_checkpoint save")
        assert f"results: not restored from checkpoint {saved} (" in out, out
        assert f"once fixed, %gkews_checkpoint restore results --checkpoint {saved}" in out, out
        listed = k.run("%gkews_checkpoint list")
        assert saved in listed, listed  # retention kept it beside the two newest
        (project / "helpers2_moved.py").rename(project / "helpers2.py")
        out = k.run(f"%gkews_checkpoint restore results Box --checkpoint {saved}")
        assert "Restored 2 variables" in out, out
        assert k.value("results.v") == [1, 2, 3]
        k.run("%gkews_checkpoint save")
        k.run("%gkews_checkpoint save")  # not said any more: the old checkpoint is left to retention
        assert saved not in k.run("%gkews_checkpoint list")


def test_a_name_the_newest_checkpoint_lacks_is_found_in_an_earlier_one_and_a_made_module_is_skipped(store):
    """After `save données`, `restore données C` said only "has no variable named 'C'", though the checkpoint
    before held C; and a module made in the notebook (types.ModuleType) was saved by its name, which a restore
    could not import ("install mymod and restore again")."""
    with Kernel(store) as k:
        k.run("import types\nclass C:\n    pass\ndonnées = 1\nmod = types.ModuleType('mymod')")
        out = k.run("%gkews_checkpoint save")
        assert "mod: module mymod was made in this kernel (types.ModuleType), not imported" in out, out
        whole = k.value("__import__('kernel_state').list_checkpoints()[0]['id']")
        k.run("données = 2\n%gkews_checkpoint save données")
        out = k.run("%gkews_checkpoint restore données C", allow_error=True)
        assert f"has no variable named 'C'; it holds: données; checkpoint {whole} holds C: %gkews_checkpoint " \
               f"restore C --checkpoint {whole}" in out, out
        assert "Restored 1 variable" in k.run(f"%gkews_checkpoint restore C --checkpoint {whole}")
