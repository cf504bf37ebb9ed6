"""Process-wide settings a notebook changes and later cells compute with, saved and put back with a checkpoint.

No variable holds them, yet they decide what the next cell computes: `torch.set_default_dtype(torch.float64)`
makes every new tensor float64, `torch.set_grad_enabled(False)` stops autograd, `torch.use_deterministic_algorithms`
picks other kernels, `np.seterr(all="raise")` turns a warning into an error, `decimal.getcontext().prec` the digits
of every Decimal, `%cd` where relative paths lead. torch's thread count, denormal flushing and its cuDNN/CUDA
reduced-precision switches decide the last bits of a sum or a matmul: a restored model trained on with 2 threads
where it had 1, and its gradients differed in the last bits. A restore into a fresh kernel left them at the
defaults, and said nothing. Each is recorded as JSON; a full restore sets back those that differ and names them,
and verify names those that differ now. Only modules the kernel has imported are read, and a setting the restoring
kernel cannot take is named, never fatal.
"""
from __future__ import annotations

import os
import sys


def capture() -> dict:
    """{setting: value}, JSON."""
    out = {"cwd": os.getcwd(), "sys_path": added_import_folders(), "hash_seed": os.environ.get("PYTHONHASHSEED")}
    decimal = sys.modules.get("decimal")
    if decimal is not None:
        context = decimal.getcontext()
        out["decimal"] = {name: getattr(context, name) for name in _DECIMAL_FIELDS}
        # the signals that raise (`traps[Inexact] = True`; DivisionByZero trapped by default): a kernel that
        # had untrapped it computed Infinity where the restored one raised
        out["decimal"]["traps"] = sorted(signal.__name__ for signal, on in context.traps.items() if on)
    np = sys.modules.get("numpy")
    if np is not None and hasattr(np, "geterr"):
        out["numpy_errors"] = dict(np.geterr())
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_default_dtype"):
        out["torch"] = {"default_dtype": str(torch.get_default_dtype()).replace("torch.", ""),
                        "grad_enabled": torch.is_grad_enabled(),
                        "deterministic": torch.are_deterministic_algorithms_enabled(),
                        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
                        "float32_matmul_precision": torch.get_float32_matmul_precision(),
                        "num_threads": torch.get_num_threads(), "cpus": _cpus(),
                        "flush_denormal": _flushes_denormals(torch)}
        for key, (where, attr, _label) in _TORCH_SWITCHES.items():
            try:
                out["torch"][key] = bool(getattr(_switch_owner(torch, where), attr))
            except Exception:  # a torch without the switch: not recorded, so never set back
                pass
    return out


# a decimal context's plain settings (its traps are recorded by name)
_DECIMAL_FIELDS = ("prec", "rounding", "Emin", "Emax", "capitals", "clamp")

# the switches torch keeps as plain attributes: key -> (where, attribute, how a restore names it)
_TORCH_SWITCHES = {
    "cudnn_deterministic": ("backends.cudnn", "deterministic", "torch cuDNN deterministic"),
    "cudnn_benchmark": ("backends.cudnn", "benchmark", "torch cuDNN benchmark"),
    "cudnn_allow_tf32": ("backends.cudnn", "allow_tf32", "torch cuDNN TF32"),
    "matmul_fp16_reduced": ("backends.cuda.matmul", "allow_fp16_reduced_precision_reduction",
                            "torch fp16 reduced-precision matmul reductions"),
    "matmul_bf16_reduced": ("backends.cuda.matmul", "allow_bf16_reduced_precision_reduction",
                            "torch bf16 reduced-precision matmul reductions"),
}


def _switch_owner(torch, where: str):
    owner = torch
    for part in where.split("."):
        owner = getattr(owner, part)
    return owner


_TORCH_NAMES = {"num_threads": "threads", "grad_enabled": "grad", "deterministic": "deterministic algorithms",
                "deterministic_warn_only": "deterministic algorithms warn only"}


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _flushes_denormals(torch) -> bool | None:
    """torch.set_flush_denormal has no getter: a product that must be a float32 denormal tells (on this thread,
    the one cells run on)."""
    try:
        return bool((torch.tensor([1e-30], dtype=torch.float32, device="cpu") * 1e-10).item() == 0.0)
    except Exception:  # a mode that intercepts tensors (a fake or meta mode): not recorded
        return None


