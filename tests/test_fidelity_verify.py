"""verify compares values: right after a correct restore every variable matches, in fresh process after
fresh process, and one changed weight or element is still found."""
from __future__ import annotations

import struct

import pytest

from kernels import Kernel

torch = pytest.importorskip("torch")

BUILD = r'''
import numpy as np, torch, collections
torch.manual_seed(1)
class Frame:
    """DataFrame-like: named columns of arrays over an index."""
    def __init__(self, columns, index):
        self.columns = dict(columns); self.index = list(index)
    def mean(self, name): return float(self.columns[name].mean())
class Point:
    __slots__ = ("x", "y")
    def __init__(self, x, y): self.x, self.y = x, y
def scale(v, k=2.0): return v * k
def make_adder(n):
    def add(v): return v + n
    return add
adder = make_adder(7)
square = lambda v: v * v
tags = {"alpha", "beta", "gamma", "delta", "epsilon"}
frozen = frozenset({"x", "yy", "zzz", ("t", 1)})
nested = {"sets": [tags, frozen], "by_name": {f"key{i}": i * 0.5 for i in range(50)}, "point": Point(1, 2)}
halves = np.linspace(-2, 2, 1000, dtype=np.float16)
singles = np.linspace(-2, 2, 50000, dtype=np.float32)         # above the inline size: the array table
complexes = (np.arange(400) * (1 + 0.5j)).astype(np.complex128)
frame = Frame({"a": np.arange(100.0), "b": np.ones(100, dtype=np.float32),
               "c": np.array(["u", "v"] * 50, dtype=object)},
              index=[f"row{i}" for i in range(100)])
counts = collections.Counter("mississippi")
ordered = collections.OrderedDict(b=1, a=2)
model = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.ReLU(), torch.nn.Linear(30, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(4, 20)).sum().backward(); opt.step()
mixed = {1: "one", "two": 2.0, (3, "three"): None, 4.5: b"bytes", True: [1, 2]}
'''

VERIFY = "{n: v['verdict'] for n, v in __import__('kernel_state').verify()['variables'].items()}"


def _all_match(verdicts: dict) -> list:
    return [f"{n}: {v}" for n, v in verdicts.items() if v != "match"]


def test_verify_matches_after_restore_in_fresh_processes_and_finds_one_change(tmp_path):
    with Kernel(tmp_path) as first:
        first.run(BUILD)
        first.run("%gkews_checkpoint save")
        verdicts = first.value(VERIFY)
        assert len(verdicts) > 20 and _all_match(verdicts) == []
        assert "Verified: the live state is the checkpointed state." in first.run("%gkews_checkpoint verify")

    for run in range(2):  # run after run, each in a new process (new string hash salt)
        with Kernel(tmp_path) as fresh:
            assert "Not restored" not in fresh.run("%gkews_checkpoint restore")
            assert _all_match(fresh.value(VERIFY)) == [], f"run {run}"
            assert _all_match(fresh.value(VERIFY)) == [], f"run {run}, verified twice"
            if run == 1:
                fresh.run("with torch.no_grad(): model[2].weight[3, 4] += 2 ** -20")
                fresh.run("halves[517] = np.float16(0.125)")
                fresh.run("tags.discard('gamma'); tags.add('gammb')")
                fresh.run("frame.columns['a'][42] = -1.0")
                fresh.run("adder = make_adder(8)")
                verdicts = fresh.value(VERIFY)
                # nested holds the variable `tags` whole (changed with it), and opt holds the model's weights
                assert sorted(n for n, v in verdicts.items() if v != "match") == \
                    ["adder", "frame", "halves", "model", "nested", "opt", "tags"]
                out = fresh.run("%gkews_checkpoint verify")
                assert "model: changed (1 of 8 tensors/arrays differ)" in out


