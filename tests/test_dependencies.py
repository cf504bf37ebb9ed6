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
# declared without being imported, each for a stated reason (pyproject.toml's comment)
NOT_IMPORTED = {"ipykernel", "safetensors"}


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
                    out |= {d.lower().replace("_", "-") for d in dists.get(top, [top])}
    return out


def test_declared_dependencies_are_the_imported_ones():
    required = {name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {name(r) for extra in ("gke", "torch") for r in PYPROJECT["project"]["optional-dependencies"][extra]}
    imported = imported_distributions()
    assert imported - required - extras == set(), "imported but not declared in pyproject.toml"
    assert required - imported == NOT_IMPORTED, "declared in pyproject.toml but imported nowhere"