def added_import_folders() -> list[str]:
    """The folders on sys.path that neither Python nor its environment put there: those a notebook added
    (`sys.path.append("lib")`) or a .pth of an editable install did. Relative entries follow the working
    directory, which is a setting of its own."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out = []
    for entry in sys.path:
        if not isinstance(entry, str) or not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry)
        if any(real == p or real.startswith(p + os.sep) for p in prefixes) or \
                os.path.basename(real) in ("site-packages", "dist-packages"):
            continue
        out.append(entry)
    return out


def extend_sys_path(saved: dict | None) -> list[str]:
    """Put the saving kernel's added import folders that exist here at the end of sys.path, before anything
    is unpickled: a class of `lib/mylib.py` (`sys.path.append("lib")`) failed to load with "No module named
    'mylib'". Never removes one, never goes before the environment's. Returns those added."""
    added = [entry for entry in (saved or {}).get("sys_path") or []
             if isinstance(entry, str) and entry not in sys.path and os.path.isdir(entry)]
    if added:
        sys.path.extend(added)
        import importlib
        importlib.invalidate_caches()
    return added


def missing_import_folders(saved: dict | None) -> list[str]:
    """The saving kernel's added import folders that are not here (a module there cannot be found)."""
    return [entry for entry in (saved or {}).get("sys_path") or [] if isinstance(entry, str)
            and not os.path.isdir(entry)]


def apply(saved: dict, same_process: bool = False) -> tuple[list[str], list[str]]:
    """Set back what differs from now; returns (what was set, described; warnings)."""
    done, warnings = [], []
    now = capture()

    def step(label: str, action) -> None:
        try:
            action()
            done.append(label)
        except Exception as exc:  # an older torch, a folder gone: said, the rest still set
            warnings.append(f"{label} was not set back: {exc}")

    for name, value in (saved.get("decimal") or {}).items():
        if now.get("decimal", {}).get(name) != value:
            import decimal
            if name == "traps":
                step(f"decimal traps {', '.join(value) or '(none)'}", lambda v=value: _set_traps(decimal, v))
            else:
                step(f"decimal {name} {value}", lambda n=name, v=value: setattr(decimal.getcontext(), n, v))
    errors = saved.get("numpy_errors")
    if errors and now.get("numpy_errors") != errors:
        import numpy as np
        step(f"numpy errors {_shown(errors, now.get('numpy_errors', {}))}", lambda: np.seterr(**errors))
    _torch(saved.get("torch") or {}, now.get("torch") or {}, step, warnings.append)
    seed = saved.get("hash_seed")
    if seed not in (None, "random") and seed != now["hash_seed"]:  # fixed when the process started: said, not set
        warnings.append(f"sets of strings may iterate in another order than in the saving kernel, which ran with "
                        f"PYTHONHASHSEED={seed} (this one: {now['hash_seed'] or 'random'}); a kernel started with "
                        f"PYTHONHASHSEED={seed} iterates them as it did")
    elif seed in (None, "random") and saved.get("string_sets") and not same_process:
        # a random seed is never the same twice: no kernel iterates those sets as the saving one did
        warnings.append("sets of strings may iterate in another order than in the saving kernel, which ran with a "
                        "random hash seed (no PYTHONHASHSEED): kernels started with a fixed PYTHONHASHSEED (the "
                        "jupyter-gkews server gives its kernels one) keep that order through a restore")
    return done, warnings


def _set_traps(decimal, names: list[str]) -> None:
    context = decimal.getcontext()
    signals = {signal.__name__: signal for signal in context.traps}
    unknown = [name for name in names if name not in signals]
    if unknown:
        raise ValueError(f"this Python's decimal has no signal {', '.join(unknown)}")
    for name, signal in signals.items():
        context.traps[signal] = name in names


