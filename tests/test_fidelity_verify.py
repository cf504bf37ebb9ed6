"""verify compares values: right after a correct restore every variable matches, in fresh process after
fresh process, and one changed weight or element is still found."""
from __future__ import annotations

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
                # nested holds tags as the variable `tags`, and opt holds the model's weights
                assert sorted(n for n, v in verdicts.items() if v != "match") == \
                    ["adder", "frame", "halves", "model", "opt", "tags"]
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
        assert out.startswith("Saved checkpoint") and "skipped" not in out.lower(), out
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
