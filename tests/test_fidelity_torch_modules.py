"""torch objects that torch's own pickling refuses or rebuilds differently: a SparseAdam optimizer, TorchScript
modules, parametrized modules and torch.compile'd functions and modules (real kernels)."""
from __future__ import annotations

import pytest

from kernels import Kernel
from test_fidelity_state import changed, restored_run, unchanged_after_restore

torch = pytest.importorskip("torch")

SPARSE_ADAM = """
import torch
torch.manual_seed(0)
emb = torch.nn.Embedding(10, 3, sparse=True)
opt = torch.optim.SparseAdam(emb.parameters(), lr=0.1)
def step(ids):
    opt.zero_grad(); emb(torch.tensor(ids)).pow(2).sum().backward(); opt.step()
step([1, 2, 2])
"""


def test_a_sparse_adam_optimizer_reads_unchanged_after_a_restore(tmp_path):
    """torch's Optimizer.__setstate__ adds `differentiable: False` to the defaults of an optimizer that has
    none (SparseAdam, LBFGS): a fresh restore read as changed. A step still reads as one."""
    seen = "[emb.weight.tolist(), opt.state_dict()['state'][0]['step']]"
    with restored_run(tmp_path, SPARSE_ADAM, "step([2, 5])", seen) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert changed(fresh) == []
        fresh.run("step([2, 5])")
        assert changed(fresh) == ["emb", "opt"]


LBFGS = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
x, y = torch.randn(8, 3), torch.randn(8, 1)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, history_size=4)
class Lookahead(torch.optim.Optimizer):  # a notebook's own: what its __init__ sets besides torch's state
    def __init__(self, params, k=3):
        super().__init__(params, {"lr": 0.1})
        self.k, self.calls = k, 0
    def step(self, closure=None):
        self.calls += 1
        return None
ahead = Lookahead(torch.nn.Linear(2, 2).parameters())
ahead.step()
def closure():
    opt.zero_grad(); loss = torch.nn.functional.mse_loss(model(x), y); loss.backward(); return loss
opt.step(closure)
"""


def test_an_lbfgs_optimizer_steps_after_a_restore(tmp_path):
    """torch's Optimizer.__getstate__ keeps only defaults, state and param groups: a restored LBFGS lost the
    `_params` its __init__ set and failed at its next step (AttributeError), though the restore and verify
    said all was well. And an optimizer class defined in the notebook was skipped: torch wraps its `step` in
    a closure of its own, and dill took torch's Optimizer for a class to pickle by value (it looks modules up
    as attributes of their package, and `torch.optim.optimizer` is not one); its own attributes come back."""
    step = "loss = opt.step(closure).item(); ahead.step()"
    seen = "[loss, model.weight.tolist(), ahead.k, ahead.calls]"
    with restored_run(tmp_path, LBFGS, step, seen) as fresh:
        assert fresh.value("ahead.calls") == 2


SCHEDULED = """
import torch
torch.manual_seed(0)
gen, disc = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
opts = {"gen": torch.optim.AdamW(gen.parameters(), lr=0.1), "disc": torch.optim.SGD(disc.parameters(), lr=0.1)}
scheds = [torch.optim.lr_scheduler.StepLR(opts["gen"], 1, 0.5),
          torch.optim.lr_scheduler.LambdaLR(opts["disc"], lambda epoch: 0.9 ** epoch)]
x = torch.ones(4, 2)
def train():
    for opt in opts.values():
        opt.zero_grad()
    (disc(gen(x)).pow(2).mean()).backward()
    for opt in opts.values():
        opt.step()
    for sched in scheds:
        sched.step()
    return [round(o.param_groups[0]["lr"], 8) for o in opts.values()]
