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


async def test_a_wrong_notebook_path_is_named_for_what_is_wrong_with_it(jp_fetch, jp_serverapp, jp_root_dir):
    """An empty path said '"notebooks" must be a list of notebook paths' (it was one); `/hash#1.ipynb`, in the
    root, said only "outside the contents root"; a NUL in ?notebook= listed nothing (200, as a space); a notebook
    renamed while paused, resumed by its old name, "was not paused"."""
    from serverkit import open_notebook, run_cell, wait_for
    r = await post(jp_fetch, "pause", {"notebooks": [""]})
    assert r.code == 400 and await message(r) == ('"notebooks" holds an empty path: name each notebook by its path '
                                                  'relative to the contents root, as in "work/train.ipynb"'), r.body
    r = await post(jp_fetch, "pause", {"notebooks": ["/hash#1.ipynb"]})
    assert r.code == 400 and "(it starts with /); give a path relative to it ('hash#1.ipynb' names the one in " \
        "the root)" in await message(r), r.body
    r = await jp_fetch("gkews", "checkpoints", params={"notebook": "a\0.ipynb"}, raise_error=False)
    assert r.code == 400 and "contains a NUL character" in await message(r), r.body
    kid = (await open_notebook(jp_fetch, jp_root_dir, "q2.ipynb"))["kernel"]["id"]
    await run_cell(jp_serverapp, kid, "x = 1")
    assert (await post(jp_fetch, "pause")).code == 202
    assert (await wait_for(jp_fetch, ("paused", "failed")))["state"] == "paused"
    await jp_fetch("api", "contents", "q2.ipynb", method="PATCH", body=json.dumps({"path": "q3 #.ipynb"}))
    r = await post(jp_fetch, "resume", {"notebooks": ["q2.ipynb"]})
    assert r.code == 400 and await message(r) == "'q2.ipynb' was renamed to 'q3 #.ipynb' while paused: name it " \
        "'q3 #.ipynb'", r.body
    assert (await post(jp_fetch, "resume", {"notebooks": ["q3 #.ipynb"]})).code == 202
    assert (await wait_for(jp_fetch, ("active", "failed")))["state"] == "active"
