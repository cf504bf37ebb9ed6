"""The REST API's one schema (JSON Schema, checked with the `jsonschema` package): the request bodies the
handlers validate, and the documents the server answers.

docs/rest-api.md and labextension/types.ts are checked against it by tests/test_schema.py, so neither can
drift from what the server accepts and answers. A field added to the status document goes here first.
"""
from __future__ import annotations

import jsonschema

from .errors import BadRequest
from .states import REQUEST_PAUSE_REASONS, Event, NotebookStatus, PauseReason, Phase, State, Verdict

#: a checkpoint id: YYYYMMDD-HHMMSS-mmm-xxxx (kernel_state.store.new_checkpoint_id)
CHECKPOINT_ID = r"[0-9]{8}-[0-9]{6}-[0-9]{3}-[0-9a-f]{4}"

_NOTEBOOKS_MESSAGE = '"notebooks" must be a list of notebook paths relative to the contents root'
_NOTEBOOK_MESSAGE = 'give the notebook as {"notebook": "path/relative/to/the/root.ipynb"}'


def _values(enum) -> list[str]:
    return [m.value for m in enum]


def _obj(properties: dict, required=(), extra: bool = False, description: str = "") -> dict:
    out = {"type": "object", "properties": properties, "required": list(required), "additionalProperties": extra}
    if description:
        out["description"] = description
    return out


_STR, _INT, _NUM, _BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
_NULLABLE_STR = {"type": ["string", "null"]}
_STR_LIST = {"type": "array", "items": _STR}
_EPOCH = {"type": ["number", "null"], "description": "seconds since the epoch"}

# -- requests -------------------------------------------------------------------------------------------
# a request names at most MAX_NAMED notebooks: its checks are linear, yet they run on the event loop
MAX_NAMED = 10_000
MAX_PATH = 4096  # Linux's PATH_MAX: no file's path is longer (a 5 MB one was echoed whole in the 400's message)
_NOTEBOOKS = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": MAX_PATH},
              "maxItems": MAX_NAMED,
              "x-message": _NOTEBOOKS_MESSAGE, "x-too-many": 'leave "notebooks" out to act on every notebook',
              "description": "paths relative to the contents root, as in /api/sessions"}
_NOTEBOOK = {"type": "string", "minLength": 1, "maxLength": MAX_PATH, "x-message": _NOTEBOOK_MESSAGE}

REQUESTS: dict[str, dict] = {
    "pause": _obj({"notebooks": _NOTEBOOKS,
                   "interrupt": {**_BOOL, "x-message": '"interrupt" must be true or false'},
                   # who asked: the report and the metrics count the release checklist's test apart
                   "reason": {"enum": [str(r) for r in REQUEST_PAUSE_REASONS],
                              "x-message": '"reason" must be "user" (the default) or "resume-test"'}}),
    "resume": _obj({"notebooks": _NOTEBOOKS}),
    "checkpoint-now": _obj({"notebook": _NOTEBOOK}, required=["notebook"]),
    "restore": _obj({"notebook": _NOTEBOOK}, required=["notebook"]),
    "auto": _obj({"notebook": _NOTEBOOK,
                  "action": {"enum": ["on", "off", "status"],
                             "x-message": 'give the action as {"action": "on"}, "off" or "status"'}},
                 required=["notebook"]),
    "rewind": _obj({"notebook": _NOTEBOOK,
                    "cell": {"type": "integer", "minimum": 1, "maximum": 2 ** 53,
                             "x-message": 'give the cell as {"cell": 12}, the number left of the cell'},
                    # the row the page shows: that very checkpoint, whichever kernel process ran its cell
                    "checkpoint": {"type": "string", "pattern": f"^{CHECKPOINT_ID}$",
                                   "x-message": '"checkpoint" must be a checkpoint id, like 20261129-221530-123-a1b2'}},
                   required=["notebook", "cell"]),
}
_ONE = '{"notebook": "path/to/notebook.ipynb"}'
#: what a body that is not JSON is told to look like, per route
EXAMPLES: dict[str, str] = {
    "pause": '{"notebooks": ["path/to/notebook.ipynb"]} or nothing',
    "resume": '{"notebooks": ["path/to/notebook.ipynb"]} or nothing',
    "checkpoint-now": _ONE, "restore": _ONE,
    "auto": '{"notebook": "path/to/notebook.ipynb", "action": "on"}',
    "rewind": '{"notebook": "path/to/notebook.ipynb", "cell": 12}',
}


