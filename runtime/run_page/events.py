"""A run's Server-Sent Events: on connect the steps after the client's last
one (its `since`, or the Last-Event-ID its browser sends on reconnecting),
then, once a second while the client listens, the new steps and the run's
status (the panel's markup when it changed), the current think's tokens as
the worker streams them (think_tokens.py), and `end` when the run has closed.

The stream only reads (queries and describe): a client that goes, or a
stream that breaks, changes nothing for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from temporalio.client import Client

from agent_model.run import StepRecord
from runtime.run_control import working_step
from runtime.run_page import think_tokens
from runtime.run_page.pages import Screenshots, status_panel, step_item
from runtime.run_page.run_view import RunView, live_state, read_run
from runtime.terminal_text import inert
from runtime.user_errors import RunControlError

POLL_SECONDS = 1.0
"""How often a listened-to run is asked for new steps."""
KEEPALIVE_SECONDS = 15.0
"""A comment this often keeps proxies and the browser from closing a quiet stream."""
RETRY_MILLISECONDS = 2000
"""How soon a browser reconnects after losing the stream."""
TOKEN_QUEUE = 2048
"""Token events held for a slow client; beyond, the oldest are dropped (the step's thought has the text)."""


def event(name: str, data: str, event_id: int | None = None) -> bytes:
    lines = [f"event: {name}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines += [f"data: {line}" for line in data.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


def resume_point(since: str | None, last_event_id: str | None) -> int:
    """The step after which the client has everything."""
    points = [int(text) for text in (since, last_event_id) if text and text.isdigit() and len(text) <= 9]
    return max(points, default=0)


class RunEvents:
    """One client's stream for one run."""

    def __init__(
        self, client: Client, run_id: str, since: int, turn: int, screenshots: Callable[[RunView], Screenshots],
        workspace_root: Path,
    ) -> None:
        self.client, self.run_id, self.since, self.turn = client, run_id, since, turn
        self.screenshots, self.workspace_root = screenshots, workspace_root
        self.shown_status = ""

    def _step(self, view: RunView, record: StepRecord) -> bytes:
        markup = step_item(record, self.turn, {t.turn: t.message for t in view.turns}, self.screenshots(view))
        self.turn, self.since = record.turn, record.step
        return event("step", markup, record.step)

    def _status(self, view: RunView) -> bytes | None:
        markup = status_panel(view)
        if markup == self.shown_status:
            return None
        self.shown_status = markup
        return event("status", markup)

    async def stream(self) -> AsyncIterator[bytes]:
        yield f"retry: {RETRY_MILLISECONDS}\n\n".encode()
        try:
            view = await read_run(self.client, self.run_id, self.since)
        except RunControlError as e:
            yield event("said", inert(str(e)))
            yield event("end", "")
            return
        for record in view.records:
            yield self._step(view, record)
        if (status := self._status(view)) is not None:
            yield status
        if not view.running:
            yield event("end", "")
            return
        tokens: asyncio.Queue[think_tokens.ThinkEvent] = asyncio.Queue(TOKEN_QUEUE)
        feeding = asyncio.ensure_future(self._feed(tokens, view.workspace)) if not view.is_flow else None
        try:
            async for chunk in self._follow(view, tokens):
                yield chunk
        finally:
            if feeding is not None:
                feeding.cancel()
                with contextlib.suppress(BaseException):
                    await feeding

    async def _follow(self, view: RunView, tokens: asyncio.Queue) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            deadline = loop.time() + POLL_SECONDS
            while (left := deadline - loop.time()) > 0:  # tokens as they come, until the next poll
                try:
                    token = await asyncio.wait_for(tokens.get(), left)
                except asyncio.TimeoutError:
                    break
                yield event("token", json.dumps({
                    "step": token.step, "kind": token.kind, "text": inert(token.text), "channel": token.channel,
                }))
                quiet_since = loop.time()
            try:
                state = await live_state(self.client, self.run_id, view.is_flow, self.since)
            except RunControlError as e:
                view.unanswered = str(e)
                if (status := self._status(view)) is not None:
                    yield status
                continue
            view.unanswered = None
            if not state.running:
                final = await read_run(self.client, self.run_id, self.since)
                for record in final.records:
                    yield self._step(final, record)
                if (status := self._status(final)) is not None:
                    yield status
                yield event("end", "")
                return
            for record in state.records:
                view.records.append(record)
                yield self._step(view, record)
                quiet_since = loop.time()
            view.status, view.plan = state.status, state.plan or view.plan
            if view.plan is not None:
                view.working_step = working_step(view.plan)
            if (status := self._status(view)) is not None:
                yield status
                quiet_since = loop.time()
            if loop.time() - quiet_since > KEEPALIVE_SECONDS:
                yield b": still here\n\n"
                quiet_since = loop.time()

    async def _feed(self, tokens: asyncio.Queue, workspace: str) -> None:
        """The think tokens into the queue; a source that fails only ends the tokens."""
        try:
            async for token in think_tokens.think_events(self.workspace_root, workspace, None):
                if tokens.full():
                    tokens.get_nowait()
                tokens.put_nowait(token)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the side channel is best effort; the steps still come
            return
