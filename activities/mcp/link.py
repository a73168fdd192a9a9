"""One connection to one MCP server, owned by one task from open to close.

The SDK's sessions and transports are anyio context managers: the task that
opens one must close it. So each connection gets a task of its own that opens
the client, publishes it, and waits until the connection ends or is closed.
Activities send their requests through the published client from their own
tasks: cancelling one cancels its request, never the session.

The connection counts as ended as soon as the server's stream ends (a stdio
server exited, an SSE stream dropped) or the transport fails, so the pool
opens a new one for the next request instead of failing it. It is dropped
when the server sends a reply over the bounds of limits.py: the reason is
kept (refused_reply), so the calls it fails say why.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from activities.mcp.http_client import bounded_client
from activities.mcp.limits import MAX_MESSAGE_BYTES, MAX_SSE_TRANSPORT_EVENT_BYTES, Guard, Throttle
from activities.mcp.stdio import stdio_transport
from agent_model.mcp import MAX_PROBLEM_CHARS
from config.mcp_config import McpServerSettings

log = logging.getLogger(__name__)

CONNECT_SECONDS = 30.0
"""Start and handshake: a stdio server run by npx or uvx fetches its package
on its first start; longer than this is a broken server."""
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
"""Connect and send within 30 s; a response stream may stay quiet for as long
as a tool call runs (the call itself is bounded by the pool)."""
CLIENT_INFO = mcp_types.Implementation(name="durable-manus", version="1")


class McpUnavailable(Exception):
    """The server cannot be reached, or the connection failed: try again later."""


def one_line(error: BaseException) -> str:
    """A failure as one bounded line, the first leaf of an exception group."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = " ".join(str(error).split()) or "no details"
    return f"{type(error).__name__}: {text}"[:MAX_PROBLEM_CHARS]


TOOLS_CHANGED = "notifications/tools/list_changed"
ANSWERS = (mcp_types.JSONRPCResponse, mcp_types.JSONRPCError)


class _WatchedReadStream:
    """The transport's read stream as the session sees it: tells when it ends,
    reads what the server sends unasked (all but the answers it owes) no
    faster than the throttle lets, and takes tools/list_changed off it (one
    flag, however many come)."""

    def __init__(self, inner: Any, ended: Callable[[], None], tools_changed: Callable[[], None], throttle: Throttle) -> None:
        self._inner, self._ended = inner, ended
        self._tools_changed, self._throttle = tools_changed, throttle
        self._owed = 0
        """Requests sent minus answers read: a server cannot flood answers either."""

    def requested(self) -> None:
        self._owed += 1

    async def receive(self) -> Any:
        while True:
            try:
                item = await self._inner.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._ended()
                raise
            message = getattr(item, "message", None)
            if isinstance(message, ANSWERS) and self._owed > 0:
                self._owed -= 1
                return item
            # While this waits, the transport waits to hand over the next
            # message, so it stops reading the server's pipe or socket.
            await self._throttle.take()
            if not (isinstance(message, mcp_types.JSONRPCNotification) and message.method == TOOLS_CHANGED):
                return item
            self._tools_changed()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        # The dispatcher reads `last_context` off the stream it was given.
        return getattr(self._inner, name)


class _CountedWriteStream:
    """The transport's write stream, telling the read side of each request sent."""

    def __init__(self, inner: Any, requested: Callable[[], None]) -> None:
        self._inner, self._requested = inner, requested

    async def send(self, item: Any) -> None:
        if isinstance(getattr(item, "message", None), mcp_types.JSONRPCRequest):
            self._requested()
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _CountedWriteStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _sse_client_factory(url: str, guard: Guard) -> Callable[..., httpx2.AsyncClient]:
    """What sse_client calls for its HTTP client (it passes no auth here)."""

    def factory(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: Any = None) -> httpx2.AsyncClient:
        return bounded_client(
            url, headers=headers, timeout=timeout or HTTP_TIMEOUT, limit=MAX_SSE_TRANSPORT_EVENT_BYTES, guard=guard
        )

    return factory


