"""One connection to one MCP server, owned by one task from open to close.

The SDK's sessions and transports are anyio context managers: the task that
opens one must close it. So each connection gets a task of its own that opens
the client, publishes it, and waits until the connection ends or is closed.
Activities send their requests through the published client from their own
tasks: cancelling one cancels its request, never the session.

The connection counts as ended as soon as the server's stream ends (a stdio
server exited, an SSE stream dropped) or the transport fails, so the pool
opens a new one for the next request instead of failing it.
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


class _WatchedReadStream:
    """The transport's read stream, telling when it ends."""

    def __init__(self, inner: Any, ended: Callable[[], None]) -> None:
        self._inner, self._ended = inner, ended

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended()
            raise

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


@asynccontextmanager
async def _transport(settings: McpServerSettings) -> AsyncIterator[Any]:
    if settings.kind == "stdio":
        async with stdio_transport(settings) as streams:
            yield streams
    elif settings.kind == "sse":
        assert settings.url is not None
        async with sse_client(settings.url, headers=settings.headers or None) as streams:
            yield streams
    else:
        assert settings.url is not None
        async with (
            httpx2.AsyncClient(headers=settings.headers or None, timeout=HTTP_TIMEOUT) as http,
            streamable_http_client(settings.url, http_client=http) as streams,
        ):
            yield streams


@asynccontextmanager
async def _watched(settings: McpServerSettings, ended: Callable[[], None]) -> AsyncIterator[Any]:
    async with _transport(settings) as (read, write):
        yield _WatchedReadStream(read, ended), write


class Link:
    def __init__(self, server: str, settings: McpServerSettings, tools_changed: Callable[[], None]) -> None:
        self.server, self.settings = server, settings
        self._tools_changed = tools_changed
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
                    _watched(self.settings, self._server_stream_ended),
                    mode="auto",
                    cache=None,  # a listing after tools/list_changed must be fresh
                    message_handler=self._message,
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
            log.warning("MCP server %s: %s", self.server, failure)
        finally:
            self.ended.set()
            if not self._ready.done():
                self._ready.set_exception(McpUnavailable(f"MCP server {self.server}: {failure}"[:MAX_PROBLEM_CHARS]))

    def _server_stream_ended(self) -> None:
        self._stream_over = True
        if self._scope is not None:
            self._scope.cancel()

    async def _message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools_changed()

    @staticmethod
    def _announces_changes(client: Client) -> bool:
        tools = client.server_capabilities.tools
        return client.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(tools and tools.list_changed)

    async def _listen(self, client: Client) -> None:
        """A 2026-era server sends tools/list_changed only on a listen stream."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    self._tools_changed()
        except Exception as e:
            log.info("MCP server %s: no tools/list_changed stream (%s)", self.server, one_line(e))
