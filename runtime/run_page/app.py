"""The run page's routes: every request is checked (guard.py) before it is
routed; reading is GET, every action is a POST (a GET never changes a run).

    GET  /                          the runs (?state=, ?q= search in the task) and the start form
    POST /runs                      start a run or a flow
    GET  /run/ID                    the run: transcript, status, plan, actions
    GET  /run/ID/events             its Server-Sent Events (events.py)
    GET  /run/ID/screenshot/NAME    a browser screenshot from the run's directory
    POST /run/ID/answer|decide|message|cancel|fork
    GET  /static/page.js|page.css
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import OrderedDict
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlencode

from temporalio.client import Client

from agent_model.outcome_words import StateClass
from agent_model.run import StepRecord
from agent_model.workspace_names import workspace_name_for
from config.settings import Settings
from runtime.run_control import describe
from runtime.run_list import recent_runs
from runtime.run_page import screenshots
from runtime.run_page.actions import Actions, Done, EnsureWorker
from runtime.run_page.events import RunEvents, resume_point
from runtime.run_page.guard import Guard, finished
from runtime.run_page.html_text import run_url
from runtime.run_page.http_server import Request, Response, plain
from runtime.run_page.pages import STATES, Screenshots, message_page, run_page, runs_page
from runtime.run_page.run_view import RunView, current_input, read_run
from runtime.terminal_text import inert
from runtime.user_errors import RunControlError
from runtime.web_ui_link import run_link

STATIC_DIR = Path(__file__).parent / "static"
STATIC_FILES = {"page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}
RUN_ACTIONS = ("answer", "decide", "message", "cancel", "fork")
LISTED = 50
"""Runs the list shows."""
SEARCHED = 200
"""Runs read to find those whose task holds the search words."""
SEARCH_LIMIT = 200
FLASH_KEPT = 100
"""Action lines kept for the page a browser is sent to after a form without script."""
STREAMS_LIMIT = 16
"""Event streams served at once (each polls its run once a second)."""
FORBIDDEN = (
    "open the link that `python starter.py ui` printed (it carries this page's token); "
    "a page started again has a new token"
)


class RunPageApp:
    def __init__(self, client: Client, settings: Settings, guard: Guard, ensure_worker: EnsureWorker) -> None:
        self.client, self.settings, self.guard = client, settings, guard
        self.actions = Actions(client, settings, ensure_worker)
        self._flash: OrderedDict[str, tuple[bool, str]] = OrderedDict()
        self._streams = asyncio.Semaphore(STREAMS_LIMIT)
        self._static = {name: (STATIC_DIR / name).read_bytes() for name in STATIC_FILES}

    def finish(self, request: Request | None, response: Response) -> Response:
        return finished(response, dynamic=not (request is not None and request.path.startswith("/static/")))

    async def handle(self, request: Request) -> Response:
        guard = self.guard
        if not guard.host_ok(request):
            return plain(403, "this page answers only to its own address (the Host header names another)")
        if request.method == "GET" and "token" in request.query:
            return self._take_token(request)
        if not guard.cookie_ok(request):
            return html(403, message_page("forbidden", FORBIDDEN))
        if request.method not in ("GET", "POST"):
            return plain(405, "only GET and POST")
        if request.method == "POST":
            if not guard.origin_ok(request):
                return plain(403, "a form of this page only (the Origin header names another site, or none)")
            if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
                return plain(415, "forms only (application/x-www-form-urlencoded)")
        return await self._route(request)

    def _take_token(self, request: Request) -> Response:
        if not self.guard.token_ok(request.query["token"]):
            return html(403, message_page("forbidden", "this token is not the page's: " + FORBIDDEN))
        rest = {name: value for name, value in request.query.items() if name != "token"}
        location = request.path + (f"?{urlencode(rest)}" if rest else "")
        return Response(status=303, headers=[("Location", location), self.guard.set_cookie()])

    async def _route(self, request: Request) -> Response:
        parts = request.segments()
        post = request.method == "POST"
        if parts == []:
            return await self._runs(request) if not post else not_allowed("GET")
        if parts == ["runs"]:
            return await self._act(request, "start", None) if post else not_allowed("POST")
        if len(parts) == 2 and parts[0] == "static" and parts[1] in STATIC_FILES and not post:
            return Response(
                body=self._static[parts[1]], content_type=STATIC_FILES[parts[1]],
                headers=[("Cache-Control", "private, max-age=3600")],
            )
        if len(parts) >= 2 and parts[0] == "run" and parts[1].strip():
            run_id, rest = parts[1], parts[2:]
            if rest == []:
                return await self._run(request, run_id) if not post else not_allowed("GET")
            if rest == ["events"]:
                return await self._events(request, run_id) if not post else not_allowed("GET")
            if len(rest) == 2 and rest[0] == "screenshot":
                return await self._screenshot(run_id, rest[1]) if not post else not_allowed("GET")
            if len(rest) == 1 and rest[0] in RUN_ACTIONS:
                return await self._act(request, rest[0], run_id) if post else not_allowed("POST")
        return html(404, message_page("not found", "no such page"))

    # ---- pages ------------------------------------------------------------------------------

    def _said(self, request: Request) -> tuple[bool, str] | None:
        key = request.query.get("said")
        return self._flash.pop(key, None) if key else None

    async def _runs(self, request: Request) -> Response:
        state = request.query.get("state") or None
        if state is not None and state not in STATES:
            return html(400, message_page("bad filter", f"state must be one of {', '.join(STATES)}"))
        search = request.query.get("q", "")[:SEARCH_LIMIT].strip()
        rows = await recent_runs(self.client, SEARCHED if search else LISTED, StateClass(state) if state else None)
        if search:
            words = search.lower()
            rows = [row for row in rows if words in row.task.lower()][:LISTED]
        return html(200, runs_page(rows, datetime.now(timezone.utc), state, search, self._said(request)))

    async def _run(self, request: Request, run_id: str) -> Response:
        try:
            view = await read_run(self.client, run_id)
        except RunControlError as e:
            return html(404, message_page("no such run", str(e)))
        web_ui = await run_link(self.client, self.client.get_workflow_handle(run_id))
        return html(200, run_page(view, web_ui, self.screenshots(view), self._said(request), view.running))

    def screenshots(self, view: RunView) -> Screenshots:
        root, run_id, directory = self.settings.workspace_root, view.run_id, view.workspace

        def of(record: StepRecord) -> dict[int, str]:
            names = screenshots.step_screenshots(root, directory, record.step, [c.name for c in record.tool_calls])
            return {index: run_url(run_id, "screenshot", name) for index, name in names.items()}

        return of

    async def _events(self, request: Request, run_id: str) -> Response:
        if self._streams.locked():
            return plain(503, "too many live pages open; close one")
        since = resume_point(request.query.get("since"), request.headers.get("last-event-id"))
        turn_text = request.query.get("turn", "1")
        turn = int(turn_text) if turn_text.isdigit() and len(turn_text) < 9 else 1
        events = RunEvents(self.client, run_id, since, turn, self.screenshots, self.settings.workspace_root)
        return Response(
            content_type="text/event-stream; charset=utf-8",
            headers=[("X-Accel-Buffering", "no")],
            stream=self._counted(events.stream()),
        )

    async def _counted(self, stream):
        async with self._streams:
            async for chunk in stream:
                yield chunk

    async def _screenshot(self, run_id: str, name: str) -> Response:
        try:
            view_dir = await self._run_directory(run_id)
            data, kind = await asyncio.to_thread(
                screenshots.read_screenshot, self.settings.workspace_root, view_dir, name
            )
        except (screenshots.NoScreenshot, RunControlError) as e:
            return plain(404, f"no screenshot: {e}")
        return Response(body=data, content_type=kind, headers=[("Cache-Control", "private, max-age=3600")])

    async def _run_directory(self, run_id: str) -> str:
        """The run's directory name, as its input names it."""
        description = await describe(self.client, run_id)
        started = await current_input(self.client, run_id, description.run_id)
        return (started.workspace if started is not None else None) or workspace_name_for(run_id)

    # ---- actions ----------------------------------------------------------------------------

    async def _act(self, request: Request, name: str, run_id: str | None) -> Response:
        done = await self.actions.run(name, run_id, request.form())
        if "application/json" in request.headers.get("accept", ""):
            body = json.dumps({"ok": done.ok, "line": inert(done.line), "location": done.location})
            return Response(status=200, body=body.encode(), content_type="application/json")
        return self._redirect_with(done, run_url(run_id) if run_id else "/")

    def _redirect_with(self, done: Done, back: str) -> Response:
        key = secrets.token_urlsafe(9)
        self._flash[key] = (done.ok, done.line)
        while len(self._flash) > FLASH_KEPT:
            self._flash.popitem(last=False)
        return Response(status=303, headers=[("Location", f"{done.location or back}?said={key}")])


def html(status: int, markup: str) -> Response:
    return Response(status=status, body=markup.encode())


def not_allowed(allowed: str) -> Response:
    response = plain(405, f"use {allowed} here")
    response.headers.append(("Allow", allowed))
    return response

