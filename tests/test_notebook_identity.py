"""One notebook identity for the magic and the server (issue 11, problem 7).

jupyter_server gives a kernel its notebook's absolute path (JPY_SESSION_NAME); the server names notebooks by
the path relative to its contents root. Before, the magic and the server filed checkpoints under the two
names: after a pause `%gkews_checkpoint list` said "No checkpoints yet" and `%gkews_checkpoint restore`
raised CheckpointNotFound. Now both use the relative path, and checkpoints an earlier version filed under
the absolute path are still found.
"""
from __future__ import annotations

import json
import re

import pytest

from serverkit import gkews_server_config, open_notebook, post, run_cell, wait_for

PATH = "work/identity.ipynb"
LEGACY_SAVE = """
import os
_root = os.environ.pop("GKEWS_CONTENTS_ROOT")  # what a kernel of an earlier version did: no contents root
x = "legacy"
%gkews_checkpoint save
os.environ["GKEWS_CONTENTS_ROOT"] = _root
print(os.environ["JPY_SESSION_NAME"])
"""


@pytest.fixture
def jp_server_config(tmp_path):
    return gkews_server_config(tmp_path)


def ids_in(text: str) -> list[str]:
    return re.findall(r"\d{8}-\d{6}-\d{3}-[0-9a-f]{4}", text)


async def checkpoints(jp_fetch) -> list[dict]:
    return json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]


async def test_magic_and_server_share_one_notebook_name(jp_fetch, jp_serverapp, jp_root_dir):
    session = await open_notebook(jp_fetch, jp_root_dir, PATH)
    kid = session["kernel"]["id"]
    session_name = (await run_cell(jp_serverapp, kid, LEGACY_SAVE)).strip().splitlines()[-1]
    assert session_name == str(jp_root_dir / PATH)  # the kernel is given the absolute path
    (legacy,) = ids_in(await run_cell(jp_serverapp, kid, "%gkews_checkpoint list"))
    (magic,) = ids_in(await run_cell(jp_serverapp, kid, 'x = "magic"\n%gkews_checkpoint save'))

    rows = await checkpoints(jp_fetch)
    assert len(rows) == 2 and {r["notebook"] for r in rows} == {PATH}  # one name, the server's

    assert (await post(jp_fetch, "pause")).code == 202
    paused = await wait_for(jp_fetch, ("paused", "failed"))
    assert paused["state"] == "paused", paused["message"]
    paused_id = paused["notebooks"][0]["checkpoint"]
    assert (await post(jp_fetch, "resume")).code == 202
    resumed = await wait_for(jp_fetch, ("active", "failed"))
    assert resumed["state"] == "active", resumed["message"]

    listed = ids_in(await run_cell(jp_serverapp, kid, "%gkews_checkpoint list"))
    assert listed == [paused_id, magic, legacy]  # newest first: "No checkpoints yet" before the fix
    out = await run_cell(jp_serverapp, kid, 'x = None\n%gkews_checkpoint restore\nprint(repr(x))')
    assert out.strip().endswith("'magic'")  # the pause's checkpoint, restored by the documented recovery
    out = await run_cell(jp_serverapp, kid, f'%gkews_checkpoint restore --checkpoint {legacy}\nprint(repr(x))')
    assert out.strip().endswith("'legacy'")  # filed under the absolute path by an earlier version: found

    rows = await checkpoints(jp_fetch)
    assert sorted(r["id"] for r in rows) == sorted(listed) and {r["notebook"] for r in rows} == {PATH}
    r = await jp_fetch("gkews", "checkpoints", legacy, method="DELETE", raise_error=False)
    assert r.code == 204
    assert legacy not in ids_in(await run_cell(jp_serverapp, kid, "%gkews_checkpoint list"))