def test_values_verify_cannot_walk_are_saved_and_compared_by_their_pickle(tmp_path):
    """A small datetime64 array, a meta tensor, a nested tensor and a 5000-digit int made the whole save
    fail (so a pause failed); each is now saved, restored, and verify still sees a change to one."""
    with Kernel(tmp_path) as first:
        first.run("import numpy as np, torch\n"
                  "days = np.array(['2026-11-30', '2026-12-01'], dtype='datetime64[D]')\n"
                  "waits = [np.array([5, 7], dtype='timedelta64[s]')]\n"
                  "shape_only = torch.nn.Linear(4, 4, device='meta')\n"
                  "ragged = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])\n"
                  "big = 10 ** 5000\nw = torch.arange(6.0)")
        out = first.run("%gkews_checkpoint save")
        # the last line: a save that runs over a second (a loaded machine) shows its progress first
        assert out.splitlines()[-1].startswith("Saved checkpoint") and "skipped" not in out.lower(), out
    with Kernel(tmp_path) as fresh:
        fresh.run("import numpy as np, torch\n%gkews_checkpoint restore")
        assert fresh.value("[str(days.dtype), days.tolist() == [np.datetime64('2026-11-30'), "
                           "np.datetime64('2026-12-01')], waits[0].astype(int).tolist(), "
                           "shape_only.weight.device.type, [t.tolist() for t in ragged.unbind()], "
                           "big == 10 ** 5000, w.tolist()]") == \
            ["datetime64[D]", True, [5, 7], "meta", [[1.0, 1.0], [1.0, 1.0, 1.0]], True, [0, 1, 2, 3, 4, 5]]
        verdicts = fresh.call({"op": "verify"})["result"]["variables"]
        assert {k: v["verdict"] for k, v in verdicts.items() if k not in ("np", "torch")} == dict.fromkeys(
            ["days", "waits", "shape_only", "ragged", "big", "w"], "match"), verdicts
        fresh.run("days[1] = np.datetime64('2027-01-01')\nbig += 1")
        verdicts = fresh.call({"op": "verify"})["result"]["variables"]
        assert sorted(k for k, v in verdicts.items() if v["verdict"] != "match") == ["big", "days"], verdicts


def test_verify_and_probes_compare_values_in_a_fresh_kernel(tmp_path):
    """A storage variable and a probe of a set match after a restore in another process (neither a
    torch.save archive nor a set's hash order is compared); a masked array's mask is part of its value;
    a probe whose value has a failing repr is recorded and checked; `probe --remove` stops one."""
    with Kernel(tmp_path) as first:
        first.run("""
import numpy as np, torch
t = torch.arange(10.0)
st = t.untyped_storage()
m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 0, 0])
words = ["alpha", "beta", "gamma", "delta"]
class Odd:
    def __repr__(self): raise RuntimeError("no repr")
odd = Odd()
""")
        first.run("%gkews_checkpoint probe set(words)")
        assert "Probe recorded: odd = <Odd object: repr failed with RuntimeError>" in \
            first.run("%gkews_checkpoint probe odd")
        first.run("%gkews_checkpoint save")
        first.run("m[1] = np.ma.masked")
        verdicts = first.call({"op": "verify"})["result"]["variables"]
        assert verdicts["m"]["verdict"] == "changed"
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        result = fresh.call({"op": "verify"})["result"]
        assert {n: v["verdict"] for n, v in result["variables"].items() if n not in ("np", "torch")} == \
            {"t": "match", "st": "match", "m": "match", "words": "match", "Odd": "match", "odd": "match"}
        assert {p["expr"]: p["verdict"] for p in result["probes"]} == {"set(words)": "match", "odd": "match"}
        assert "Probe removed: odd." in fresh.run("%gkews_checkpoint probe --remove odd")
        assert "no probe 'odd' is recorded" in fresh.run("%gkews_checkpoint probe --remove odd", allow_error=True)
        assert "probe --remove takes the expression to stop re-checking" in fresh.run(
            "%gkews_checkpoint probe --remove", allow_error=True)  # it said "no probe '' is recorded"
        assert fresh.run("%gkews_checkpoint probe").strip() == "probes: set(words)"


def test_a_damaged_probe_file_is_named_never_written_over(tmp_path):
    """A damaged probes.json read as "no probes": saves dropped them silently and the next probe wrote
    over the others."""
    with Kernel(tmp_path) as k:
        k.run("x = 1\ny = 2")
        k.run("%gkews_checkpoint probe x + 1")
        probes = next(tmp_path.glob("notebooks/*/probes.json"))
        probes.write_text('{"probes": ["x + 1", ')
        out = k.run("%gkews_checkpoint probe y", allow_error=True)
        assert f"the probe file {probes} is damaged" in out and "delete it and add the probes again" in out, out
        assert probes.read_text() == '{"probes": ["x + 1", '
        k.run("%gkews_checkpoint save")
        verified = k.call({"op": "verify"})["result"]["probes"]
        assert verified[0]["verdict"] == "not-recorded" and f"the probe file {probes} is damaged" in \
            verified[0]["detail"], verified
        assert "is damaged" in k.run("%gkews_checkpoint probe", allow_error=True)