def validate_request(request: str, body) -> dict:
    """The body if it matches REQUESTS[request]; else BadRequest with a message naming the field and the fix."""
    schema = REQUESTS[request]
    if not isinstance(body, dict):
        raise BadRequest('the request body must be a JSON object, e.g. {"notebooks": [...]}')
    for field, value in body.items():  # before the validator, which walks every item of a long list
        rule = schema["properties"].get(field, {})
        if isinstance(value, list) and len(value) > rule.get("maxItems", len(value)):
            raise BadRequest(f'"{field}" has {len(value)} items; at most {rule["maxItems"]} are accepted'
                             + (f"; {rule['x-too-many']}" if "x-too-many" in rule else ""))
        longest = rule.get("maxLength") or rule.get("items", {}).get("maxLength")
        for item in (value if isinstance(value, list) else [value]) if longest else ():
            if isinstance(item, str) and len(item) > longest:  # named by its start: the message stays short
                raise BadRequest(f'"{field}" holds a path of {len(item)} characters ({item[:40]!r}...); no file '
                                 f"path is longer than {longest}")
            if item == "":  # it is a list of paths: "must be a list of notebook paths" named the wrong fault
                raise BadRequest(f'"{field}" holds an empty path: name each notebook by its path relative to the '
                                 f'contents root, as in "work/train.ipynb"')
    unknown = set(body) - set(schema["properties"])
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(sorted(unknown))}; accepted: "
                         f"{', '.join(sorted(schema['properties'])) or 'none'}")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(body))
    if error is None:
        for field, value in body.items():  # JSON Schema takes 2.0 (and 1e300) for an integer; a cell number is not
            rule = schema["properties"][field]
            if rule.get("type") == "integer" and isinstance(value, float):
                raise BadRequest(rule.get("x-message") or f"{field} must be a whole number, not {value!r}")
        return body
    field = next((p for p in error.absolute_path if isinstance(p, str)), None)
    if field is None and error.validator == "required":
        field = error.message.split("'")[1]
    rule = schema["properties"].get(field, {})
    raise BadRequest(rule.get("x-message") or f"{field or 'the body'}: {error.message}")


# -- answers --------------------------------------------------------------------------------------------
SKIPPED = _obj({"reason": _STR, "cell": {"type": ["integer", "null"]}, "source": _STR, "line": _INT, "lines": _INT},
               description="a variable a save left out, and the cell that defined it")
_SKIPPED_MAP = {"type": "object", "additionalProperties": SKIPPED}

PROGRESS = _obj({"notebook": _STR, "notebooks_done": _INT, "notebooks_total": _INT, "variables_done": _INT,
                 "variables_total": _INT, "bytes_done": _INT}, description="how far the running step is")

TIMELINE = _obj({k: _EPOCH for k in (
    "last_activity", "pause_requested", "checkpoint_done", "snapshot_ready", "environment_stopped",
    "resume_requested", "capacity_obtained", "kernels_started", "restore_done", "kernel_usable")},
    description="epoch seconds of this cycle's steps")

NOTEBOOK = _obj({
    "path": _STR, "name": _STR, "type": _STR, "session_id": _STR, "kernel_id": _STR, "kernel_name": _STR,
    "status": {"enum": _values(NotebookStatus)},
    "checkpoint": _STR, "bytes": _INT, "bytes_written": _INT, "seconds": _NUM,
    "saved": _STR_LIST, "skipped": _SKIPPED_MAP, "interrupted": _BOOL,
    "error": _NULLABLE_STR, "next_step": _STR,
    "verdict": {"enum": _values(Verdict) + [None]}, "why_restored": _STR, "restore_seconds": _NUM,
    "restored": _STR_LIST, "failed": {"type": "object", "additionalProperties": _STR},
    "skipped_at_save": _SKIPPED_MAP, "warnings": _STR_LIST, "same_process": _BOOL,
    "message": _STR, "gpu": {"type": ["object", "null"], "description": "local GPU suspend: what was suspended"},
    "process": {"type": ["object", "null"], "description": "during the release: its kernel's pid and start time, "
                "for a server restarted then to stop a kernel that outlived it"},
    "saved_as": _STR, "reopened": _BOOL,
    "no_file": {**_BOOL, "description": "its session's path named no file on this server when it was paused (a "
                                        "client that keeps the notebook elsewhere): resumed all the same"},
    "deleted": {**_BOOL, "description": "its file was deleted while paused: not resumed (no verdict)"},
    "found_missing": {**_BOOL, "description": "deleted: the resume found its file gone (the server did not see it "
                                              "deleted); a later resume brings it back once the file is there again"},
    "unrestored": {"type": "object", "additionalProperties": _STR,
                   "description": "variables a resume could not restore (why), until a pause saves them again"},
    "unrestored_checkpoints": {**_STR_LIST, "description": "the earlier checkpoints that hold them (pinned)"},
    "companions": {"type": "array", "description": "the other sessions on its kernel (a console for the notebook)",
                   "items": _obj({"path": _STR, "name": _STR, "type": _STR, "session_id": _STR})},
}, required=["path", "kernel_id", "status"], description="one notebook of the session")

