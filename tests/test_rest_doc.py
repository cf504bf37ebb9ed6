"""docs/rest-api.md lists exactly the routes and verbs the server registers."""
from __future__ import annotations

import re
from pathlib import Path

from jupyter_gkews.handlers import handlers

DOC = Path(__file__).resolve().parent.parent / "docs" / "rest-api.md"


def test_every_route_is_documented_and_every_documented_route_exists():
    documented = set(re.findall(r"^\| `(GET|POST|DELETE|PUT|PATCH) ([a-z/<>]+)(?:\[[^\]]*\])?`", DOC.read_text(), re.M))
    registered = set()
    for route, handler in handlers(""):
        path = route.split("gkews/", 1)[1]
        path = re.sub(r"\(.*\)", "<id>", path)
        for verb in ("get", "post", "delete", "put", "patch"):
            if verb in vars(handler):
                registered.add((verb.upper(), path))
    assert documented == registered