def test_a_probe_that_raises_is_said_in_a_line_and_not_recorded(tmp_path):
    """`probe 1/0` printed a traceback through the magic's own frames, ending in "Could not get source"."""
    with Kernel(tmp_path) as k:
        k.run("x = 1")
        out = k.run("%gkews_checkpoint probe 1/0", allow_error=True)
        assert "probe '1/0' raised ZeroDivisionError: division by zero; it was not recorded" in out, out
        assert "define what it uses first, then add it again" in out and "magic.py" not in out, out
        out = k.run("%gkews_checkpoint probe undefined_name + 1", allow_error=True)
        assert "raised NameError: name 'undefined_name' is not defined" in out, out
        assert "No probes" in k.run("%gkews_checkpoint probe")
        assert k.call({"op": "probe", "expr": "x / 0"})["error"].startswith("probe 'x / 0' raised ZeroDivisionError")


def _changed(result: dict) -> list:
    return sorted(n for n, v in result["variables"].items() if v["verdict"] != "match")


def test_probes_of_zero_dim_tensors_compare_their_values(tmp_path):
    """A 0-d tensor (BatchNorm's num_batches_tracked, a loss) or a conjugate view made the walk fail: the
    probe fell back to the first 200 characters of its repr, so it matched after the weights changed; a
    variable holding a set and a conjugate view read as changed after every restore."""
    with Kernel(tmp_path) as first:
        first.run("import torch\ntorch.manual_seed(0)\n"
                  "net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))\n"
                  "loss = torch.tensor(0.12)\n"
                  "both = {'s': {'alpha', 'beta', 'gamma'}, 'c': torch.tensor([1 + 2j, 3 - 1j]).conj(),\n"
                  "        'n': torch.tensor([1 + 2j]).conj().imag}")
        first.run("%gkews_checkpoint probe net.state_dict()")
        first.run("%gkews_checkpoint probe {'loss': loss}")
        assert "Skipped" not in first.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        assert "Not restored" not in fresh.run("%gkews_checkpoint restore")
        result = fresh.call({"op": "verify"})["result"]
        assert _changed(result) == [] and {p["verdict"] for p in result["probes"]} == {"match"}, \
            (result["variables"], result["probes"])
        fresh.run("with torch.no_grad(): net[1].running_var[2] += 1e-6\nloss += 1e-6\nboth['n'][0] = 5")
        result = fresh.call({"op": "verify"})["result"]
        assert [p["verdict"] for p in result["probes"]] == ["differs", "differs"], result["probes"]
        assert _changed(result) == ["both", "loss", "net"], result["variables"]


def test_verify_sees_field_names_bound_objects_and_nan_payloads(tmp_path):
    """What the digest left out: a structured array's field names and types (every 16-byte record was
    '|V16'), the object a builtin method is bound to, and which NaN a float or complex is."""
    with Kernel(tmp_path) as first:
        first.run("import numpy as np, random, struct, math\n"
                  "rec = np.zeros(3, dtype=[('lat', 'f8'), ('lon', 'f8')])\n"
                  "pts = np.zeros(3, dtype=[('x', 'f8'), ('y', 'f8')])\n"
                  "draw, push = random.Random(5).random, [1, 2, 3].append\n"
                  "def nan(bits): return struct.unpack('<d', struct.pack('<Q', bits))[0]\n"
                  "quiet, signed, pair = nan(0x7ff8000000000001), math.nan, complex(1.0, math.nan)")
        first.run("%gkews_checkpoint probe rec")
        assert "Skipped" not in first.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        assert "Not restored" not in fresh.run("%gkews_checkpoint restore")
        result = fresh.call({"op": "verify"})["result"]
        assert _changed(result) == [] and result["probes"][0]["verdict"] == "match", result
        fresh.run("rec.dtype.names = ('lon', 'lat')\npts = pts.view([('a', 'i8'), ('y', 'f8')])\n"
                  "draw(); push(99)\n"
                  "quiet, signed, pair = nan(0x7ff8000000000002), -math.nan, complex(1.0, -math.nan)")
        result = fresh.call({"op": "verify"})["result"]
        assert _changed(result) == ["draw", "pair", "pts", "push", "quiet", "rec", "signed"], result["variables"]
        assert result["probes"][0]["verdict"] == "differs"


