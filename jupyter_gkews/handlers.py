"""REST handlers under <base_url>gkews/: thin shells over the Lifecycle and the checkpoint store."""
from __future__ import annotations

import asyncio
import functools
import json
import math

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.services.kernels.handlers import KernelActionHandler
from jupyter_server.services.sessions.handlers import SessionHandler, SessionRootHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.escape import url_unescape

from .checkpoints import CheckpointCatalog
from .errors import (BadRequest, Conflict, KernelCallFailed, LifecycleError, NotFound, StateNotWritable,
                     StoreUnusable)
from .lifecycle import pinned_checkpoints
from .lifecycle.paths import clean_notebook_paths, one_line
from .notebook_actions import NotebookActions
from .schema import CHECKPOINT_ID, EXAMPLES, validate_request
from .states import PauseReason

AUTH_RESOURCE = "gkews"

#: the one place where the domain's errors become HTTP status codes (the most specific class wins)
STATUS_CODES: dict[type, int] = {BadRequest: 400, NotFound: 404, Conflict: 409, KernelCallFailed: 500,
                                 StateNotWritable: 507, StoreUnusable: 500,
                                 LifecycleError: 400}


def status_code(exc: LifecycleError) -> int:
    return next(STATUS_CODES[cls] for cls in type(exc).__mro__ if cls in STATUS_CODES)


class GkewsHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    async def prepare(self) -> None:
        """A method the route does not take: 403 without credentials (as for every request, whatever
        allow_unauthenticated_access says), else 405 naming the methods it takes, with a reason class."""
        await super().prepare()
        method = self.request.method or ""
        if self._finished or method == "OPTIONS":  # OPTIONS: CORS preflight, answered by Jupyter Server
            return
        takes = [m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
                 if getattr(type(self), m.lower()) is not getattr(web.RequestHandler, m.lower())]
        if method in takes:
            return
        if not self.current_user:
            raise web.HTTPError(403)
        route = self.request.path[len(self.base_url):] if self.request.path.startswith(self.base_url) \
            else self.request.path
        self.reply(405, {"message": f"{method} is not a method of {route}: it takes {', '.join(takes)}",
                         "reason": "MethodNotAllowed"})

    @property
    def lifecycle(self):
        return self.settings["gkews_lifecycle"]

    @property
    def catalog(self) -> CheckpointCatalog:
        return self.settings["gkews_catalog"]

    def body(self) -> dict:
        raw = self.request.body
        try:
            data = json.loads(raw, object_pairs_hook=_no_repeated_keys) if raw and raw.strip() else {}
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            raise BadRequest(f"the request body is not valid JSON ({exc}); send e.g. "
                             f"{EXAMPLES[self.request_schema]}") from None
        return validate_request(self.request_schema, data)

    request_schema = ""  # the name of the body's schema in schema.REQUESTS
    query_params: tuple[str, ...] = ()  # the query parameters the route reads

    def check_query(self) -> None:
        """An unknown or repeated query parameter is a mistake to name: `events?snce=...` answered every event,
        and `since` given twice took the last one, silently. (`token` is Jupyter Server's own; a bare number,
        `?1765000000000`, JupyterLab's cache buster on every request of its page.)"""
        given = self.request.query_arguments
        unknown = sorted(k for k in given if k not in self.query_params and k not in ("token", "_xsrf")
                         and not (k.isdigit() and given[k] == [b""]))
        if unknown:
            takes = ", ".join(self.query_params) or "none"
            raise BadRequest(f"unknown query parameter {', '.join(map(repr, unknown))}: this route takes {takes}")
        twice = sorted(k for k in self.query_params if len(given.get(k, [])) > 1)
        if twice:
            raise BadRequest(f"the query parameter {twice[0]!r} is given {len(given[twice[0]])} times: give it once")

    def reply(self, status: int, payload) -> None:
        self.set_status(status)
        self.finish(json.dumps(payload))