@asynccontextmanager
async def _transport(settings: McpServerSettings, guard: Guard) -> AsyncIterator[Any]:
    if settings.kind == "stdio":
        async with stdio_transport(settings, guard) as streams:
            yield streams
    elif settings.kind == "sse":
        assert settings.url is not None
        factory = _sse_client_factory(settings.url, guard)
        async with sse_client(settings.url, headers=settings.headers or None, httpx_client_factory=factory) as streams:
            yield streams
    else:
        assert settings.url is not None
        http = bounded_client(
            settings.url, headers=settings.headers, timeout=HTTP_TIMEOUT, limit=MAX_MESSAGE_BYTES, guard=guard
        )
        # The SDK's own bound on one event is set past ours: ours stops first and says why.
        connection = streamable_http_client(settings.url, http_client=http, max_sse_event_size=2 * MAX_MESSAGE_BYTES)
        async with http, connection as (read, write):
            yield read, write


class Link:
    def __init__(self, server: str, settings: McpServerSettings, tools_changed: Callable[[], None]) -> None:
        self.server, self.settings = server, settings
        self._tools_changed = tools_changed
        self.refused_reply = ""
        """Why the connection was dropped for what the server sent, if it was."""
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # read by whoever waits
        self._scope: anyio.CancelScope | None = None
        self._closing = False
        self._stream_over = False
        self.ended = asyncio.Event()
        self._task = asyncio.create_task(self._own(), name=f"MCP server {server}")

    @property
    def usable(self) -> bool:
        return not self._closing and not self.ended.is_set()

    async def client(self) -> Client:
        """The connected client; McpUnavailable when it could not connect."""
        return await asyncio.shield(self._ready)

    def when_ended(self, callback: Callable[[], None]) -> None:
        self._task.add_done_callback(lambda _: callback())

    def close(self) -> None:
        """Ends the connection (a stdio server is stopped); returns at once."""
        self._closing = True
        if self._scope is not None:
            self._scope.cancel()

    async def _own(self) -> None:
        failure = "the connection was closed"
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + CONNECT_SECONDS) as scope:
                self._scope = scope
                if self._closing:
                    scope.cancel()
                client = Client(
                    self._watched(),
                    mode="auto",
                    cache=None,  # a listing after tools/list_changed must be fresh
                    client_info=CLIENT_INFO,
                )
                async with client:
                    scope.deadline = math.inf
                    self._ready.set_result(client)
                    log.info("MCP server %s connected (protocol %s)", self.server, client.protocol_version)
                    async with anyio.create_task_group() as tasks:
                        if self._announces_changes(client):
                            tasks.start_soon(self._listen, client)
                        await anyio.sleep_forever()
            if self._stream_over:
                failure = "the server closed the connection" + ("" if self._ready.done() else " before the handshake")
            elif scope.cancelled_caught and not self._closing:
                failure = f"did not connect within {CONNECT_SECONDS:g} s"
            if not self._closing:
                log.warning("MCP server %s: %s", self.server, failure)
        except Exception as e:
            failure = one_line(e)
            if not self.refused_reply:  # said once already
                log.warning("MCP server %s: %s", self.server, failure)
        finally:
            self.ended.set()
            if self.refused_reply:
                failure = f"it sent {self.refused_reply}"
            if not self._ready.done():
                self._ready.set_exception(McpUnavailable(f"MCP server {self.server}: {failure}"[:MAX_PROBLEM_CHARS]))

    @asynccontextmanager
    async def _watched(self) -> AsyncIterator[Any]:
        guard = Guard.for_server(self.server, self._refuse)
        async with _transport(self.settings, guard) as (read, write):
            watched = _WatchedReadStream(read, self._server_stream_ended, self._tools_changed, guard.unasked)
            yield watched, _CountedWriteStream(write, watched.requested)

    def _server_stream_ended(self) -> None:
        self._stream_over = True
        if self._scope is not None:
            self._scope.cancel()

    def _refuse(self, reason: str) -> None:
        """A transport stopped reading a reply: the connection is dropped, and
        the calls it fails say why."""
        if not self.refused_reply:
            self.refused_reply = reason
            log.warning("MCP server %s sent %s; its connection is dropped", self.server, reason)
        self.close()

    @staticmethod
    def _announces_changes(client: Client) -> bool:
        tools = client.server_capabilities.tools
        return client.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(tools and tools.list_changed)

    async def _listen(self, client: Client) -> None:
        """A 2026-era server sends tools/list_changed only on a listen stream
        (the notifications are taken off the read stream before the session)."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    self._tools_changed()
        except Exception as e:
            log.info("MCP server %s: no tools/list_changed stream (%s)", self.server, one_line(e))
