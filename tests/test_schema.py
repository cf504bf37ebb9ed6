"""The REST API's one schema (jupyter_gkews/schema.py) against what the server answers, what
docs/rest-api.md says and what labextension/types.ts declares: none of them can drift from it."""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from jupyter_gkews import schema
from jupyter_gkews.errors import BadRequest
from jupyter_gkews.state import initial_state
from jupyter_gkews.states import Event, NotebookStatus, Phase, State, Verdict
from serverkit import gkews_server_config, open_notebook, post, run_cell, status

ROOT = Path(__file__).resolve().parent.parent
TYPES = (ROOT / "labextension" / "types.ts").read_text()
DOC = (ROOT / "docs" / "rest-api.md").read_text()
FIX = "; change jupyter_gkews/schema.py first, then the file named"

# the TypeScript interface of each answer the UI reads
INTERFACES = {"IStatus": "status", "INotebookStatus": "notebook", "IProgress": "progress", "ISkipped": "skipped",
              "ICheckpoint": "checkpoint", "ICheckpointNow": "checkpoint-now", "IRestoreResult": "restore"}


def ts_interfaces() -> dict[str, dict[str, bool]]:
    """{interface: {field: optional}} of types.ts."""
    out = {}
    for name, body in re.findall(r"export interface (\w+) \{\n(.*?)\n\}", TYPES, re.S):
        out[name] = {m[0]: bool(m[1]) for m in re.findall(r"^  (\w+)(\??):", body, re.M)}
    return out


@pytest.mark.parametrize("interface", sorted(INTERFACES))
def test_types_ts_declares_exactly_the_schema_fields(interface):
    fields = ts_interfaces()[interface]
    s = schema.RESPONSES[INTERFACES[interface]]
    assert set(fields) == set(s["properties"]), (f"labextension/types.ts {interface}: only in TS "
                                                 f"{set(fields) - set(s['properties'])}, only in the schema "
                                                 f"{set(s['properties']) - set(fields)}{FIX}")
    optional = {f for f, opt in fields.items() if opt}
    assert optional == set(s["properties"]) - set(s["required"]), f"{interface}: optional fields differ{FIX}"


def test_types_ts_unions_are_the_vocabulary():
    state = re.search(r"export type State = (.*?);", TYPES).group(1)
    assert re.findall(r"'([a-z-]+)'", state) == [s.value for s in State]
    verdict = re.search(r"  verdict\?: (.*?);", TYPES).group(1)
    assert set(re.findall(r"'([a-z-]+)'", verdict)) == {v.value for v in Verdict}


def documented_status() -> str:
    return re.search(r"## The status document\n\n```json\n(.*?)```", DOC, re.S).group(1)


def test_rest_api_md_documents_every_field_of_the_status_document():
    block = documented_status()
    keys = set(re.findall(r'"(\w+)":', block))
    fields = (set(schema.STATUS["properties"]) | set(schema.NOTEBOOK["properties"])
              | set(schema.TIMELINE["properties"]) | set(schema.SKIPPED["properties"]))
    examples = {"w", "gen"}  # variable names in the example
    assert fields - {"restored_from"} <= keys, (  # restored_from: shown in the GKE section
        f"docs/rest-api.md does not show {fields - keys}{FIX}")
    assert keys - examples <= fields, f"docs/rest-api.md shows fields the server never sends: {keys - fields}{FIX}"


def test_rest_api_md_lists_the_vocabulary():
    block = documented_status()

    def listed(field):
        line = re.search(rf'"{field}": [^/\n]*// (.*)', block).group(1)
        return [w.strip() for w in re.sub(r"\w+: ", "", line).replace("//", "|").split("|") if w.strip()]
    assert listed("state") == [s.value for s in State]
    assert listed("verdict") == [v.value for v in Verdict]
    status_lines = re.search(r'"status": "released",\s*// (.*?)\n\s*"checkpoint"', block, re.S).group(1)
    assert set(re.findall(r"[a-z-]+", status_lines.replace("//", ""))) == {s.value for s in NotebookStatus}
    phases = re.search(r'"phase": null,\s*// (.*?)\n\s*"message"', block, re.S).group(1)
    assert set(re.findall(r"[a-z]+(?:-[a-z]+)*", re.sub(r"(pausing|resuming):|//", "", phases))) == \
        {p.value for p in Phase}
    events = re.search(r"## Events\n(.*?)\n## ", DOC, re.S).group(1)
    further = re.search(r"Further events: (.*)", DOC).group(1)
    named = set(re.findall(r"`([a-z]+(?:-[a-z]+)*)`", events + further)) - {"event", "time", "state", "phase",
                                                                            "cycle", "error", "evidence"}
    assert named == {e.value for e in Event}, f"docs/rest-api.md events differ: {named ^ {e.value for e in Event}}"


