"""A value that pickles but does not unpickle was "saved" with no word, and lost with the kernel that saved it.
Exceptions whose __init__ takes other arguments than it passes on now come back; an object whose class's
__new__ cannot take the arguments pickle keeps is warned of at every save, naming the fix."""
from __future__ import annotations

from kernels import Kernel

BUILD = r'''
import numpy as np, subprocess
class Node:                       # in a set of its own, hashed by an attribute pickle sets after the set
    def __init__(self, name): self.name = name; self.peers = set()
    def __hash__(self): return hash(self.name)
    def __eq__(self, other): return isinstance(other, Node) and other.name == self.name
node = Node("a"); node.peers.add(node)
class NeedsArgs:                  # a __new__ that needs what pickle does not keep
    def __new__(cls, x):
        obj = super().__new__(cls); obj.x = x; return obj
needs = NeedsArgs(4)
info = np.finfo(np.float32)
class RunError(Exception):        # its __init__ takes two, passes one on
    def __init__(self, message, code):
        super().__init__(message); self.code = code
err = RunError("step failed", 3); err.add_note("during epoch 2")
called = subprocess.CalledProcessError(2, ["train"], output=b"log")
fine = {"a": np.arange(3), "node_name": node.name}
'''


def test_a_new_that_cannot_load_is_warned_of_at_each_save_and_exceptions_come_back(tmp_path):
    with Kernel(tmp_path) as k:
        k.run(BUILD)
        result = k.value("__import__('kernel_state').save()")
        warned = {w.split(":")[0]: w for w in result["warnings"]}
        assert set(warned) == {"needs", "info"}, result["warnings"]
        assert "its class NeedsArgs has a __new__ that cannot load it (NeedsArgs.__new__: missing a required " \
               "argument: 'x')" in warned["needs"] and "Give the class __getnewargs__" in warned["needs"]
        assert "its class finfo has a __new__ that cannot load it" in warned["info"]
        assert result["skipped"] == {}
        assert "Warning: needs: saved, but its class NeedsArgs" in k.run("%gkews_checkpoint save")  # every save
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored (3):" in out and "node: AttributeError: 'Node' object has no attribute 'name'" in out
        assert fresh.value("[repr(err), err.code, err.__notes__, type(err) is RunError, called.returncode, "
                           "called.output.decode(), called.cmd, fine['node_name']]") == \
            ["RunError('step failed')", 3, ["during epoch 2"], True, 2, "log", ["train"], "a"]
        verdicts = fresh.value("{n: v['verdict'] for n, v in __import__('kernel_state').verify()['variables']"
                               ".items()}")
        assert {n for n, v in verdicts.items() if v != "match"} == {"node", "needs", "info"}, verdicts