def test_set_subclasses_and_huge_ints_match_after_a_restore_in_a_fresh_kernel(tmp_path):
    """A set subclass's reduction lists its strings in the process's hash order, and an int over 4300
    digits made the digest fail (verify then compared pickles, whose sets follow that order too): both
    read as changed after every restore into a fresh kernel. A change to either is still found."""
    with Kernel(tmp_path) as first:
        first.run("import math\nclass Tags(set):\n    pass\nclass Names(frozenset):\n    pass\n"
                  "tags = Tags({'alpha', 'beta', 'gamma', 'delta'}); tags.owner = 'me'\n"
                  "names = Names({'x', 'yy', 'zzz', 'wwww'})\n"
                  "fact = {'value': math.factorial(2000), 'tags': {'alpha', 'beta', 'gamma'}}\n"
                  "ids = Tags({1, 2, 3})")
        assert "Skipped" not in first.run("%gkews_checkpoint save")
    for run in range(2):  # each in a new process: a new string hash salt
        with Kernel(tmp_path) as fresh:
            assert "Not restored" not in fresh.run("%gkews_checkpoint restore")
            assert _changed(fresh.call({"op": "verify"})["result"]) == [], f"run {run}"
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        fresh.run("tags.owner = 'you'\nfact['value'] += 1\nids.add(4)")
        assert _changed(fresh.call({"op": "verify"})["result"]) == ["fact", "ids", "tags"]
        fresh.run("tags.owner = 'me'\nfact['value'] -= 1\nids.discard(4)\nnames = Names({'x', 'yy', 'zzz'})")
        assert _changed(fresh.call({"op": "verify"})["result"]) == ["names"]


def test_a_memmap_restored_as_a_copy_says_so_in_verify(tmp_path):
    """An np.memmap whose file changed comes back as an in-memory copy of the saved data: verify said
    "its value or structure differs" although every byte was the checkpoint's."""
    store = tmp_path / "store"
    with Kernel(store) as first:
        first.run(f"import numpy as np\n"
                  f"small = np.memmap({str(tmp_path / 'small.f4')!r}, dtype='f4', mode='w+', shape=(100,))\n"
                  f"big = np.memmap({str(tmp_path / 'big.f8')!r}, dtype='f8', mode='w+', shape=(100000,))\n"
                  f"small[:] = 2; big[:] = 3; small.flush(); big.flush()")
        assert "Skipped" not in first.run("%gkews_checkpoint save")
        first.run("small[0] = big[0] = -1; small.flush(); big.flush()")  # the files change
    with Kernel(store) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert out.count("restored as an in-memory copy: the file changed since the checkpoint") == 2, out
        out = fresh.run("%gkews_checkpoint verify")
        for name, path in (("small", tmp_path / "small.f4"), ("big", tmp_path / "big.f8")):
            assert (f"{name}: changed (it came back as an in-memory copy of the np.memmap of {path}: its values "
                    f"equal the checkpoint's, but it no longer reads or writes that file)") in out, out
        fresh.run("big[5] = 0")
        assert (f"big: changed (it came back as an in-memory copy of the np.memmap of {tmp_path / 'big.f8'}, and "
                f"its values differ from the checkpoint's)") in fresh.run("%gkews_checkpoint verify")


def test_a_memmap_restored_as_a_copy_leaves_the_other_variables_verified(tmp_path):
    """A small np.memmap restored as an in-memory copy is held inline, where the save held it in the table:
    every storage after it was numbered one less, and verify, matching the checkpoint's part-views by those
    numbers, called an unrelated view (`other[::-7]`) changed, and a view of the memmap "values differ"
    though they were equal. Each variable's storages are matched in the order it uses them now."""
    store, path = tmp_path / "store", tmp_path / "f.f4"
    with Kernel(store) as first:
        first.run(f"import numpy as np\nmid = np.ones(10000)\n"
                  f"mm = np.memmap({str(path)!r}, dtype='f4', mode='w+', shape=(100,)); mm[:] = np.arange(100)\n"
                  f"mm.flush(); mm_view = mm[10:50:3]\nother = np.arange(200000.0); other_view = other[::-7]")
        assert "Skipped" not in first.run("%gkews_checkpoint save")
        first.run("mm[0] = -1; mm.flush()")  # the file changes
    with Kernel(store) as fresh:
        assert "restored as an in-memory copy" in fresh.run("%gkews_checkpoint restore")
        result = fresh.call({"op": "verify"})["result"]
        assert _changed(result) == ["mm", "mm_view"]
        for name in ("mm", "mm_view"):
            assert result["variables"][name]["detail"] == (
                f"it came back as an in-memory copy of the np.memmap of {path}: its values equal the "
                "checkpoint's, but it no longer reads or writes that file")
        fresh.run("other[7] = -1")
        assert _changed(fresh.call({"op": "verify"})["result"]) == ["mm", "mm_view", "other"]  # not its view
        fresh.run("other[-1] = -1")
        assert _changed(fresh.call({"op": "verify"})["result"]) == ["mm", "mm_view", "other", "other_view"]