def test_the_documented_status_example_is_valid():
    block = re.sub(r"//[^\n]*", "", documented_status())
    block = block.replace("...", "0").replace("{...}", "{}")
    doc = json.loads(block.replace('"skipped_at_save": {"gen": {0}}', '"skipped_at_save": {"gen": {}}'))
    schema.validate_response("status", doc)
    schema.validate_response("status", initial_state("local"))


@pytest.mark.parametrize("request_name, body, words", [
    ("pause", [], "must be a JSON object"),
    ("pause", {"notebook": ["a"]}, "unknown field(s) notebook; accepted: interrupt, notebooks, reason"),
    ("pause", {"reason": "idle policy"}, '"reason" must be "user" (the default) or "resume-test"'),
    ("pause", {"notebooks": "a.ipynb"}, '"notebooks" must be a list'),
    ("pause", {"notebooks": ["a.ipynb", ""]}, '"notebooks" holds an empty path: name each notebook by its path'),
    ("pause", {"interrupt": 1}, '"interrupt" must be true or false'),
    ("checkpoint-now", {}, 'give the notebook as {"notebook": '),
    ("restore", {"notebook": 3}, 'give the notebook as {"notebook": '),
    # JSON Schema's "integer" takes both; a 300-digit cell number came back in a 404
    ("rewind", {"notebook": "a.ipynb", "cell": 2.0}, 'give the cell as {"cell": 12}'),
    ("rewind", {"notebook": "a.ipynb", "cell": 1e300}, 'give the cell as {"cell": 12}'),
])
def test_requests_are_validated_with_a_message_naming_the_fix(request_name, body, words):
    with pytest.raises(BadRequest) as exc:
        schema.validate_request(request_name, body)
    assert words in str(exc.value)


@pytest.fixture
def jp_server_config(tmp_path, monkeypatch):
    monkeypatch.delenv("GKEWS_CHECKPOINT_ROOT", raising=False)
    return gkews_server_config(tmp_path)


async def test_every_answer_matches_the_schema(jp_fetch, jp_serverapp, jp_root_dir):
    s = await open_notebook(jp_fetch, jp_root_dir, "work/schema.ipynb")
    await run_cell(jp_serverapp, s["kernel"]["id"], "x = [1, 2]\ngen = (i for i in range(2))")
    r = await post(jp_fetch, "checkpoints/now", {"notebook": "work/schema.ipynb"})
    saved = json.loads(r.body)
    schema.validate_response("checkpoint-now", saved)
    listed = json.loads((await jp_fetch("gkews", "checkpoints")).body)["checkpoints"]
    for item in listed:
        schema.validate_response("checkpoint", item)
    r = await post(jp_fetch, f"checkpoints/{saved['id']}/restore", {"notebook": "work/schema.ipynb"})
    schema.validate_response("restore", json.loads(r.body))

    seen = []
    for action, until in (("pause", "paused"), ("resume", "active")):
        r = await post(jp_fetch, action)
        assert r.code == 202, r.body
        seen.append(json.loads(r.body))
        while seen[-1]["state"] != until:
            assert seen[-1]["state"] != "failed", seen[-1]["message"]
            await asyncio.sleep(0.05)
            seen.append(await status(jp_fetch))
    for doc in seen:
        schema.validate_response("status", doc)
    for event in json.loads((await jp_fetch("gkews", "events")).body)["events"]:
        schema.validate_response("event", event)
    # every line written is one the log's readers take (a detail of another type is skipped as damaged)
    assert jp_serverapp.web_app.settings["gkews_lifecycle"].store.read_events()[1] == []

    r = await post(jp_fetch, "resume")  # nothing paused: a 409 with the status
    assert r.code == 409
    schema.validate_response("error", json.loads(r.body))
    r = await jp_fetch("gkews", "events", params={"since": "soon"}, raise_error=False)
    assert r.code == 400 and json.loads(r.body)["reason"] == "BadRequest"  # the `reason` docs/rest-api.md promises
    r = await post(jp_fetch, "checkpoints/20200101-000000-000-abcd/restore", {"notebook": "work/schema.ipynb"})
    assert r.code == 404 and json.loads(r.body)["reason"] == "NotFound"  # CheckpointNotFound crossed the bridge
