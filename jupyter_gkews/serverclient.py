"""A jupyter server with the extension, spoken to over HTTP and the kernel websocket, as a browser does.

Used by `jupyter gkews resume-test` (against a server it starts, or one already running somewhere else:
nothing here reads the server's files) and by the tests.
"""
from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request

#: What a request meets while a server is away (a Pod paused by the backend, a restart).
UNREACHABLE = (urllib.error.URLError, ConnectionError, OSError)


class ServerClient:
    """request_timeout: seconds for one HTTP request."""

    def __init__(self, url: str, token: str, request_timeout: float = 60):
        self.url = url if url.endswith("/") else url + "/"
        self.token, self.request_timeout = token, request_timeout

    # -- HTTP ------------------------------------------------------------------------------------------
    def request(self, method: str, path: str, body=None, timeout: float | None = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout if timeout is None else timeout) as r:
                code, raw = r.status, r.read()
        except urllib.error.HTTPError as exc:
            code, raw = exc.code, exc.read()
        try:
            return code, (json.loads(raw) if raw.strip() else None)
        except ValueError:  # not JSON: a page from something in front of the server, say
            return code, {"message": raw.decode(errors="replace")[:500]}

    def get(self, path: str):
        """GET path; the body, asserting a 200."""
        code, payload = self.request("GET", path)
        if code != 200:
            raise AssertionError((path, code, payload))
        return payload

    def post(self, path: str, body=None) -> tuple[int, object]:
        """POST path (body {} by default); (code, body) whatever the code."""
        return self.request("POST", path, body if body is not None else {})

    def post_ok(self, path: str, body=None):
        """POST path; the body, raising RuntimeError on a code outside 2xx."""
        code, payload = self.post(path, body)
        if not 200 <= code < 300:
            raise RuntimeError(f"POST {path}: {code} {payload}")
        return payload

    def delete(self, path: str) -> tuple[int, object]:
        return self.request("DELETE", path)

    def status(self) -> dict:
        return self.get("gkews/status")

    def wait_for(self, states: tuple[str, ...], timeout: float = 300, interval: float = 0.1,
                 tolerate_unreachable: bool = False) -> dict:
        """Poll the status until its state is one of states; the status. With tolerate_unreachable, a
        server that does not answer (its Pod is paused) is waited for too."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                s = self.status()
            except UNREACHABLE:
                if not tolerate_unreachable or time.monotonic() > deadline:
                    raise
                s = None
            if s is not None and s["state"] in states:
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"still {s['state']}/{s['phase']} after {timeout}s: {s['message']}")
            time.sleep(interval)

    # -- contents and sessions -------------------------------------------------------------------------
    def create_notebook(self, path: str, cells: list[str] = ()) -> None:
        """Write a notebook through the contents API (its folders first)."""
        parts = path.split("/")
        for i in range(1, len(parts)):  # PUT of a folder that exists leaves it as it is
            self.request("PUT", f"api/contents/{urllib.parse.quote('/'.join(parts[:i]))}", {"type": "directory"})
        cells_json = [{"cell_type": "code", "source": c, "metadata": {}, "outputs": [], "execution_count": None}
                      for c in cells]
        notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells_json}
        code, body = self.request("PUT", f"api/contents/{urllib.parse.quote(path)}",
                                  {"type": "notebook", "format": "json", "content": notebook})
        if code not in (200, 201):
            raise RuntimeError(f"could not create {path}: {code} {body}")

    def start_session(self, path: str, kernel_name: str = "python3") -> dict:
        code, session = self.post("api/sessions", {"path": path, "name": path.rsplit("/", 1)[-1],
                                                   "type": "notebook", "kernel": {"name": kernel_name}})
        if code != 201:
            raise RuntimeError(f"could not start a kernel for {path}: {code} {session}")
        return session

    # -- kernels, over the websocket a notebook page uses ----------------------------------------------
    def execute(self, kernel_id: str, code: str, timeout: float = 180) -> str:
        """Run a cell in the kernel through the server's websocket; its stdout. RuntimeError when the cell
        failed: the execute_reply's status decides (a magic's UsageError sends no `error` message on IOPub, only
        its text on stderr, and counted as a success)."""
        return asyncio.run(self._execute(kernel_id, code, timeout))

    async def _execute(self, kernel_id: str, code: str, timeout: float) -> str:
        from jupyter_client.jsonutil import json_default
        from jupyter_client.session import Session
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        session = Session(username="gkews")  # builds the message header as a kernel client does
        ws_url = self.url.replace("http", "ws", 1) + f"api/kernels/{kernel_id}/channels?session_id={session.session}"
        conn = await asyncio.wait_for(websocket_connect(HTTPRequest(
            ws_url, headers={"Authorization": f"token {self.token}"})), timeout)
        request = session.msg("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False,
            "stop_on_error": True})
        msg_id = request["header"]["msg_id"]
        conn.write_message(json.dumps({**request, "channel": "shell", "buffers": []}, default=json_default))
        out, stderr, error, idle, reply = [], [], None, False, None
        try:
            while not (idle and reply is not None):
                raw = await asyncio.wait_for(conn.read_message(), timeout)
                if raw is None:
                    raise RuntimeError(f"the kernel {kernel_id} closed its connection during the cell")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    (out if content.get("name") == "stdout" else stderr).append(content["text"])
                elif kind == "error":
                    error = f"{content['ename']}: {content['evalue']}"
                elif kind == "status" and content.get("execution_state") == "idle":
                    idle = True
                elif kind == "execute_reply":
                    reply = content
        finally:
            conn.close()
        status = reply.get("status")
        if error or status != "ok":
            if not error and reply.get("ename"):
                error = f"{reply['ename']}: {reply.get('evalue', '')}"
            if not error:  # a UsageError says only this on stderr; an aborted cell says nothing
                said = "".join(stderr).strip()
                error = f"{said} (execute_reply status {status!r})" if said else f"execute_reply status {status!r}"
            raise RuntimeError(f"cell failed: {error}")
        return "".join(out)
