"""Which notebook cell last assigned a name, from IPython's input history."""
from __future__ import annotations

import ast


#: a cell's source -> {name: line of the last statement that binds it}, None for a cell that does not parse.
#: Parsed once per source, not once per name and save: a session of 1000 cells holding a few skipped values
#: (an open file, a lock, a generator) spent 1.4 s of every cell's automatic checkpoint parsing its history.
_BINDINGS: dict[str, dict[str, int] | None] = {}
_LIMIT = 20_000  # cells remembered; forgetting costs a parse again, never a wrong answer


def _bindings(source: str) -> dict[str, int] | None:
    found = _BINDINGS.get(source, False)
    if found is not False:
        return found
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        found = None
    else:
        found = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names = [node.id]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.asname or a.name.split(".")[0] for a in node.names]
            else:
                continue
            for name in names:
                if node.lineno > found.get(name, 0):
                    found[name] = node.lineno
    if len(_BINDINGS) >= _LIMIT:
        _BINDINGS.clear()
    _BINDINGS[source] = found
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
        line = (_bindings(source) or {}).get(name)
        if line is not None:
            lines = source.splitlines()
            return {"cell": count, "source": lines[line - 1].strip()[:120], "line": line, "lines": len(lines)}
    return None