def test_functions_sharing_equal_constants_match_after_a_restore(tmp_path):
    """CPython merges the equal constant tuples of one cell's functions; dill gives each restored code
    object its own: the digest recorded the sharing, and verify called the restored value changed."""
    with Kernel(tmp_path) as k:
        k.run("ops = [lambda x: x * x, lambda x: -x]\nby_name = {'a': lambda e: 0.95 ** e, 'b': lambda e: 0.95 ** e}")
        k.run("%gkews_checkpoint save")
        k.run("%gkews_checkpoint restore")
        assert _changed(k.call({"op": "verify"})["result"]) == []
        k.run("ops[1] = lambda x: x + 1")
        assert _changed(k.call({"op": "verify"})["result"]) == ["ops"]
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert _changed(fresh.call({"op": "verify"})["result"]) == []


def test_combining_flags_of_a_notebook_enum_changes_nothing(tmp_path):
    """`Aug.FLIP | Aug.JITTER` caches the combination in the class (`_value2member_map_`): verify called
    the class changed. A member added to the class is still found."""
    with Kernel(tmp_path) as k:
        k.run("import enum\nclass Aug(enum.Flag):\n    FLIP = 1\n    CROP = 2\n    JITTER = 4\nenabled = Aug.FLIP")
        k.run("%gkews_checkpoint save")
        k.run("both = Aug.FLIP | Aug.JITTER\nAug(3)")
        assert _changed(k.call({"op": "verify"})["result"]) == []
        k.run("class Aug(enum.Flag):\n    FLIP = 1\n    CROP = 2\n    JITTER = 4\n    BLUR = 8")
        # enabled names the class Aug in its digest (another variable), which now is another class
        assert _changed(k.call({"op": "verify"})["result"]) == ["Aug", "enabled"]


def test_a_same_kernel_restore_warns_of_redefinitions_not_of_state_that_moved_on(tmp_path):
    """A closure's counter, a class attribute counter and a wrapper's call count moved on after the save:
    the restore said the kernel redefined them (and to re-run their cells, which resets that state)."""
    with Kernel(tmp_path) as k:
        k.run("import functools\n"
              "def make_counter():\n    n = [0]\n    def step():\n        n[0] += 1\n        return n[0]\n"
              "    return step\nnext_id = make_counter()\n"
              "class Run:\n    started = 0\n    def __init__(self): Run.started += 1\nr = Run()\n"
              "def counted(f):\n    @functools.wraps(f)\n    def wrapper(*a):\n        wrapper.calls += 1\n"
              "        return f(*a)\n    wrapper.calls = 0\n    return wrapper\n"
              "@counted\ndef double(x): return 2 * x\n"
              "def scale(v, k=2.0): return v * k")
        k.run("%gkews_checkpoint save")
        k.run("next_id(); Run(); double(3)")
        assert "redefined" not in k.run("%gkews_checkpoint restore")
        k.run("class Run:\n    started = 0\n    def __init__(self): Run.started += 2\n"
              "@counted\ndef double(x): return x + x\n"
              "def scale(v, k=3.0): return v * k")
        out = k.run("%gkews_checkpoint restore")
        assert sorted(line.split(": this kernel redefined it")[0].split()[-1] for line in out.splitlines()
                      if "this kernel redefined it" in line) == ["Run", "double", "scale"], out


def test_verify_sees_gradient_hooks_and_a_sparse_grad(tmp_path):
    """A gradient hook changes the next backward, and a sparse grad the next step: both are part of the
    value. After a fresh restore they match; a hook removed, or the grad cleared, reads as changed."""
    build = ("import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(3, 1)\n"
             "handle = model.weight.register_hook(lambda g: g.clamp(-0.01, 0.01))\n"
             "emb = torch.nn.Embedding(10, 4, sparse=True)\nemb(torch.tensor([1, 2])).sum().backward()")
    with Kernel(tmp_path) as k:
        k.run(build)
        k.run("%gkews_checkpoint save model emb")
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value("emb.weight.grad.is_sparse") is True
        assert _changed(fresh.call({"op": "verify"})["result"]) == []
        fresh.run("model.weight._backward_hooks.clear()\nemb.weight.grad = None")
        assert _changed(fresh.call({"op": "verify"})["result"]) == ["emb", "model"]


