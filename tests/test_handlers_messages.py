"""The error messages of the REST routes name what the user asked for as they asked it: a path with a
space, a percent sign or a newline reads back as itself (not URL-escaped, no doubled %, one line)."""
from __future__ import annotations

import json

import pytest

from serverkit import gkews_server_config, post


@pytest.fixture
def jp_server_config(tmp_path):
    return gkews_server_config(tmp_path)


async def message(response) -> str:
    return json.loads(response.body)["message"]


async def test_an_unknown_route_names_the_path_as_asked(jp_fetch):
    # jp_fetch URL-escapes the path, as a browser does: "my run%1.ipynb" travels as my%20run%251.ipynb
    for asked, shown in [("my run%1.ipynb", "my run%1.ipynb"), ("two\nlines", "two\\nlines")]:
        r = await jp_fetch("gkews", asked, raise_error=False)
        assert r.code == 404, r.body
        text = await message(r)
        assert text.startswith(f"no route gkews/{shown}: the routes are status, pause"), text
        assert "%%" not in text and "\n" not in text, text


async def test_a_notebook_path_in_an_error_reads_as_given(jp_fetch):
    odd = "50% off.ipynb"
    r = await jp_fetch("gkews", "checkpoints", params={"notebook": "/" + odd}, raise_error=False)
    assert r.code == 400 and f"notebook path '/{odd}' is outside the contents root" in await message(r), r.body
    r = await post(jp_fetch, "pause", {"notebooks": [odd]})
    assert r.code == 400 and f"no running kernel for '{odd}'" in await message(r), r.body
    r = await post(jp_fetch, "checkpoints/now", {"notebook": odd})
    assert r.code == 409 and f"'{odd}' has no running kernel" in await message(r), r.body
