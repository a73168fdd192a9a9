"""The MCP activities: list the servers' tools, call one tool.

A tool's own failure is an observation for the model (error=True). A server
that cannot be reached, or whose connection failed during the call, raises the
retryable McpUnavailable: the pool has replaced the connection by then (a
stdio server is restarted), and Temporal's retry runs the call on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.mcp.link import McpUnavailable
from activities.mcp.pool import McpPool, McpUnknownServer
from activities.mcp.results import Listing, call_output, offered_tools
from activities.heartbeats import heartbeating
from agent_model.errors import MCP_UNAVAILABLE_ERROR, MCP_UNKNOWN_SERVER_ERROR
from agent_model.mcp import (
    CALL_TOOL_ACTIVITY,
    LIST_TOOLS_ACTIVITY,
    MCP_CALL_SECONDS,
    McpCallRequest,
    McpCallResult,
    McpListRequest,
    McpToolList,
)

CALL_SECONDS = MCP_CALL_SECONDS - 15
"""The call itself: under start_to_close, so a hung server is reported as
McpUnavailable (and probed) before Temporal times the activity out."""


NO_SERVERS = "this worker has no MCP servers configured (config/mcp.json, or DURABLE_MANUS_MCP_CONFIG)"


class McpActivities:
    def __init__(self, pool: McpPool) -> None:
        self.pool = pool

    def all(self) -> list[Any]:
        return [self.list_tools, self.call_tool]

    @activity.defn(name=LIST_TOOLS_ACTIVITY)
    async def list_tools(self, request: McpListRequest) -> McpToolList:
        servers = list(dict.fromkeys(request.servers)) or list(self.pool.servers)
        if not servers:
            return McpToolList(problems=[NO_SERVERS])
        async with heartbeating():
            listings = await asyncio.gather(*(self._listing(server) for server in servers))
        return offered_tools(list(zip(servers, listings)))

    async def _listing(self, server: str) -> Listing:
        try:
            return await self.pool.list_tools(server)
        except (McpUnknownServer, McpUnavailable) as e:
            return str(e)

    @activity.defn(name=CALL_TOOL_ACTIVITY)
    async def call_tool(self, request: McpCallRequest) -> McpCallResult:
        try:
            async with heartbeating():
                result = await self.pool.call_tool(request.server, request.tool, request.arguments, CALL_SECONDS)
        except McpUnknownServer as e:
            raise ApplicationError(str(e), type=MCP_UNKNOWN_SERVER_ERROR, non_retryable=True) from None
        except McpUnavailable as e:
            raise ApplicationError(str(e), type=MCP_UNAVAILABLE_ERROR) from None
        return McpCallResult(
            output=call_output(result),
            error=result.is_error,
            tools_changed=self.pool.take_tools_changed(request.server),
        )
