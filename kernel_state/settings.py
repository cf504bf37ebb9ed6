"""Process-wide settings a notebook changes and later cells compute with, saved and put back with a checkpoint.

No variable holds them, yet they decide what the next cell computes: `torch.set_default_dtype(torch.float64)`
makes every new tensor float64, `torch.set_grad_enabled(False)` stops autograd, `torch.use_deterministic_algorithms`
picks other kernels, `np.seterr(all="raise")` turns a warning into an error, `decimal.getcontext().prec` the digits
of every Decimal, `%cd` where relative paths lead. A restore into a fresh kernel left them at the defaults, and
said nothing. Each is recorded as JSON; a full restore sets back those that differ and names them. Only modules
the kernel has imported are read, and a setting the restoring kernel cannot take is named, never fatal.
"""
from __future__ import annotations

import os
import sys


def capture() -> dict:
    """{setting: value}, JSON."""
    out = {"cwd": os.getcwd()}
    decimal = sys.modules.get("decimal")
    if decimal is not None:
        context = decimal.getcontext()
        out["decimal"] = {"prec": context.prec, "rounding": context.rounding}
    np = sys.modules.get("numpy")
    if np is not None and hasattr(np, "geterr"):
        out["numpy_errors"] = dict(np.geterr())
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_default_dtype"):
        out["torch"] = {"default_dtype": str(torch.get_default_dtype()).replace("torch.", ""),
                        "grad_enabled": torch.is_grad_enabled(),
                        "deterministic": torch.are_deterministic_algorithms_enabled(),
                        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
                        "float32_matmul_precision": torch.get_float32_matmul_precision()}
    return out


def apply(saved: dict) -> tuple[list[str], list[str]]:
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
            step(f"decimal {name} {value}", lambda n=name, v=value: setattr(decimal.getcontext(), n, v))
    errors = saved.get("numpy_errors")
    if errors and now.get("numpy_errors") != errors:
        import numpy as np
        step(f"numpy errors {_shown(errors, now.get('numpy_errors', {}))}", lambda: np.seterr(**errors))
    _torch(saved.get("torch") or {}, now.get("torch") or {}, step)
    cwd = saved.get("cwd")
    if cwd and cwd != now["cwd"]:
        if os.path.isdir(cwd):
            step(f"working directory {cwd}", lambda: os.chdir(cwd))
        else:
            warnings.append(f"the working directory {cwd} is gone: the kernel stays in {now['cwd']} (relative "
                            f"paths lead there)")
    return done, warnings


def _torch(saved: dict, now: dict, step) -> None:
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


def _shown(saved: dict, now: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in saved.items() if now.get(k) != v)