STATUS = _obj({
    "state": {"enum": _values(State)},
    "phase": {"enum": _values(Phase) + [None]},
    "message": _STR,
    "backend": _STR,
    "cycle": _INT,
    "progress": {"anyOf": [PROGRESS, {"type": "null"}]},
    "error": {"anyOf": [_obj({"reason": _STR, "next_step": _STR}, required=["reason", "next_step"]),
                        {"type": "null"}]},
    "snapshot": {"type": ["object", "null"], "description": "the backend's snapshot, when it takes one"},
    "restored_from": {"type": "object", "description": "set when the process found itself in a restored Pod"},
    "paused_by": {"enum": [str(r) for r in PauseReason],
                  "description": "who asked for this cycle's pause (set when it begins)"},
    "timeline": TIMELINE,
    "notebooks": {"type": "array", "items": NOTEBOOK},
    "updated": _NUM,
    "busy_timeout": {"type": "number", "minimum": 0,
                     "description": "seconds a pause waits for a running cell (GkewsApp.busy_timeout)"},
}, required=["state", "phase", "message", "backend", "cycle", "progress", "error", "timeline", "notebooks",
             "updated"], description="GET status, and the answer of POST pause and POST resume")

CHECKPOINT = _obj({"id": {"type": "string", "pattern": f"^{CHECKPOINT_ID}$"}, "created": _STR, "notebook": _STR,
                   "bytes": _INT, "variables": _INT, "skipped": _INT, "error": _STR, "auto": _BOOL,
                   "label": {"type": ["object", "null"],
                             "description": "kernel undo: the cell an automatic checkpoint was taken after"},
                   "only": {**_STR_LIST, "description": "a save of named variables (`save NAMES`): those it holds"},
                   "excluded": {**_STR_LIST, "description": "a save with --exclude: the variables it left out"}},
                  required=["id", "created", "notebook", "bytes", "variables", "skipped"],
                  description="one item of GET checkpoints")

CHECKPOINT_NOW = _obj({"notebook": _STR, "id": _STR, "bytes": _INT, "bytes_written": _INT, "saved": _STR_LIST,
                       "skipped": _SKIPPED_MAP, "seconds": _NUM},
                      required=["notebook", "id", "bytes", "saved", "skipped"], extra=True,
                      description="POST checkpoints/now")

RESTORE_RESULT = _obj({"notebook": _STR, "checkpoint": _STR, "restored": _STR_LIST,
                       "failed": {"type": "object", "additionalProperties": _STR},
                       "skipped_at_save": _SKIPPED_MAP, "warnings": _STR_LIST, "seconds": _NUM},
                      required=["notebook", "checkpoint", "restored", "failed", "warnings"], extra=True,
                      description="POST checkpoints/<id>/restore")

ERROR = _obj({"message": _STR, "reason": _STR, "status": STATUS}, required=["message"],
             description="any 4xx/5xx answer of ours; `reason` is the error class when the handlers raised one")

EVENT = _obj({"time": _NUM, "event": {"enum": _values(Event)}, "state": {"enum": _values(State)},
              "phase": {"enum": _values(Phase) + [None]}, "cycle": _INT},
             required=["time", "event", "state", "phase", "cycle"], extra=True,
             description="one line of events.jsonl; the details depend on the event")

RESPONSES: dict[str, dict] = {
    "status": STATUS, "notebook": NOTEBOOK, "progress": PROGRESS, "skipped": SKIPPED, "checkpoint": CHECKPOINT,
    "checkpoint-now": CHECKPOINT_NOW, "restore": RESTORE_RESULT, "error": ERROR, "event": EVENT,
}


def validate_response(name: str, document) -> None:
    """Raise jsonschema.ValidationError when an answer does not match its schema (tests)."""
    jsonschema.Draft202012Validator(RESPONSES[name]).validate(document)
