"""REST handlers under <base_url>gkews/: thin shells over the Lifecycle and the checkpoint store."""
from __future__ import annotations

import asyncio
import functools
import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .checkpoints import CheckpointCatalog
from .lifecycle import BadRequest, LifecycleError
from .notebook_actions import NotebookActions

AUTH_RESOURCE = "gkews"


class GkewsHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def lifecycle(self):
        return self.settings["gkews_lifecycle"]

    @property
    def catalog(self) -> CheckpointCatalog:
        return self.settings["gkews_catalog"]

    def body(self) -> dict:
        raw = self.request.body
        if not raw or not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            raise BadRequest(f"the request body is not valid JSON ({exc}); send e.g. "
                             '{"notebooks": ["path/to/notebook.ipynb"]} or nothing') from None
        if not isinstance(data, dict):
            raise BadRequest('the request body must be a JSON object, e.g. {"notebooks": [...]}')
        unknown = set(data) - self.accepted
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(sorted(unknown))}; accepted: "
                             f"{', '.join(sorted(self.accepted)) or 'none'}")
        return data

    accepted: set[str] = set()

    def reply(self, status: int, payload) -> None:
        self.set_status(status)
        self.finish(json.dumps(payload))



def answers_errors(method):
    """A LifecycleError becomes its status code with a JSON message (and, on 409, the current status)."""
    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        try:
            return await method(self, *args, **kwargs)
        except LifecycleError as exc:
            payload = {"message": str(exc), "reason": type(exc).__name__}
            if exc.status_code == 409:
                payload["status"] = self.lifecycle.status()
            self.reply(exc.status_code, payload)
    return wrapper


class StatusHandler(GkewsHandler):
    @web.authenticated
    @authorized
    @answers_errors
    async def get(self):
        self.reply(200, self.lifecycle.status())


class PauseHandler(GkewsHandler):
    accepted = {"notebooks", "interrupt"}

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        body = self.body()
        status = await self.lifecycle.request_pause(body.get("notebooks"), body.get("interrupt", False))
        self.reply(202, status)


class ResumeHandler(GkewsHandler):
    accepted = {"notebooks"}

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        body = self.body()
        self.reply(202, await self.lifecycle.request_resume(body.get("notebooks")))


class CheckpointsHandler(GkewsHandler):
    @web.authenticated
    @authorized
    @answers_errors
    async def get(self):
        notebook = self.get_argument("notebook", None)
        self.reply(200, {"checkpoints": await (asyncio.to_thread(self.catalog.list, notebook))})


class CheckpointNowHandler(GkewsHandler):
    accepted = {"notebook"}

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        self.reply(201, await NotebookActions(self.lifecycle).checkpoint_now(self.body()))


class CheckpointRestoreHandler(GkewsHandler):
    accepted = {"notebook"}

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self, checkpoint_id):
        self.reply(200, await NotebookActions(self.lifecycle).restore(checkpoint_id, self.body()))


class CheckpointAutoHandler(GkewsHandler):
    accepted = {"notebook", "action"}

    @web.authenticated
    @authorized
    @answers_errors
    async def post(self):
        self.reply(200, await NotebookActions(self.lifecycle).auto(self.body()))


class CheckpointRewindHandler(GkewsHandler):
    accepted = {"notebook", "cell"}

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
        needed = {nb.get("checkpoint"): nb["path"] for nb in self.lifecycle.status()["notebooks"]
                  if nb.get("status") == "released"}
        await asyncio.to_thread(self.catalog.delete, checkpoint_id, needed)
        self.set_status(204)
        self.finish()


class EventsHandler(GkewsHandler):
    @web.authenticated
    @authorized
    @answers_errors
    async def get(self):
        try:
            since = float(self.get_argument("since", "0"))
        except ValueError:
            raise web.HTTPError(400, "since must be a number: seconds since the epoch, as in an event's time") from None
        events = await asyncio.to_thread(self.lifecycle.store.events, since)
        self.reply(200, {"events": events})


def handlers(base_url: str) -> list:
    def route(path):
        return url_path_join(base_url, "gkews", path)
    return [
        (route("status"), StatusHandler),
        (route("pause"), PauseHandler),
        (route("resume"), ResumeHandler),
        (route("checkpoints"), CheckpointsHandler),
        (route(r"checkpoints/([0-9]{8}-[0-9]{6}-[0-9]{3}-[0-9a-f]{4})"), CheckpointHandler),
        (route("events"), EventsHandler),
        (route("checkpoints/now"), CheckpointNowHandler),
        (route("checkpoints/auto"), CheckpointAutoHandler),
        (route("checkpoints/rewind"), CheckpointRewindHandler),
        (route(r"checkpoints/([0-9]{8}-[0-9]{6}-[0-9]{3}-[0-9a-f]{4})/restore"), CheckpointRestoreHandler),
    ]
