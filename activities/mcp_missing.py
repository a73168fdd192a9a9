"""The MCP activities of a worker without the mcp package: every listing says
so to the model, every call fails with that reason (and is not retried)."""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_model.errors import MCP_NOT_INSTALLED_ERROR
from agent_model.mcp import CALL_TOOL_ACTIVITY, LIST_TOOLS_ACTIVITY, McpCallRequest, McpCallResult, McpListRequest, McpToolList

PROBLEM = "the Python package mcp is not installed on this worker (pip install -r requirements.txt)"


class McpMissing:
    def all(self) -> list[Any]:
        return [self.list_tools, self.call_tool]

    @activity.defn(name=LIST_TOOLS_ACTIVITY)
    async def list_tools(self, request: McpListRequest) -> McpToolList:
        return McpToolList(problems=[f"MCP servers: {PROBLEM}"])

    @activity.defn(name=CALL_TOOL_ACTIVITY)
    async def call_tool(self, request: McpCallRequest) -> McpCallResult:
        raise ApplicationError(f"MCP server {request.server}: {PROBLEM}", type=MCP_NOT_INSTALLED_ERROR, non_retryable=True)