def enter_working_directory(saved: dict | None) -> tuple[str | None, str | None]:
    """A full restore's first step, before anything is unpickled: the saving kernel's working directory, where a
    helper module (`from helpers import Box`, found through sys.path's '') is; set after the values, the restore
    said "No module named 'helpers'" and the next one worked. Returns (what was set, described; a warning)."""
    cwd, now = (saved or {}).get("cwd"), os.getcwd()
    if not cwd or cwd == now:
        return None, None
    if not os.path.isdir(cwd):
        return None, f"the working directory {cwd} is gone: the kernel stays in {now} (relative paths lead there)"
    try:
        os.chdir(cwd)
    except OSError as exc:
        return None, f"working directory {cwd} was not set back: {exc}"
    import importlib
    importlib.invalidate_caches()  # '' on sys.path names another folder now
    return f"working directory {cwd}", None


def _torch(saved: dict, now: dict, step, warn) -> None:
    if not saved or saved == now:
        return
    import torch
    if saved.get("default_dtype") != now.get("default_dtype"):
        step(f"torch default dtype {saved['default_dtype']}",
             lambda: torch.set_default_dtype(getattr(torch, saved["default_dtype"])))
    if saved.get("grad_enabled") is not None and saved["grad_enabled"] != now.get("grad_enabled"):
        step(f"torch grad {'enabled' if saved['grad_enabled'] else 'disabled'}",
             lambda: torch.set_grad_enabled(saved["grad_enabled"]))
    mode = (saved.get("deterministic"), saved.get("deterministic_warn_only"))
    if mode[0] is not None and mode != (now.get("deterministic"), now.get("deterministic_warn_only")):
        step(f"torch deterministic algorithms {'on' if mode[0] else 'off'}" + (" (warn only)" if mode[1] else ""),
             lambda: torch.use_deterministic_algorithms(mode[0], warn_only=bool(mode[1])))
    precision = saved.get("float32_matmul_precision")
    if precision and precision != now.get("float32_matmul_precision"):
        step(f"torch float32 matmul precision {precision}", lambda: torch.set_float32_matmul_precision(precision))
    threads = saved.get("num_threads")
    if threads and threads != now.get("num_threads"):
        if threads <= now["cpus"]:
            step(f"torch threads {threads}", lambda: torch.set_num_threads(threads))
        else:  # more threads than cores would slow every cell: said, with the call that matches the bits
            warn(f"torch used {threads} threads and this kernel has {now['cpus']} CPUs: it keeps "
                 f"{now['num_threads']}, so CPU sums and matmuls may differ in their last bits "
                 f"(torch.set_num_threads({threads}) matches them, slower)")
    flush = saved.get("flush_denormal")
    if flush is not None and flush != now.get("flush_denormal"):
        step(f"torch flush denormal {'on' if flush else 'off'}", lambda: _set_flush_denormal(torch, flush))
    for key, (where, attr, label) in _TORCH_SWITCHES.items():
        if saved.get(key) is not None and saved[key] != now.get(key):
            step(f"{label} {'on' if saved[key] else 'off'}",
                 lambda k=key, w=where, a=attr: setattr(_switch_owner(torch, w), a, saved[k]))


def _set_flush_denormal(torch, flush: bool) -> None:
    if not torch.set_flush_denormal(flush):
        raise RuntimeError("this CPU has no denormal flushing")


def differences(saved: dict | None) -> list[str]:
    """The recorded settings that differ now, each as "what: now X, saved Y" (verify names them: a restore would
    set them back, and later cells compute with them)."""
    if not saved:
        return []
    now, out = capture(), []

    def differ(label, was, is_now):
        if was is not None and was != is_now:
            out.append(f"{label}: {is_now}, saved {was}")

    differ("working directory", saved.get("cwd"), now["cwd"])
    for name, value in (saved.get("decimal") or {}).items():
        differ(f"decimal {name}", value, (now.get("decimal") or {}).get(name))
    for name, value in (saved.get("numpy_errors") or {}).items():
        differ(f"numpy errors {name}", value, (now.get("numpy_errors") or {}).get(name))
    torch_now = now.get("torch") or {}
    labels = {key: label for key, (_where, _attr, label) in _TORCH_SWITCHES.items()}
    for key, value in (saved.get("torch") or {}).items():
        if key != "cpus":  # the machine's, not a setting
            differ(labels.get(key) or f"torch {_TORCH_NAMES.get(key, key.replace('_', ' '))}", value,
                   torch_now.get(key))
    return out


def _shown(saved: dict, now: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in saved.items() if now.get(k) != v)
