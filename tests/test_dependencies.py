"""pyproject.toml declares what the two packages import, and nothing they do not need."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# declared without being imported (each would need a stated reason in pyproject.toml's comment): none now,
# since kernel_state.hold imports ipykernel and kernel_state.cuda_io the safetensors library
NOT_IMPORTED: set[str] = set()


def name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def imported_distributions() -> set[str]:
    dists = importlib.metadata.packages_distributions()
    out = set()
    for package in ("jupyter_gkews", "kernel_state"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top in ("jupyter_gkews", "kernel_state", "__future__"):
                        continue
                    out |= {d.lower().replace("_", "-") for d in dists.get(top, [NOT_INSTALLED.get(top, top)])}
    return out


#: modules of optional extras that are not installed here (the gpu extra), by their distribution's name
NOT_INSTALLED = {"cuda": "cuda-bindings", "pynvml": "nvidia-ml-py"}


def test_declared_dependencies_are_the_imported_ones():
    required = {name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {name(r) for extra in ("gke", "torch", "gpu")
              for r in PYPROJECT["project"]["optional-dependencies"][extra]}
    imported = imported_distributions()
    assert imported - required - extras == set(), "imported but not declared in pyproject.toml"
    assert required - imported == NOT_IMPORTED, "declared in pyproject.toml but imported nowhere"
