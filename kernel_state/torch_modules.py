"""torch modules that torch's own pickling refuses, and the one torch object no pickle can hold.

- TorchScript modules (torch.jit.script, torch.jit.trace) refuse to pickle: one goes as its torch.jit.save
  archive, saved with empty tensors in place of its parameters and buffers (its code and structure), plus
  those tensors by reference (the checkpoint's tensor table), set back on load, so it still shares them with
  the eager model it was made from, and its weights are written once;
- a parametrized module (torch.nn.utils.parametrize) has a class of its own whose __getstate__ refuses:
  it goes as the module of its class before, with its state (the parametrizations and their original
  tensors), and gets that class back on load without running a parametrization's right_inverse again;
- a torch.compile'd function holds its compiled code and dynamo's settings: never saved, and the skip
  says to re-run its cell. A compiled module (torch's OptimizedModule) pickles itself: its module and
  compile settings;
- a module compiled in place (`model.compile(...)`) loses it in torch's own pickle (Module.__getstate__
  drops `_compiled_call_impl`): it goes with its compile settings (the one object OptimizedModule pickles
  too), and is compiled again with them on load, so it computes as compiled, not eagerly; those settings
  come back whole (torch's own pickle of them loses `dynamic`);
- an optimizer an LR scheduler drives has a `step` of its own, the closure torch's LRScheduler.__init__
  puts there to notice calls: it goes as "wrap this optimizer's class step again" (what torch does), so the
  optimizer pickles without dill, and a scheduler saved in another variable than the optimizer's container
  (`opts = [opt]`, `sched = StepLR(opts[0], ...)`) drives the restored optimizer, not a copy of its own;
- an optimizer class the notebook defines has its `step` wrapped by torch's Optimizer.__init__ in a
  profiling closure of torch's, which cannot be pickled by value (the class was skipped): it goes with its
  own `step`, which the restored optimizer's __setstate__ (or the next __init__) wraps again;
- a custom autograd op the notebook defines (`class Sq(torch.autograd.Function)`) holds `_backward_cls`, a
  class torch's FunctionMeta makes for it, which refers back to the op by name: it is left out of the op's
  by-value pickle (derived_class_attributes), and FunctionMeta makes it again when the class is rebuilt.
"""
from __future__ import annotations

import io
import sys
import types


def reduction(obj):
    """The reduction of a TorchScript, parametrized or in-place compiled module, or of torch.compile's
    settings; None for anything else."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if type(obj) is getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizeContext", None):
        return tuple(obj.__reduce__())[:3] + (None, None, compile_settings)
    if not isinstance(obj, torch.nn.Module):
        return None
    if isinstance(obj, torch.jit.ScriptModule):
        tensors = {**dict(obj.named_parameters(remove_duplicate=False)),
                   **dict(obj.named_buffers(remove_duplicate=False))}
        return load_script_module, (_code_archive(obj, tensors, torch), tensors)
    parametrize = sys.modules.get("torch.nn.utils.parametrize")
    if parametrize is not None and type(obj).__module__ == parametrize.__name__ and parametrize.is_parametrized(obj):
        base = parametrize.type_before_parametrizations(obj)
        return parametrized_module, (base, tuple(obj.parametrizations)), base.__getstate__(obj)
    settings = _compile_settings(obj.__dict__.get("_compiled_call_impl"))
    if settings is not None:
        rv = tuple(obj.__reduce_ex__(5))  # torch's own, without the compiled code
        return rv[:2] + ({"state": rv[2], "compile": settings}, None, None, compiled_in_place)
    return None


def _compile_settings(compiled):
    """The dynamo context torch.compile wrapped a module's call with (what it pickles for OptimizedModule),
    from the wrapper's closure; None when not compiled or this torch keeps it elsewhere."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if compiled is None or eval_frame is None:
        return None
    for cell in getattr(compiled, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, eval_frame._TorchDynamoContext):
            return value
    return None


def compile_settings(context, state: dict) -> None:
    """pickle's state setter of torch.compile's settings: torch's own reduction names `dynamic` what its
    constructor keeps as `_dynamic`, so that `dynamic=False` came back None (automatic) in any compiled module."""
    context.__dict__.update(state)
    if "dynamic" in state:
        context._dynamic = state["dynamic"]


def compiled_in_place(module, state: dict) -> None:
    """pickle's state setter of a module compiled in place: its state, then `module.compile()` as it was."""
    module.__setstate__(state["state"])
    module._compiled_call_impl = state["compile"](module._call_impl)


def _code_archive(module, tensors: dict, torch) -> bytes:
    """torch.jit.save's archive of a TorchScript module, each parameter and buffer swapped for an empty tensor
    of its dtype meanwhile: its code and structure, a few KiB. The tensors themselves are in the checkpoint's
    table (written once, and not again when unchanged), and load_script_module sets them back."""
    swapped = []
    try:
        for name, tensor in tensors.items():
            owner, attr = _owner(module, name)
            empty = torch.empty(0, dtype=tensor.dtype)
            if isinstance(tensor, torch.nn.Parameter):
                empty = torch.nn.Parameter(empty, requires_grad=tensor.requires_grad)
            setattr(owner, attr, empty)
            swapped.append((owner, attr, tensor))
        archive = io.BytesIO()
        torch.jit.save(module, archive)
        return archive.getvalue()
    finally:  # the user's module holds its own tensors again, whatever happened (tied ones set twice, in reverse)
        for owner, attr, tensor in reversed(swapped):
            setattr(owner, attr, tensor)


