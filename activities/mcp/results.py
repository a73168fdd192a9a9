"""What servers answer, made into what the workflow gets, within the bounds
of agent_model/mcp.py: tool listings and call outputs."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    Tool,
)

from agent_model.mcp import (
    MAX_DESCRIPTION_CHARS,
    MAX_LIST_BYTES,
    MAX_OUTPUT_CHARS,
    MAX_PROBLEM_CHARS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_TOOL_NAME_CHARS,
    MAX_TOOLS,
    MAX_TOOLS_PER_SERVER,
    McpTool,
    McpToolList,
    function_name_for,
)
from agent_model.payload import clip, json_size
from agent_model.tool_arguments import nesting_depth

Listing = list[Tool] | str
"""A server's tools, or why it has none."""


class _Offer:
    def __init__(self) -> None:
        self.tools: list[McpTool] = []
        self.problems: list[str] = []
        self.names: set[str] = set()
        self.size = 0

    def problem(self, text: str) -> None:
        self.problems.append(cut(text, MAX_PROBLEM_CHARS))

    def add(self, server: str, tool: Tool) -> None:
        where = f"MCP server {server}: tool {tool.name[:MAX_TOOL_NAME_CHARS]!r}"
        if not tool.name or len(tool.name) > MAX_TOOL_NAME_CHARS:
            self.problem(f"{where}: dropped, its name is empty or over {MAX_TOOL_NAME_CHARS} characters")
            return
        schema, why = _bounded_schema(tool.input_schema)
        if schema is None:
            self.problem(f"{where}: dropped, its input schema {why}")
            return
        name = function_name_for(server, tool.name)
        if name in self.names:
            name = function_name_for(server, tool.name, hashed=True)
        if name in self.names:
            self.problem(f"{where}: dropped, another tool has the same name")
            return
        offered = McpTool(
            server=server,
            name=tool.name,
            function_name=name,
            description=cut((tool.description or "").strip(), MAX_DESCRIPTION_CHARS),
            input_schema=schema,
            read_only=bool(tool.annotations is not None and tool.annotations.read_only_hint),
        )
        size = json_size(offered)
        if self.size + size > MAX_LIST_BYTES:
            self.problem(f"{where}: dropped, the MCP tools together would be over {MAX_LIST_BYTES} bytes")
            return
        self.size += size
        self.names.add(name)
        self.tools.append(offered)


def offered_tools(listings: list[tuple[str, Listing]]) -> McpToolList:
    """The tools of every server, in order, with a problem line for each
    server that has none and each tool dropped by a bound."""
    offer = _Offer()
    for server, listing in listings:
        if isinstance(listing, str):
            offer.problem(listing)
            continue
        if len(listing) > MAX_TOOLS_PER_SERVER:
            offer.problem(f"MCP server {server}: offers more than {MAX_TOOLS_PER_SERVER} tools; the first {MAX_TOOLS_PER_SERVER} are used")
        taken = listing[:MAX_TOOLS_PER_SERVER]
        room = MAX_TOOLS - len(offer.tools)
        if len(taken) > room:
            offer.problem(f"MCP server {server}: {len(taken) - room} of its tools dropped, over {MAX_TOOLS} MCP tools in all")
            taken = taken[:room]
        for tool in taken:
            offer.add(server, tool)
    return McpToolList(tools=offer.tools, problems=offer.problems)


def _bounded_schema(schema: Any) -> tuple[dict[str, Any] | None, str]:
    if not isinstance(schema, dict):
        return None, "is not an object"
    if json_size(schema) > MAX_SCHEMA_BYTES:
        return None, f"is over {MAX_SCHEMA_BYTES} bytes"
    if nesting_depth(json.dumps(schema)) > MAX_SCHEMA_DEPTH:
        return None, f"is nested deeper than {MAX_SCHEMA_DEPTH} levels"
    kind = schema.get("type", "object")
    if kind != "object":
        return None, f"describes {kind!r}, not an object of arguments"
    return {"type": "object", **schema}, ""


def cut(text: str, limit: int) -> str:
    """text, or its first `limit` characters with the last one an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_output(result: CallToolResult) -> str:
    """The text a call gave: its text blocks in order, then one line naming
    what is not text; the structured result when there is nothing else."""
    texts: list[str] = []
    others: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, EmbeddedResource) and not isinstance(block.resource, BlobResourceContents):
            texts.append(f"[resource {block.resource.uri}]\n{block.resource.text}")
        else:
            others.append(_named(block))
    if not texts and not others and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    if others:
        texts.append(cut(f"[not shown: {'; '.join(others)}]", MAX_PROBLEM_CHARS * 4))
    return clip("\n".join(texts), MAX_OUTPUT_CHARS)


def _named(block: Any) -> str:
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"{kind} {block.mime_type} ({len(block.data) * 3 // 4} bytes)"
    if isinstance(block, ResourceLink):
        return f"resource link {block.uri}"
    if isinstance(block, EmbeddedResource):
        return f"resource {block.resource.uri} ({block.resource.mime_type or 'binary'})"
    return f"{getattr(block, 'type', type(block).__name__)} content"