def _no_repeated_keys(pairs: list) -> dict:
    """A key given twice (`{"notebooks": ["a.ipynb"], "notebooks": []}`) is a mistake: json keeps the last one
    silently, and a pause of every notebook would go ahead for a body that named one."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def answers_errors(method):
    """A LifecycleError becomes its status code with a JSON message (and, on 409, the current status);
    every route answers 503 with the reason when the extension could not start."""
    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        unavailable = self.settings.get("gkews_unavailable")
        if unavailable:  # the extension could not start: every route says why, not 404
            self.reply(503, {"message": unavailable, "reason": "ExtensionUnavailable"})
            return
        try:
            self.check_query()
            return await method(self, *args, **kwargs)
        except LifecycleError as exc:
            code = status_code(exc)
            payload = {"message": str(exc), "reason": type(exc).__name__}
            if code == 409:
                starting = getattr(exc, "starting", False)
                payload["status"] = await self.lifecycle.shown() if starting else self.lifecycle.status()
            self.reply(code, payload)
    return wrapper


class StatusHandler(GkewsHandler):
    @web.authenticated
    @authorized
    @answers_errors
    async def get(self):
        self.reply(200, self.lifecycle.status())


class PauseHandler(GkewsHandler):
    request_schema = "pause"

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        body = self.body()
        status = await self.lifecycle.request_pause(body.get("notebooks"), body.get("interrupt", False),
                                                    reason=body.get("reason", PauseReason.USER))
        self.reply(202, status)


class ResumeHandler(GkewsHandler):
    request_schema = "resume"

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        body = self.body()
        self.reply(202, await self.lifecycle.request_resume(body.get("notebooks")))


RENAME_WAIT = 10.0  # seconds a list waits for the store moves of renames just made; then it lists as it is


class CheckpointsHandler(GkewsHandler):
    query_params = ("notebook",)

    @web.authenticated
    @authorized
    @answers_errors
    async def get(self):
        raw = self.request.query_arguments.get("notebook")  # get_argument turns a NUL into a space: listed nothing
        notebook = self.decode_argument(raw[-1], name="notebook") if raw else None
        if notebook == "":
            raise BadRequest('the "notebook" parameter is empty: give a notebook path relative to the contents '
                             'root, or leave it out to list every notebook\'s checkpoints')
        if notebook is not None:  # the same rules as every route that names a notebook
            notebook = clean_notebook_paths([notebook])[0]
        renames = self.settings.get("gkews_renames")
        if renames is not None:  # a rename just made: its checkpoints listed under the new name (bounded)
            await renames.moved(timeout=RENAME_WAIT)
        self.reply(200, {"checkpoints": await (asyncio.to_thread(self.catalog.list, notebook))})


class CheckpointNowHandler(GkewsHandler):
    request_schema = "checkpoint-now"

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        self.reply(201, await NotebookActions(self.lifecycle).checkpoint_now(self.body()))


class CheckpointRestoreHandler(GkewsHandler):
    request_schema = "restore"

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self, checkpoint_id):
        self.reply(200, await NotebookActions(self.lifecycle).restore(checkpoint_id, self.body()))


class CheckpointAutoHandler(GkewsHandler):
    request_schema = "auto"

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        self.reply(200, await NotebookActions(self.lifecycle).auto(self.body()))


class CheckpointRewindHandler(GkewsHandler):
    request_schema = "rewind"

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        self.reply(200, await NotebookActions(self.lifecycle).rewind(self.body()))


class CheckpointHandler(GkewsHandler):
    @web.authenticated
    @authorized
    @answers_errors
    async def delete(self, checkpoint_id):
        lifecycle = self.lifecycle.status()
        # what a pause in progress already took counts too (the store's pins say the same, for everyone)
        needed = pinned_checkpoints(lifecycle)
        await asyncio.to_thread(self.catalog.delete, checkpoint_id, needed)
        self.set_status(204)
        self.finish()


class EventsHandler(GkewsHandler):
    query_params = ("since",)

    @web.authenticated
    @authorized
    @answers_errors
    async def get(self):
        try:
            since = float(self.get_argument("since", "0"))
        except ValueError:
            since = math.nan
        # nan compares false with every time, inf is after all of them: an empty answer that looks like "none"
        if not math.isfinite(since):
            raise BadRequest("since must be a number: seconds since the epoch, as in an event's time")
        events = await asyncio.to_thread(self.lifecycle.store.events, since)
        self.reply(200, {"events": events})


class UnknownRouteHandler(GkewsHandler):
    """Any other path under gkews/ (a malformed checkpoint id, a typo): a JSON 404 that says so, not the
    server's HTML page. Only for a signed-in user: without credentials it is the 403 of every route."""

    async def prepare(self):
        await APIHandler.prepare(self)  # not GkewsHandler's: no method is this route's, every one gets the 404
        if not self.current_user:
            raise web.HTTPError(403)
        # the path as the user typed it (request.path is URL-escaped), on one line; replied, not raised:
        # an HTTPError's message without args comes out with every % doubled
        path = one_line(url_unescape(self.request.path.split("/gkews/", 1)[-1], plus=False))
        self.reply(404, {"reason": "NotFound", "message": (
            f"no route gkews/{path}: the routes are status, pause, resume, events, checkpoints[?notebook=], "
            f"checkpoints/now, checkpoints/auto, checkpoints/rewind, checkpoints/<id> and checkpoints/<id>/restore "
            f"(a checkpoint id looks like 20261129-221530-123-a1b2)")})


