"""The worker's MCP connections: one per configured server, opened on first
use and kept for every run and call after it.

A connection that ended (the server died, the network dropped it) is replaced
by a new one on the next request, which restarts a stdio server. A request
that was under way when it ended fails with McpUnavailable, and the
activity's retry finds the new connection. One that was dropped for a reply
over the bounds (limits.py) fails the call with a refusal instead: asking
again would get the same reply.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from mcp import MCPError
from mcp.client import InputRequiredRoundsExceededError
from mcp_types import CONNECTION_CLOSED, CallToolResult, TextContent, Tool
from pydantic import ValidationError

from activities.mcp.link import Link, McpUnavailable, one_line
from agent_model.mcp import MAX_TOOLS_PER_SERVER
from config.mcp_config import McpServerSettings

log = logging.getLogger(__name__)

LIST_SECONDS = 20.0
"""One server's whole tool listing, every page."""
MAX_LIST_PAGES = 20
"""A server whose pages never end cannot hold a listing for its whole bound."""
PROBE_SECONDS = 10.0
"""After a call timed out: a server that cannot list its tools this fast is hung."""
CLOSE_SECONDS = 15.0
"""Worker shutdown: each stdio server gets 1 s to exit, then its group is killed."""

T = TypeVar("T")


class McpUnknownServer(Exception):
    """No server of that id is configured on this worker."""


def _connection_lost(error: MCPError) -> bool:
    # The SDK's own verdict for a closed transport; a server's error with the
    # same code carries its own message.
    return error.code == CONNECTION_CLOSED and error.message == "Connection closed"


def refusal(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def dropped_for(link: Link) -> str:
    return f"MCP server {link.server} sent {link.refused_reply}, so its connection was dropped"


def failed(link: Link, tool: str, why: str = "") -> CallToolResult:
    """The failed call's result. The link's reason comes first: it was set
    before the read failed, so before any failure it caused."""
    return refusal(f"{dropped_for(link)} and the call of {tool} failed" if link.refused_reply else why)


class McpPool:
    def __init__(self, servers: dict[str, McpServerSettings]) -> None:
        self.servers = dict(servers)
        self._links: dict[str, Link] = {}
        self._open: set[Link] = set()
        """Every link not yet ended, replaced ones included: close_all waits for them."""
        self._changed: set[str] = set()
        self._closed = False

    def _link(self, server: str) -> Link:
        # Nothing is awaited between the check and the replacement, so two
        # activities on the event loop never start a server twice.
        if server not in self.servers:
            known = ", ".join(sorted(self.servers)) or "none"
            raise McpUnknownServer(f"no MCP server {server!r} is configured on this worker (configured: {known})")
        if self._closed:
            raise McpUnavailable("the worker's MCP connections are closed (the worker is stopping)")
        link = self._links.get(server)
        if link is None or not link.usable:
            if link is not None:
                link.close()
                self._changed.add(server)  # a restarted server may offer other tools
            link = Link(server, self.servers[server], lambda: self._changed.add(server))
            self._links[server] = link
            self._open.add(link)
            link.when_ended(lambda: self._open.discard(link))
        return link

    def take_tools_changed(self, server: str) -> bool:
        """Whether the server's tools may have changed since this was last asked."""
        changed = server in self._changed
        self._changed.discard(server)
        return changed

    async def list_tools(self, server: str) -> list[Tool]:
        """The server's tools, at most one more than MAX_TOOLS_PER_SERVER (to tell there are more)."""
        link = self._link(server)
        client = await link.client()

        async def listing() -> list[Tool]:
            tools: list[Tool] = []
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None or len(tools) > MAX_TOOLS_PER_SERVER:
                    break
            return tools[: MAX_TOOLS_PER_SERVER + 1]

        try:
            return await self._ask(link, "listing its tools", LIST_SECONDS, listing)
        except (McpUnavailable, MCPError, ValidationError) as e:
            if link.refused_reply:
                raise McpUnavailable(f"{dropped_for(link)}; its tools are not listed") from None
            if isinstance(e, McpUnavailable):
                raise
            raise McpUnavailable(f"MCP server {server}: cannot list its tools ({one_line(e)})") from None

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any], seconds: float) -> CallToolResult:
        """The tool's result; the server's refusal of the call as an error result."""
        link = self._link(server)
        client = await link.client()
        try:
            return await self._ask(link, f"the call of {tool}", seconds, lambda: client.call_tool(tool, arguments))
        except McpUnavailable:
            if link.refused_reply:
                return failed(link, tool)
            if link.usable:
                await self._probe(link)
            raise
        except MCPError as e:
            return failed(link, tool, f"MCP server {server} refused the call: {e.message}")
        except (ValidationError, InputRequiredRoundsExceededError) as e:
            return failed(link, tool, f"MCP server {server} gave no usable answer: {one_line(e)}")

    async def _ask(self, link: Link, doing: str, seconds: float, request: Callable[[], Awaitable[T]]) -> T:
        """The request's answer; McpUnavailable (and the link closed when it
        is broken) when the connection failed or no answer came in time."""
        try:
            async with asyncio.timeout(seconds):
                return await request()
        except TimeoutError:
            raise McpUnavailable(f"MCP server {link.server}: no answer to {doing} within {seconds:g} s") from None
        except MCPError as e:
            if not _connection_lost(e):
                raise
            failure: BaseException = e
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as e:
            failure = e
        link.close()
        raise McpUnavailable(f"MCP server {link.server}: the connection failed during {doing} ({one_line(failure)})")

    async def _probe(self, link: Link) -> None:
        """After a call timed out: closes the link when the server is hung, so
        the retry restarts it; a server merely slow at that call stays."""
        client = await link.client()
        try:
            async with asyncio.timeout(PROBE_SECONDS):
                await client.list_tools()
        except Exception as e:
            log.warning("MCP server %s does not answer (%s); it is restarted on its next call", link.server, one_line(e))
            link.close()

    async def close_all(self) -> None:
        """Closes every connection and stops every stdio server (worker shutdown)."""
        self._closed = True
        links = list(self._open)
        for link in links:
            link.close()
        if links:
            try:
                async with asyncio.timeout(CLOSE_SECONDS):
                    await asyncio.gather(*(link.ended.wait() for link in links))
            except TimeoutError:
                log.warning("some MCP servers did not stop within %g s", CLOSE_SECONDS)