def test_a_variable_holding_a_later_one_reads_unchanged_and_shares_it_after_a_restore(tmp_path):
    """`cfg` holds `model`, defined before it but named after it in the alphabet: a manifest whose variables
    were written in sorted order, not in the order the save took them, made verify call `cfg` changed right
    after the save (it walked `cfg` before `model` was known as a variable)."""
    setup = "shared = [0]\nmodel = {'w': [1.5]}\ncfg = {'model': model, 'pair': (shared, shared)}"
    seen = "[cfg['model'] is model, cfg['pair'][0] is shared, cfg['pair'][1] is shared]"
    with Kernel(tmp_path) as first:
        first.run(setup)
        first.call({"op": "save"})
        verdicts = first.call({"op": "verify"})["result"]["variables"]
        assert {n: v["verdict"] for n, v in verdicts.items()} == {"shared": "match", "model": "match", "cfg": "match"}
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value(seen) == [True, True, True]
        assert all(v["verdict"] == "match" for v in fresh.call({"op": "verify"})["result"]["variables"].values())


def test_numpy_scalars_and_dtypes_match_after_a_restore_and_a_change_is_found(tmp_path):
    """An int32 scalar beside a structured scalar with an int32 field: in the saving process both dtypes hold
    numpy's one int32 dtype, once unpickled the field's is a copy, and verify (which walked dtypes as objects)
    called the list changed after every restore."""
    build = ("import numpy as np\nrec = np.zeros(2, dtype=[('a', 'i4'), ('b', 'f8')])\n"
             "vals = [np.int32(-3), rec[0], np.float64(2.5), np.datetime64('2026-12-04'), rec.dtype]\n"
             "kinds = {'i': np.dtype('int32'), 'rec': rec.dtype}")
    with Kernel(tmp_path) as first:
        first.run(build)
        assert "Skipped" not in first.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        assert "Not restored" not in fresh.run("%gkews_checkpoint restore")
        assert _changed(fresh.call({"op": "verify"})["result"]) == []
        fresh.run("vals[0] = np.int32(-4)\nkinds['rec'] = np.dtype([('a', 'i4'), ('b', 'f4')])")
        assert _changed(fresh.call({"op": "verify"})["result"]) == ["kinds", "vals"]


VIEWS = r'''
import numpy as np, torch
t = torch.zeros(10); first = t[:3]; tail = t[7:]
every_other = t[::2]
big = np.zeros(100_000); head = big[:10]
flat = torch.zeros(12); layers = [flat[:8].view(2, 4), flat[8:]]  # together, the whole storage
'''


def test_a_view_reads_changed_only_when_its_own_values_change(tmp_path):
    """`first = t[:3]`: a write to t[9] made verify call `first` changed, since a view's storage was compared
    whole; it compares the view's own bytes now (in this kernel and after a restore in a fresh one). A view
    that reaches the whole storage, and views that cover it together, still compare the storage."""
    from test_fidelity_state import changed
    with Kernel(tmp_path) as first:
        first.run(VIEWS)
        first.run("%gkews_checkpoint save")
        first.run("t[9] = 1; big[-1] = 1")
        assert changed(first) == ["big", "t", "tail"]
        first.run("t[8] = 1")  # inside every_other's reach: its storage is compared whole
        assert changed(first) == ["big", "every_other", "t", "tail"]
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert changed(fresh) == []
        fresh.run("t[1] = 2; flat[9] = 3")  # every_other = t[::2] holds no t[1]
        assert changed(fresh) == ["first", "flat", "layers", "t"]
        fresh.run("big[3] = 4")
        assert "head" in changed(fresh)


def test_a_variable_bound_to_the_namespace_itself_reads_unchanged(tmp_path):
    """`ns = globals()` read 'changed' at every verify, right after the save with nothing changed: its dict was
    walked, IPython's history entries with it. It is the kernel's namespace, saved and restored as such."""
    with Kernel(tmp_path) as k:
        k.run("ns = globals()\nx = 1")
        k.run("%gkews_checkpoint save")
        out = k.run("%gkews_checkpoint verify")
        assert "Verified" in out and "ns: changed" not in out, out
        k.run("x = 2")
        assert "x: changed" in k.run("%gkews_checkpoint verify")
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value("ns is globals()")


def test_reading_a_buffers_attributes_changes_nothing(tmp_path):
    """io.BytesIO, io.StringIO and functools.partial make their __dict__ when it is first read (`vars(buf)`, a
    debugger, IPython's `buf?`): verify called them changed after a look. Set attributes still count."""
    with Kernel(tmp_path) as k:
        k.run("import io, functools\nraw = io.BytesIO(b'abc'); raw.seek(2)\ntext = io.StringIO('line')\n"
              "call = functools.partial(print, 1)\nnamed = io.BytesIO(b'x'); named.tag = 'kept'")
        k.run("%gkews_checkpoint save")
        k.run("vars(raw), vars(text), vars(call), vars(named)")
        assert _all_match(k.value(VERIFY)) == []
        k.run("raw.note = 'set'")
        assert k.value(VERIFY)["raw"] == "changed"
        k.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        back = "[raw.getvalue().decode(), raw.tell(), raw.note, named.tag, text.getvalue(), call.args]"
        assert fresh.value(back) == ["abc", 2, "set", "kept", "line", [1]]
        assert _all_match(fresh.value(VERIFY)) == []


