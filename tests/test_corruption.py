"""Corruption: flipped bytes and truncations in manifests and blobs.

For every damage (systematic over positions and regions of each file, then random with a printed
seed): nothing raises past the API (the kernel never dies), every variable either comes back equal by
content digest to what was saved or is reported failed by name, and no pickle whose bytes, or whose
tensors' bytes, do not match their hashes is ever unpickled. The proof of the last: every pickled
variable carries a marker object whose unpickling appends the variable's name to a file.
A last test does a sample of the same in a real kernel through %gkews_checkpoint and the server's
JSON call.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import kernel_state
from kernel_state.errors import CorruptManifest
from kernel_state.store import Store

from contenthash import content_digest
from kernels import Kernel

torch = pytest.importorskip("torch")

NB = "corrupt/experiment.ipynb"
SEED = int(os.environ.get("GKEWS_CORRUPTION_SEED", "7"))
FLIPS = (0x01, 0x80, 0x20, 0xFF, 0x10)


class Marker:
    """Unpickling this appends `name` to the marker file: proof that a pickle was loaded."""

    def __init__(self, path: str, name: str):
        self.path, self.name = path, name

    def __reduce__(self):
        return exec, (f"open({self.path!r}, 'a').write({self.name + chr(10)!r})",)


def namespace(marker_file: str) -> dict:
    big = np.arange(600_000, dtype=np.float32).reshape(600, 1000)      # own safetensors blob
    ns = {
        "big": big,
        "guarded": {"view": big[10:20], "marker": Marker(marker_file, "guarded")},  # pickle + big's blob
        "small": {"a": np.linspace(0, 1, 20_000), "marker": Marker(marker_file, "small")},  # the pack blob
        "weights": {"w": torch.arange(5000, dtype=torch.float32), "marker": Marker(marker_file, "weights")},
        "cfg": {"lr": 0.125, "layers": [3, 4, 5], "marker": Marker(marker_file, "cfg")},  # pickle only
        "count": 42,
    }
    return ns


def expected_digests(ns: dict) -> dict:
    return {name: content_digest(_without_marker(value)) for name, value in ns.items()}


def _without_marker(value):
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "marker"}
    return value


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    base = tmp_path_factory.mktemp("corruption")
    marker = str(base / "markers.txt")
    ns = namespace(marker)
    root = base / "pristine"
    kernel_state.save(ns, notebook=NB, root=str(root))
    manifest_path = next(root.glob("notebooks/*/manifests/*.json"))
    manifest = json.loads(manifest_path.read_text())
    # which variables need each blob (their pickle, or a storage their pickle refers to)
    users: dict[str, set] = {}
    for name, record in manifest["variables"].items():
        users.setdefault(record["pickle"], set()).add(name)
        for skey in record["storages"]:
            users.setdefault(manifest["storages"][skey]["blob"], set()).add(name)
    return {"root": root, "marker": Path(marker), "digests": expected_digests(ns), "manifest": manifest,
            "manifest_path": manifest_path.relative_to(root), "users": users, "work": base / "work"}


def _damaged_copy(saved, rel: Path, damage) -> Path:
    """A copy of the pristine store with one file damaged (the copy is made once, then only that file)."""
    work = saved["work"]
    if not work.exists():
        shutil.copytree(saved["root"], work)
    for changed in saved.setdefault("changed", set()):
        (work / changed).write_bytes((saved["root"] / changed).read_bytes())
    saved["changed"] = {rel}
    target = work / rel
    data = bytearray((saved["root"] / rel).read_bytes())
    target.write_bytes(bytes(damage(data)))
    saved["marker"].unlink(missing_ok=True)
    return work


def _restore_and_judge(saved, root: Path, what: str, may_fail: set | None, by_entry: bool = False) -> dict:
    """Restore; every variable is right or failed by name; no damaged pickle was loaded. by_entry: the damage
    is in a pack, whose entries are checked one by one when its hash fails; a variable whose entries all check
    may come back (right, as every restored one), one that failed was never unpickled."""
    ns = {}
    try:
        result = kernel_state.restore(ns, notebook=NB, root=str(root))
    except CorruptManifest as exc:
        assert "manifest" in str(exc) and "delete it" in str(exc) or "not a gkews" in str(exc) \
            or "lacks" in str(exc) or "format version" in str(exc), (what, str(exc))
        result = {"restored": [], "failed": {"*": str(exc)}}
    loaded = set(saved["marker"].read_text().split()) if saved["marker"].exists() else set()
    for name in result["restored"]:
        assert content_digest(_without_marker(ns[name])) == saved["digests"][name], \
            f"{what}: {name} was restored with a wrong value and no error"
    if may_fail is not None:
        assert set(result["failed"]) <= may_fail, (what, result["failed"])
        unsafe = set(result["failed"]) if by_entry else may_fail
        assert not (loaded & unsafe), f"{what}: the damaged pickle(s) of {loaded & unsafe} were unpickled"
    for name, reason in result["failed"].items():
        assert reason and ("blob" in reason or "manifest" in reason or "variable" in reason), (what, name, reason)
    return result


def _flip(position: int, mask: int):
    def damage(data):
        data[position % len(data)] ^= mask
        return data
    return damage


def _truncate(length: int):
    return lambda data: data[:length]


def _positions(size: int, header_end: int) -> list[int]:
    """Every byte of the first 64 (lengths, the JSON start), then evenly over header, padding and data."""
    picks = set(range(min(64, size)))
    picks.update(range(0, min(header_end, size), max(1, header_end // 60)))
    picks.update(range(header_end, size, max(1, (size - header_end) // 40)))
    picks.update({size - 1, header_end - 1, header_end} & set(range(size)))
    return sorted(picks)


def test_damaged_manifests_restore_right_or_refuse(saved):
    rel = saved["manifest_path"]
    size = len((saved["root"] / rel).read_bytes())
    rng = random.Random(SEED)
    cases = [(f"flip {p}^{FLIPS[i % len(FLIPS)]:#x}", _flip(p, FLIPS[i % len(FLIPS)]))
             for i, p in enumerate(range(0, size, max(1, size // 250)))]
    cases += [(f"truncate to {n}", _truncate(n)) for n in (0, 1, 2, size // 3, size // 2, size - 2, size - 1)]
    for _ in range(60):
        positions = [rng.randrange(size) for _ in range(rng.randint(1, 8))]
        values = [rng.randrange(256) for _ in positions]

        def scramble(data, positions=positions, values=values):
            for p, v in zip(positions, values):
                data[p] = v
            return data
        cases.append((f"seed {SEED}: bytes {positions} set to {values}", scramble))
    refused = 0
    for what, damage in cases:
        root = _damaged_copy(saved, rel, damage)
        result = _restore_and_judge(saved, root, f"manifest {what}", None)
        refused += "*" in result["failed"]
        # listing never raises: a damaged manifest is shown as unreadable
        rows = kernel_state.list_checkpoints(notebook=NB, root=str(root))
        assert len(rows) == 1 and ("error" in rows[0]) == ("*" in result["failed"]), what
    print(f"{len(cases)} damaged manifests (seed {SEED}): {refused} refused, {len(cases) - refused} harmless")
    assert refused >= len(cases) * 0.9


@pytest.mark.parametrize("kind", ["big-tensor-blob", "pack-blob", "pickle-guarded", "pickle-cfg"])
def test_damaged_blobs_fail_only_their_variables_and_are_never_unpickled(saved, kind):
    manifest, users = saved["manifest"], saved["users"]
    digest = {
        "big-tensor-blob": manifest["storages"][manifest["arrays"][
            next(iter(manifest["arrays"]))]["buffer"]]["blob"],
        "pack-blob": manifest["storages"][manifest["variables"]["weights"]["storages"][0]]["blob"],
        "pickle-guarded": manifest["variables"]["guarded"]["pickle"],
        "pickle-cfg": manifest["variables"]["cfg"]["pickle"],
    }[kind]
    ext = "pkl" if kind.startswith("pickle") else "safetensors"
    rel = Path("blobs") / f"{digest}.{ext}"
    data = (saved["root"] / rel).read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little") if ext == "safetensors" else len(data) // 2
    victims = users[digest]
    assert victims, kind
    rng = random.Random(f"{SEED}-{kind}")
    cases = [(f"flip {p}^{FLIPS[i % len(FLIPS)]:#x}", _flip(p, FLIPS[i % len(FLIPS)]))
             for i, p in enumerate(_positions(len(data), header_end))]
    cases += [(f"truncate to {n}", _truncate(n))
              for n in sorted({0, 1, 7, 8, header_end - 1, header_end, len(data) // 2, len(data) - 1})]
    cases += [("appended byte", lambda d: d + b"\0"), ("length field huge", lambda d: b"\xff" * 8 + d[8:])]
    for _ in range(25):
        positions = [rng.randrange(len(data)) for _ in range(rng.randint(1, 6))]

        def scramble(d, positions=positions):
            for p in positions:
                d[p] = (d[p] + rng.randrange(1, 256)) % 256
            return d
        cases.append((f"seed {SEED}: bytes {positions} changed", scramble))
    by_entry = kind == "pack-blob"
    for what, damage in cases:
        root = _damaged_copy(saved, rel, damage)
        result = _restore_and_judge(saved, root, f"{kind} {what}", victims, by_entry)
        if by_entry:  # a variable whose entries check by their own hashes comes back (judged right above)
            assert set(result["failed"]) <= victims, (kind, what, result["failed"])
        else:
            assert set(result["failed"]) == victims, (kind, what, result["failed"])
    # and a missing blob fails the same variables, by name
    root = _damaged_copy(saved, rel, lambda d: d)
    os.unlink(root / rel)
    result = _restore_and_judge(saved, root, f"{kind} missing", victims)
    assert set(result["failed"]) == victims and all("missing" in r for r in result["failed"].values())
    print(f"{kind}: {len(cases) + 1} damages, each failed only {sorted(victims)}")


def test_a_real_kernel_survives_damage_and_says_what_to_do(tmp_path):
    """The same damage through %gkews_checkpoint and the server's JSON call: the kernel keeps answering."""
    root = tmp_path / "store"
    marker = tmp_path / "markers.txt"
    kernel = Kernel(root, notebook=NB)
    try:
        kernel.run("import numpy as np, torch\n"
                   f"exec(open({str(Path(__file__).with_name('contenthash.py'))!r}).read())\n"
                   "big = np.arange(600_000, dtype=np.float32).reshape(600, 1000)\n"
                   "cfg = {'lr': 0.125, 'marker': MARK}\n".replace(
                       "MARK", f"type('M', (), {{'__reduce__': lambda self: (exec, "
                               f"(\"open({str(marker)!r}, 'a').write('cfg')\",))}})()"))
        kernel.run("%gkews_checkpoint save")
        want = kernel.value("content_digest(big)")
        store = Store(str(root))
        manifest_file = next(root.glob("notebooks/*/manifests/*.json"))
        manifest = store.read_manifest_file(str(manifest_file))
        big_blob = root / "blobs" / (manifest["storages"][manifest["arrays"]["a0"]["buffer"]]["blob"] + ".safetensors")
        cfg_blob = root / "blobs" / (manifest["variables"]["cfg"]["pickle"] + ".pkl")
        pristine = {p: p.read_bytes() for p in (manifest_file, big_blob, cfg_blob)}

        def damage(path, position):
            data = bytearray(pristine[path])
            data[position] ^= 0x04
            path.write_bytes(bytes(data))

        damage(cfg_blob, len(pristine[cfg_blob]) // 2)
        out = kernel.run("del big, cfg\n%gkews_checkpoint restore")
        assert "cfg: blob" in out and "does not match its hash" in out, out
        assert kernel.value("content_digest(big)") == want and not marker.exists()
        cfg_blob.write_bytes(pristine[cfg_blob])

        damage(big_blob, len(pristine[big_blob]) - 100)
        answer = kernel.call({"op": "restore"})
        assert answer["ok"] and set(answer["result"]["failed"]) == {"big"}, answer
        assert "does not match its hash" in answer["result"]["failed"]["big"]
        big_blob.write_bytes(pristine[big_blob])

        text = pristine[manifest_file].decode()
        at = re.search(r'"offset": ?', text).end()  # the manifest is one line of compact JSON
        manifest_file.write_text(text[:at] + "8" + text[at + 1:])  # a plausible offset, not the saved one
        out = kernel.run("%gkews_checkpoint restore", allow_error=True)
        assert "does not match its checksum" in out and "%gkews_checkpoint delete" in out, out
        answer = kernel.call({"op": "restore"})
        assert not answer["ok"] and answer["type"] == "CorruptManifest", answer
        manifest_file.write_bytes(pristine[manifest_file][:100])
        assert "unreadable" in kernel.run("%gkews_checkpoint list")

        manifest_file.write_bytes(pristine[manifest_file])
        kernel.run("%gkews_checkpoint restore")
        assert kernel.value("content_digest(big)") == want and kernel.value("cfg['lr']") == 0.125
    finally:
        kernel.close()


def test_a_large_array_is_chunked_and_a_damaged_chunk_fails_only_its_users(tmp_path):
    """Arrays from 32 MiB on are stored as 8 MiB chunks: an in-place change to a slice rewrites one chunk,
    a restore is exact (the view still a view), and a damaged chunk is caught before any pickle loads."""
    from kernel_state.capture import CHUNK, CHUNKED
    marker = tmp_path / "markers.txt"
    big = np.arange(CHUNKED // 8 + 1000, dtype=np.float64)
    ns = {"big": big, "user": {"part": big[5:9000], "marker": Marker(str(marker), "user")}, "other": [1, 2]}
    root = str(tmp_path / "store")
    first = kernel_state.save(ns, notebook=NB, root=root)
    assert first["bytes_written"] >= big.nbytes
    big[CHUNK // 8 + 10:CHUNK // 8 + 20] += 1.0  # inside the second chunk
    second = kernel_state.save(ns, notebook=NB, root=root)
    assert CHUNK <= second["bytes_written"] < 2 * CHUNK, second["bytes_written"]
    want = expected_digests(ns)
    got = {}
    assert kernel_state.restore(got, notebook=NB, root=root)["failed"] == {}
    assert expected_digests(got) == want and np.shares_memory(got["user"]["part"], got["big"])
    assert kernel_state.verify(ns, notebook=NB, root=root)["verified"]

    manifest = Store(root).load_manifest(NB)
    chunked = next(s for s in manifest["storages"].values() if "chunks" in s)
    chunk = Path(root) / "blobs" / f"{chunked['chunks'][1][0]}.safetensors"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    marker.unlink(missing_ok=True)
    got = {}
    result = kernel_state.restore(got, notebook=NB, root=root)
    assert set(result["failed"]) == {"big", "user"} and got["other"] == [1, 2]
    assert "does not match its hash" in result["failed"]["big"] and not marker.exists()


def test_an_optimizer_whose_model_could_not_be_restored_is_named(tmp_path):
    """The model's pickle damaged: the optimizer came back alone, stepping tensors no variable held, and
    nothing said so (a dict referring to a failed variable is refused; an optimizer shares tensors instead)."""
    root = tmp_path / "store"
    with Kernel(root, notebook=NB) as first:
        first.run("import torch\nmodel = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)")
        first.run("%gkews_checkpoint save")
    manifest = Store(str(root)).read_manifest_file(str(next(root.glob("notebooks/*/manifests/*.json"))))
    blob = root / "blobs" / (manifest["variables"]["model"]["pickle"] + ".pkl")
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x04
    blob.write_bytes(bytes(data))
    with Kernel(root, notebook=NB) as fresh:
        answer = fresh.call({"op": "restore"})["result"]
        assert set(answer["failed"]) == {"model"} and "opt" in answer["restored"], answer
        assert any(w.startswith("opt: it shares tensors with model, which could not be restored") and
                   "%gkews_checkpoint restore model opt --checkpoint ID" in w
                   for w in answer["warnings"]), answer["warnings"]


def test_a_damaged_entry_of_a_pack_fails_only_the_variables_that_use_it(tmp_path):
    """Small tensors share pack blobs; one flipped byte in one entry failed every variable with a tensor in
    the pack (a model of small layers with it). Each entry is named by the hash of its own bytes: the others
    are checked by theirs and come back, and nothing whose bytes are damaged is unpickled."""
    marker = tmp_path / "markers.txt"
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    ns = {"model": model, "opt": torch.optim.Adam(model.parameters()),
          "unrelated": {"t": torch.arange(1000.0), "marker": Marker(str(marker), "unrelated")},
          "labels": torch.arange(10)}
    root = str(tmp_path / "store")
    kernel_state.save(ns, notebook=NB, root=root)
    manifest = Store(root).load_manifest(NB)
    (key,) = [k for k, s in manifest["storages"].items() if s["nbytes"] == 4000]
    storage = manifest["storages"][key]
    path = Path(root) / "blobs" / f"{storage['blob']}.safetensors"
    data = bytearray(path.read_bytes())
    header = int.from_bytes(data[:8], "little")
    begin, _end = json.loads(data[8:8 + header])[storage["name"]]["data_offsets"]
    data[8 + header + begin + 4] ^= 0x01
    path.write_bytes(bytes(data))
    assert len(json.loads(data[8:8 + header])) > 3  # the pack holds the model's tensors too
    marker.unlink(missing_ok=True)
    got = {}
    result = kernel_state.restore(got, notebook=NB, root=root)
    assert set(result["failed"]) == {"unrelated"}, result["failed"]
    assert "the entry of this variable's tensor" in result["failed"]["unrelated"] and not marker.exists()
    assert torch.equal(got["model"].weight, model.weight) and torch.equal(got["labels"], torch.arange(10))


def test_a_value_that_exits_as_it_is_saved_or_restored_fails_alone(tmp_path):
    """exit() in a __setstate__ rolled the whole restore back (a resume restoring at the kernel's start ended
    the kernel, and every later resume failed the same way); in a __reduce__ it failed the whole checkpoint,
    naming no variable. Each now fails its own variable, saying why, and the others come back."""
    root = str(tmp_path / "store")

    class ExitsOnSave:
        def __reduce__(self):
            raise SystemExit("no saving me")

    result = kernel_state.save({"bad": ExitsOnSave(), "good": [1, 2]}, notebook=NB, root=root)
    assert result["saved"] == ["good"] and "SystemExit: no saving me" in result["skipped"]["bad"]["reason"]
    ns = {"good": [1, 2], "bad": _ExitsOnRestore(), "weights": np.arange(5.0)}
    kernel_state.save(ns, notebook=NB, root=root)
    got = {}
    result = kernel_state.restore(got, notebook=NB, root=root)
    assert set(result["failed"]) == {"bad"} and "SystemExit: exit at restore" in result["failed"]["bad"], result
    assert got["good"] == [1, 2] and np.array_equal(got["weights"], np.arange(5.0))


def _exit_at_restore():
    raise SystemExit("exit at restore")


class _ExitsOnRestore:
    def __reduce__(self):
        return (_exit_at_restore, ())