def refuse(handler, exc: Conflict) -> None:
    """A 409 in jupyter_server's own shape, from a handler standing in for one of its routes."""
    handler.set_status(409)
    handler.finish(json.dumps({"message": str(exc), "reason": "Conflict"}))


class SessionsHandler(SessionRootHandler):
    """jupyter_server's POST api/sessions, except for a session on the kernel a pause released (by its id, or a
    console at its notebook's path): jupyter_server would start an empty kernel for it; this says to resume."""

    @web.authenticated
    @authorized
    async def post(self):
        lifecycle = self.settings.get("gkews_lifecycle")  # none when the extension is off: sessions as ever
        model = self.get_json_body()
        if lifecycle is not None and isinstance(model, dict):
            kernel = model.get("kernel") if isinstance(model.get("kernel"), dict) else {}
            try:
                await lifecycle.refuse_released_kernel(model.get("path"), model.get("type"), kernel.get("id"))
            except Conflict as exc:
                return refuse(self, exc)
        await super().post()


class SessionKernelHandler(SessionHandler):
    """jupyter_server's PATCH api/sessions/<id>, except a change of kernel for a notebook being paused or
    resumed, or paused, and a move of another session onto a paused notebook's path: 409 saying so (a
    paused notebook's own rename is followed as ever)."""

    @web.authenticated
    @authorized
    async def patch(self, session_id):
        lifecycle = self.settings.get("gkews_lifecycle")  # none when the extension is off: as ever
        model = self.get_json_body()
        if lifecycle is not None and isinstance(model, dict):
            try:
                if isinstance(model.get("kernel"), dict):
                    lifecycle.refuse_kernel_change(session_id)
                if "path" in model:
                    lifecycle.refuse_path_change(session_id, model["path"])
            except Conflict as exc:
                return refuse(self, exc)
        await super().patch(session_id)


#: jupyter_server's route of a session, as it spells it
SESSION_ROUTE = r"(?P<session_id>\w+-\w+-\w+-\w+-\w+)"

#: jupyter_server's route of a kernel action, as it spells it
KERNEL_ACTION_ROUTE = r"(?P<kernel_id>\w+-\w+-\w+-\w+-\w+)/(?P<action>restart|interrupt)"


class KernelActionsHandler(KernelActionHandler):
    """jupyter_server's POST api/kernels/<id>/restart|interrupt, except on a kernel a pause released: 409 saying
    the notebook is paused, where jupyter_server answered 500 ("Exception restarting kernel") or 404."""

    @web.authenticated
    @authorized
    async def post(self, kernel_id, action):
        lifecycle = self.settings.get("gkews_lifecycle")  # none when the extension is off: as ever
        if lifecycle is not None:
            try:
                lifecycle.refuse_kernel_action(kernel_id, action)
            except Conflict as exc:
                return refuse(self, exc)
        await super().post(kernel_id, action)


def session_handlers(base_url: str) -> list:
    """Ahead of jupyter_server's own routes (an extension's handlers are matched first)."""
    return [(url_path_join(base_url, "api", "sessions"), SessionsHandler),
            (url_path_join(base_url, "api", "sessions", SESSION_ROUTE), SessionKernelHandler),
            (url_path_join(base_url, "api", "kernels", KERNEL_ACTION_ROUTE), KernelActionsHandler)]


def handlers(base_url: str) -> list:
    def route(path):
        return url_path_join(base_url, "gkews", path)
    return [
        (route("status"), StatusHandler),
        (route("pause"), PauseHandler),
        (route("resume"), ResumeHandler),
        (route("checkpoints"), CheckpointsHandler),
        (route(f"checkpoints/({CHECKPOINT_ID})"), CheckpointHandler),
        (route("events"), EventsHandler),
        (route("checkpoints/now"), CheckpointNowHandler),
        (route("checkpoints/auto"), CheckpointAutoHandler),
        (route("checkpoints/rewind"), CheckpointRewindHandler),
        (route(f"checkpoints/({CHECKPOINT_ID})/restore"), CheckpointRestoreHandler),
        (route(".*"), UnknownRouteHandler),  # last: what no route above matched
    ]