def test_an_optimizer_reloading_its_own_state_dict_changes_nothing(tmp_path):
    """`opt.load_state_dict(opt.state_dict())` (how a training run resumes) rebuilds each param group with
    "params" as its last key: verify called every such optimizer changed. A changed learning rate still is."""
    with Kernel(tmp_path) as k:
        k.run("import torch\nm = torch.nn.Linear(3, 2)\nadam = torch.optim.AdamW(m.parameters(), lr=0.1)\n"
              "sgd = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)\n"
              "m(torch.ones(1, 3)).sum().backward(); adam.step(); sgd.step()")
        k.run("%gkews_checkpoint save")
        k.run("adam.load_state_dict(adam.state_dict()); sgd.load_state_dict(sgd.state_dict())")
        assert k.value("list(adam.param_groups[0])[-1]") == "params"  # what torch does
        assert _all_match(k.value(VERIFY)) == []
        k.run("sgd.param_groups[0]['lr'] = 0.05")
        assert k.value(VERIFY)["sgd"] == "changed"


def test_a_variable_holding_a_changed_ones_objects_changed_with_it(tmp_path):
    """`history = log` and `cfg = {"log": log}` are saved as references to log's objects: after `log.append(2)`
    verify called them bit-identical (their values went from [1] to [1, 2])."""
    with Kernel(tmp_path) as k:
        k.run("log = [1]; history = log; cfg = {'log': log}; other = [1]")
        k.run("%gkews_checkpoint save")
        k.run("log.append(2)")
        result = k.value("{n: v for n, v in __import__('kernel_state').verify()['variables'].items()}")
        assert {n: v["verdict"] for n, v in result.items()} == {
            "log": "changed", "history": "changed", "cfg": "changed", "other": "match"}
        assert result["cfg"]["detail"] == "it holds log's objects, and log changed"


def test_iterators_over_dicts_and_sets_read_unchanged_after_a_restore(tmp_path):
    """An iterator over a dict or a set comes back as a list iterator over the items it had left (Python's own
    pickling of it): verify called each one changed straight after the restore."""
    setup = ("d = {'a': 1, 'b': 2, 'c': 3}\nkeys = iter(d); next(keys)\nvalues = iter(d.values())\n"
             "items = iter(d.items())\nback = reversed(d)\nmembers = iter({1, 2, 3})\n"
             "plain = iter([4, 5]); next(plain)")
    with Kernel(tmp_path) as first:
        first.run(setup)
        first.run("%gkews_checkpoint save")
        assert _all_match(first.value(VERIFY)) == []
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert _all_match(fresh.value(VERIFY)) == []
        assert fresh.value("[list(keys), list(values), [list(i) for i in items], list(back), sorted(members), "
                           "list(plain)]") == [["b", "c"], [1, 2, 3], [["a", 1], ["b", 2], ["c", 3]], ["c", "b", "a"],
                                               [1, 2, 3], [5]]
        assert fresh.value(VERIFY)["keys"] == "changed"  # consumed just now: the items it has left differ


def test_reading_a_cached_property_changes_nothing(tmp_path):
    """Reading a functools.cached_property stores its result in the instance's __dict__: verify called the
    object changed after `d.total`, and the next save wrote it again. Setting an attribute still counts."""
    setup = ("import functools\nclass Data:\n    def __init__(self, xs): self.xs = xs\n"
             "    @functools.cached_property\n    def total(self): return sum(self.xs)\n"
             "class Child(Data): pass\nd = Data([1, 2, 3]); c = Child([4])")
    with Kernel(tmp_path) as k:
        k.run(setup)
        k.run("%gkews_checkpoint save")
        assert k.value("[d.total, c.total]") == [6, 4]
        assert _all_match(k.value(VERIFY)) == []
        k.run("%gkews_checkpoint save")
        k.run("d.xs.append(4)")
        assert k.value(VERIFY)["d"] == "changed"
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value("[d.total, d.xs, 'total' in vars(c), c.total]") == [6, [1, 2, 3], True, 4]
        assert _all_match(fresh.value(VERIFY)) == []