def _owner(module, name: str):
    """The submodule holding the tensor at a dotted name, and its attribute (ScriptModules refuse
    get_submodule)."""
    *path, attr = name.split(".")
    for part in path:
        module = getattr(module, part)
    return module, attr


def load_script_module(archive: bytes, tensors: dict):
    """The archive's module, holding the checkpoint's tensors (on the device the restore chose); what else
    the archive holds (a traced graph's constants) is loaded onto their device too."""
    import torch
    device = next((t.device for t in tensors.values()), "cpu")
    module = torch.jit.load(io.BytesIO(archive), map_location=device)
    for name, tensor in tensors.items():
        owner, attr = _owner(module, name)
        setattr(owner, attr, tensor)
    return module


def parametrized_module(base: type, names: tuple):
    """An empty module of `base` under the class parametrize gives it, with a property for each parametrized
    tensor (what register_parametrization does, without computing an original); pickle sets its state."""
    from torch.nn.utils import parametrize
    module = base.__new__(base)
    parametrize._inject_new_class(module)
    for name in names:
        parametrize._inject_property(module, name)
    return module


def refuse_compiled(obj) -> None:
    """Raise the TypeError that skips a variable holding a torch.compile'd function."""
    if isinstance(obj, types.FunctionType) and hasattr(obj, "_torchdynamo_orig_callable") and \
            not getattr(obj, "_torchdynamo_disable", False):  # torch.compiler.disable's wrapper is no compile
        name = getattr(obj._torchdynamo_orig_callable, "__qualname__", "?")
        raise TypeError(f"cannot pickle a torch.compile'd function ({name}): its compiled code exists only in this "
                        f"process; re-run the cell that compiles it after a restore (a compiled nn.Module is saved)")


def unwrapped_step(function):
    """`(same, (the class's own step,))` for torch's profiling wrapper of an optimizer class's step, else None."""
    torch = sys.modules.get("torch")
    code = getattr(function, "__code__", None)
    if torch is None or code is None or not getattr(function, "hooked", False):
        return None
    if code is not torch.optim.Optimizer.profile_hook_step(same).__code__:
        return None
    return same, (function.__wrapped__,)


def same(value):
    return value


def scheduler_step(function):
    """`(wrap_scheduler_step, (optimizer,))` for the closure torch's LRScheduler puts on an optimizer as its
    `step`, when it wraps the optimizer's class step (as it does unless that was replaced); else None."""
    if not getattr(function, "_wrapped_by_lr_sched", False) or not function.__closure__:
        return None
    cells = dict(zip(function.__code__.co_freevars, (c.cell_contents for c in function.__closure__)))
    ref, func = cells.get("opt_ref"), cells.get("func")
    opt = ref() if callable(ref) else None
    if opt is None or func is None or getattr(type(opt), "step", None) is not func:
        return None
    return wrap_scheduler_step, (opt,)


def wrap_scheduler_step(opt):
    """torch's LRScheduler step tracking (torch.optim.lr_scheduler, patch_track_step_called), again: the
    class's step, called on the optimizer, after noting that it was called."""
    import functools
    import weakref
    patch = getattr(opt, "_patch_step_function", None)
    if patch is not None:  # the class step torch's __setstate__ is about to wrap, wrapped already (in a
        patch()  # fresh process nothing has yet): the step it calls is the one it finds on the class later
    opt_ref, func = weakref.ref(opt), type(opt).step

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        opt = opt_ref()
        opt._opt_called = True
        return func.__get__(opt, opt.__class__)(*args, **kwargs)
    wrapper._wrapped_by_lr_sched = True
    return wrapper


def derived_class_attributes(cls) -> tuple[str, ...]:
    """What a notebook class holds that its torch metaclass derives when the class is made, so that a
    by-value pickle leaves it out: a custom autograd op's `_backward_cls`."""
    function = sys.modules.get("torch.autograd.function")
    meta = getattr(function, "FunctionMeta", None)
    if meta is not None and isinstance(cls, meta) and "_backward_cls" in cls.__dict__:
        return ("_backward_cls",)
    return ()


def handle_ids() -> int | None:
    """The next id torch gives a hook's handle (RemovableHandle.next_id, one counter for the whole process):
    a checkpoint records it, since the hook dicts it saves keep their keys. None when torch is not imported."""
    hooks = sys.modules.get("torch.utils.hooks")
    return getattr(getattr(hooks, "RemovableHandle", None), "next_id", None)


def reserve_handle_ids(saved: int | None) -> None:
    """After a restore: the ids the saving kernel gave out are not given out again here, or the next
    `register_forward_hook` on a restored module could take a restored hook's key and replace it. A restore
    that did not import torch restored no hook: torch is not imported for this (a second or more)."""
    handle = getattr(sys.modules.get("torch.utils.hooks"), "RemovableHandle", None)
    if isinstance(saved, int) and handle is not None:
        handle.next_id = max(handle.next_id, saved)