train()
"""


def test_schedulers_drive_the_restored_optimizers_they_were_made_for(tmp_path):
    """Optimizers in a container, their LR schedulers in another variable: torch puts a closure of its own on
    each optimizer as its `step`, so the optimizers went to dill, whose pickle shares nothing, and each
    scheduler came back driving a copy of its own. The learning rates froze after a restore and the losses
    went another way, with no warning; verify said all matched."""
    step = "lrs = [train() for _ in range(3)]"
    seen = "[lrs, gen.weight.tolist(), disc.weight.tolist()]"
    with restored_run(tmp_path, SCHEDULED, step, seen) as fresh:
        assert fresh.value("[s.optimizer is o for s, o in zip(scheds, opts.values())]") == [True, True]
        assert fresh.value("[o.step._wrapped_by_lr_sched for o in opts.values()]") == [True, True]
    with unchanged_after_restore(tmp_path / "verify", SCHEDULED, "[o.param_groups[0]['lr'] for o in opts.values()]"):
        pass


SCRIPTED = """
import torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 0.5))
        self.k = 2
    def forward(self, x):
        return torch.relu(self.fc(x)) * self.scale * self.k
model = Net()
scripted = torch.jit.script(model)
traced = torch.jit.trace(model, torch.randn(2, 4))
x = torch.randn(5, 4)
"""
OUTPUTS = "[scripted(x).tolist(), traced(x).tolist(), model(x).tolist()]"


def test_torchscript_modules_come_back_computing_the_same(tmp_path):
    """torch.jit.script/trace modules were skipped ("Tried to serialize object __torch__.Net which does not
    have a __getstate__ method"). They come back from their torch.jit.save archive with the checkpoint's
    own parameters and buffers (still the eager model's), and verify compares code and tensors, not the
    archive's bytes, which differ after a load."""
    with Kernel(tmp_path) as first:
        first.run(SCRIPTED)
        assert first.call({"op": "save"})["result"]["skipped"] == {}
        assert changed(first) == []
        expected = first.value(OUTPUTS)
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value(OUTPUTS) == expected
        assert fresh.value("[isinstance(scripted, torch.jit.ScriptModule), scripted.fc.weight is model.fc.weight, "
                           "traced.scale is model.scale]") == [True, True, True]
        assert changed(fresh) == []
        fresh.run("with torch.no_grad(): scripted.fc.weight[0, 1] += 2 ** -10")
        assert changed(fresh) == ["model", "scripted", "traced"]


def test_a_scripted_model_s_weights_are_written_once(tmp_path):
    """A TorchScript module went as its whole torch.jit.save archive besides its tensors: every weight twice on
    disk, and the whole archive written again at every save, unchanged or not. Its archive holds its code alone
    now: a checkpoint of it is the size of its weights, and a save of it unchanged writes next to nothing."""
    with Kernel(tmp_path) as first:
        first.run("import torch\ntorch.manual_seed(0)\n"
                  "net = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU()))\n"
                  "x = torch.randn(2, 512)\nweights = sum(t.nbytes for t in net.state_dict().values())")
        weights = first.value("weights")
        result = first.call({"op": "save"})["result"]
        assert result["skipped"] == {}
        assert weights <= result["bytes_written"] < weights + 64 * 1024, (weights, result["bytes_written"])
        assert first.call({"op": "save"})["result"]["bytes_written"] < 64 * 1024
        expected = first.value("net(x).tolist()")
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value("[net(x).tolist(), isinstance(net, torch.jit.ScriptModule), "
                           "[n for n, _ in net.named_parameters()]]") == [expected, True, ["0.weight", "0.bias"]]
        assert changed(fresh) == []


PARAMETRIZED = """
import torch
from torch.nn.utils import parametrize, parametrizations
torch.manual_seed(0)
class Symmetric(torch.nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)
lin = torch.nn.Linear(3, 3)
parametrize.register_parametrization(lin, "weight", Symmetric())
net = torch.nn.Sequential(parametrizations.orthogonal(torch.nn.Linear(3, 3)), torch.nn.Tanh())
opt = torch.optim.SGD([*lin.parameters(), *net.parameters()], lr=0.1)
x = torch.randn(4, 3)
"""
TRAIN = "opt.zero_grad(); (lin(x).sum() + net(x).pow(2).sum()).backward(); opt.step()"


def test_parametrized_modules_come_back_with_their_parametrizations(tmp_path):
    """parametrize.register_parametrization makes a class whose __getstate__ refuses to pickle: such a module
    was skipped. It comes back parametrized, with the notebook's parametrization class, and trains the same
    (orthogonal's right_inverse is not run again on the saved original)."""
    seen = "[lin(x).tolist(), net(x).tolist(), lin.weight.tolist()]"
    with restored_run(tmp_path, PARAMETRIZED, TRAIN, seen) as fresh:
        fresh.run("%gkews_checkpoint restore")
        trained = "any(p is lin.parametrizations.weight.original for p in opt.param_groups[0]['params'])"
        assert fresh.value(f"[type(lin).__name__, type(lin.parametrizations.weight[0]) is Symmetric, "
                           f"parametrize.is_parametrized(net[0], 'weight'), {trained}]") == \
            ["ParametrizedLinear", True, True, True]
        assert changed(fresh) == []
        fresh.run("with torch.no_grad(): lin.parametrizations.weight.original[0, 1] += 1")
        assert changed(fresh) == ["lin", "opt"]


def test_a_weight_normed_module_with_gradients_reads_unchanged(tmp_path):
    """weight_norm after a backward (its parameters hold gradients) read as changed right after the save, and
    after a restore (a live verify would have failed): the plain pickler fails on the parametrized class and
    dill tries again, meeting tensors the first try had recorded, whose gradients' storages it left out."""
    setup = ("import torch\ntorch.manual_seed(0)\n"
             "model = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 4))\n"
             "model(torch.ones(4)).sum().backward()")
    with unchanged_after_restore(tmp_path, setup, "[p.grad.tolist() for p in model.parameters()]") as fresh:
        fresh.run("model.parametrizations.weight.original1.grad[0, 0] += 1")
        assert changed(fresh) == ["model"]


COMPILED = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
fast = torch.compile(model, backend="eager")
def double(v):
    return v * 2
fast_double = torch.compile(double, backend="eager")
x = torch.randn(3, 4)
"""


def test_torch_compiled_modules_come_back_and_compiled_functions_say_how(tmp_path):
    """A torch.compile'd module comes back (torch pickles it as its module and compile settings) computing the
    same; its first call no longer reads as a change (dynamo marks the parameters and its settings). A
    compiled function cannot be saved ('ConfigModuleInstance'): its skip says what it is and to re-run its cell."""
    with Kernel(tmp_path) as first:
        first.run(COMPILED)
        skipped = first.call({"op": "save"})["result"]["skipped"]
        assert list(skipped) == ["fast_double"]
        assert "torch.compile'd function (double)" in skipped["fast_double"]["reason"]
        assert "re-run the cell that compiles it" in skipped["fast_double"]["reason"]
        expected = first.value("fast(x).tolist()")
        assert changed(first) == []  # its first call set dynamo's own state, which verify does not compare
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "fast_double: TypeError: cannot pickle a torch.compile'd function (double)" in out
        assert "re-run cell [1]" in out
        assert fresh.value("[fast(x).tolist(), fast._orig_mod is model, double(3), 'fast_double' in dir()]") == \
            [expected, True, 6, False]
        assert changed(fresh) == []
        fresh.run("with torch.no_grad(): model.weight[0, 0] += 1")
        # `fast` holds the variable `model` whole (fast._orig_mod is model): it changed with it
        assert changed(fresh) == ["fast", "model"]


COMPILED_IN_PLACE = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
model.compile(backend="eager", dynamic=False)
static = torch.compile(torch.nn.Linear(4, 2), backend="eager", dynamic=False)
x = torch.randn(3, 4)
y = model(x)
static(x)
"""
COMPILED_NOW = "[model._compiled_call_impl is not None, torch.equal(model(x), y), model(x).tolist(), " \
    "static(x).tolist()]"


def test_a_module_compiled_in_place_comes_back_compiled(tmp_path):
    """`model.compile()` sets the module's compiled call, which torch's Module.__getstate__ drops: the model came
    back running eagerly (other kernels, other last bits than before the pause). It comes back compiled with the
    same settings, reads unchanged, and a change to its weights still reads as one. torch's own pickle of the
    settings lost `dynamic=False` (a torch.compile'd module read as changed after a restore): kept too."""
    with Kernel(tmp_path) as first:
        first.run(COMPILED_IN_PLACE)
        assert first.call({"op": "save"})["result"]["skipped"] == {}
        expected = first.value(COMPILED_NOW)
        assert expected[:2] == [True, True]
        assert changed(first) == []
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value(COMPILED_NOW) == expected
        assert changed(fresh) == []
        fresh.run("with torch.no_grad(): model[0].weight[0, 0] += 1")
        assert changed(fresh) == ["model"]