def test_rebinding_a_name_whose_value_another_variable_holds_by_value_changes_nothing(tmp_path):
    """`cfg = {"dtype": dt}` held dt as "dt's object": after `dt = np.dtype("int8")` verify called cfg changed
    ("it holds dt's objects, and dt changed") though cfg held the same float32. A dtype, a device, a tuple of
    constants or an imported class is what it is; a list another variable holds still changes with it."""
    setup = ("import numpy as np, torch, enum, pathlib, decimal\n"
             "dt = np.dtype('float32'); pair = (1, 'a'); tdt = torch.float32; dev = torch.device('cpu')\n"
             "kind = torch.nn.Linear; path = pathlib.Path('data/x.csv'); price = decimal.Decimal('1.10')\n"
             "color = enum.Enum('Color', 'RED')\n"
             "log = [1]\n"
             "cfg = {'dtype': dt, 'pair': pair, 'tdt': tdt, 'dev': dev, 'kind': kind, 'path': path, "
             "'price': price, 'log': log}")
    with Kernel(tmp_path) as k:
        k.run(setup)
        k.run("%gkews_checkpoint save")
        k.run("dt = np.dtype('int8'); pair = (2, 'b'); tdt = torch.bfloat16; dev = torch.device('meta')\n"
              "kind = torch.nn.Conv1d; path = pathlib.Path('y'); price = decimal.Decimal('2')")
        verdicts = k.value(VERIFY)
        assert verdicts["cfg"] == "match", verdicts
        assert {n for n, v in verdicts.items() if v != "match"} == {"dt", "pair", "tdt", "dev", "kind", "path",
                                                                    "price"}, verdicts
        k.run("log.append(2)")
        assert k.value(VERIFY)["cfg"] == "changed"
        k.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value("[str(cfg['dtype']), cfg['pair'], str(cfg['tdt']), cfg['kind'].__name__, "
                           "cfg['log'] is log, cfg['log'], str(dt)]") == \
            ["float32", [1, "a"], "torch.float32", "Linear", True, [1, 2], "int8"]
        assert _all_match(fresh.value(VERIFY)) == []


def test_an_array_made_read_only_or_writeable_reads_changed(tmp_path):
    """A restore keeps an array's read-only flag (a write then raises), but verify said "bit-identical" after
    `x.flags.writeable = False`, and after setting it back on a restored read-only array."""
    from test_fidelity_state import changed
    build = ("import numpy as np\nsmall = np.arange(3.0)\nbig = np.arange(100_000.0)\n"
             "frozen = np.arange(4.0); frozen.flags.writeable = False\nother = [1, 2]")
    with Kernel(tmp_path) as first:
        first.run(build)
        first.run("%gkews_checkpoint save")
        assert changed(first) == []
        first.run("small.flags.writeable = False; big.flags.writeable = False")
        assert changed(first) == ["big", "small"]
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert changed(fresh) == [] and fresh.value("frozen.flags.writeable") is False
        fresh.run("frozen.flags.writeable = True")
        assert changed(fresh) == ["frozen"]


def test_a_vocabulary_digests_as_it_did_item_by_item_and_verifies_after_a_restore(tmp_path, monkeypatch):
    """A dict of many keys of one scalar type (a vocabulary, a table of counts) is digested in bulk: walked item
    by item, a million keys took seconds of every save. The digest is the same as the walk's, so a checkpoint
    written before verifies as before, and one changed value is still seen."""
    from kernel_state import compare
    nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    dicts = [{f"w{i}": i for i in range(100)},
             {i: i / 3 for i in range(100)} | {-1: float("nan"), -2: nan, -3: -0.0, -4: float("inf")},
             {bytes([i]): i % 2 == 0 for i in range(100)},
             {f"é'\"%s\n{i}": None for i in range(100)},
             {i: 2 ** 80 + i for i in range(100)},
             {i: 10 ** 5000 if i == 50 else i for i in range(100)},  # too large for repr: walked
             {i: "x" if i else 1 for i in range(100)}]  # mixed: walked
    bulk = [compare.value_digest(d) for d in dicts]
    monkeypatch.setattr(compare, "_FLAT_DICT", float("inf"))
    assert bulk == [compare.value_digest(d) for d in dicts]
    monkeypatch.undo()
    for d, digest in zip(dicts, bulk):
        d[next(iter(d))] = "changed"
        assert compare.value_digest(d) != digest

    with Kernel(tmp_path) as first:
        first.run("vocab = {f'token{i}': i for i in range(200_000)}")
        first.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        assert "Not restored" not in fresh.run("%gkews_checkpoint restore")
        assert fresh.value(VERIFY) == {"vocab": "match"}
        fresh.run("vocab['token7'] = 8")
        assert fresh.value(VERIFY) == {"vocab": "changed"}
