"""Which notebook cell last assigned a name, from IPython's input history."""
from __future__ import annotations

import ast


def _assigning_line(tree: ast.AST, name: str) -> int | None:
    """Line number of the last statement in the cell that binds `name`."""
    found = None
    for node in ast.walk(tree):
        binds = (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)) or (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name) or (
            isinstance(node, (ast.Import, ast.ImportFrom))
            and any((a.asname or a.name.split(".")[0]) == name for a in node.names))
        if binds and (found is None or node.lineno > found):
            found = node.lineno
    return found


def defining_cell(shell, name: str) -> dict | None:
    """{"cell": execution count, "source": the line that assigns `name`, "line": its number, "lines": the
    cell's line count} of the newest cell that assigns `name`: a hint that quotes one line of a longer cell
    must say so, or the user re-runs that line alone without what it needs."""
    if shell is None:
        return None
    cells = getattr(getattr(shell, "history_manager", None), "input_hist_parsed", None) or []
    for count in range(len(cells) - 1, 0, -1):
        source = cells[count]
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        line = _assigning_line(tree, name)
        if line is not None:
            lines = source.splitlines()
            return {"cell": count, "source": lines[line - 1].strip()[:120], "line": line, "lines": len(lines)}
    return None
