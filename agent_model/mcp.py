"""MCP tools as data: what the workflow and the worker's MCP activities exchange.

The servers themselves (config/mcp.json) live on the worker: the workflow
only learns their tools, already bounded, and asks for calls by server and
tool name. Pure (pydantic and the standard library): workflow code imports it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel, Field

from agent_model.errors import MCP_UNKNOWN_SERVER_ERROR
from agent_model.tool_arguments import MAX_ARGUMENT_DEPTH
from agent_model.tool_io import ProducedObservation
from agent_model.tool_spec import TOOL_HEARTBEAT, WAIT_FOR_THE_CALL, Retries, Timeout
from agent_model.tool_spec import activity_config

LIST_TOOLS_ACTIVITY = "mcp_list_tools"
CALL_TOOL_ACTIVITY = "mcp_call_tool"

FUNCTION_PREFIX = "mcp_"
"""OpenManus names a server's tool mcp_<server id>_<tool>; so do we."""
MAX_FUNCTION_NAME = 64
"""OpenAI refuses a function name longer than this."""
DIGEST_CHARS = 10
"""Hex digits of the suffix that keeps an altered name unique (40 bits)."""

MAX_TOOLS_PER_SERVER = 64
"""Tools taken from one server: more would crowd out the built-in tools and
every other server in the model's tool list."""
MAX_TOOLS = 128
"""Tools taken from all servers together; OpenAI accepts at most 128 functions
per request and the model chooses worse among many."""
MAX_TOOL_NAME_CHARS = 128
"""The MCP spec's limit for a tool name; a longer one comes from a broken server."""
MAX_DESCRIPTION_CHARS = 1_000
"""A description longer than this is cut: it is sent with every think."""
MAX_SCHEMA_BYTES = 16 * 1024
"""JSON of one tool's input schema; a larger one is dropped, not cut (a cut
schema is no schema)."""
MAX_SCHEMA_DEPTH = MAX_ARGUMENT_DEPTH
"""Nesting of one input schema, the same bound as a tool call's arguments
(agent_model/tool_arguments.py): the workflow parses what it is given."""
MAX_LIST_BYTES = 256 * 1024
"""JSON of all MCP tool definitions together: they ride in every think
request, whose payload is bounded at 1 MiB (agent_model/payload.py)."""
MAX_OUTPUT_CHARS = 100_000
"""Characters of one call's output that reach the workflow."""
MAX_PROBLEM_CHARS = 300
"""One problem line; servers' error messages can be long."""

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def function_name_for(server: str, tool: str, *, hashed: bool = False) -> str:
    """The function name the model calls for `tool` of `server`.

    mcp_<server>_<tool> when that is a valid OpenAI function name; otherwise
    (characters outside [A-Za-z0-9_-], too long), or with `hashed` (the lister
    found the plain name taken), the name made valid and cut, followed by a
    digest of the exact server and tool, so two tools never share a name."""
    plain = f"{FUNCTION_PREFIX}{server}_{tool}"
    safe = _UNSAFE.sub("_", plain)
    if safe == plain and len(plain) <= MAX_FUNCTION_NAME and not hashed:
        return plain
    digest = hashlib.sha256(f"{server}\0{tool}".encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
    return f"{safe[: MAX_FUNCTION_NAME - DIGEST_CHARS - 1]}_{digest}"


class McpTool(BaseModel):
    server: str
    """The server's id in mcp.json."""
    name: str
    """The tool's name on its server, as the call must give it."""
    function_name: str
    """The name the model calls it by (function_name_for)."""
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    read_only: bool = False
    """The server says the tool changes nothing (readOnlyHint). A hint from the
    server: the approval gates' risky set trusts it, a configured rule need not."""


class McpListRequest(BaseModel):
    servers: list[str] = Field(default_factory=list)
    """Server ids to list; empty: every server configured on the worker."""


class McpToolList(BaseModel):
    tools: list[McpTool] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    """One line each: a server that could not be reached, a tool dropped by a bound."""


class McpCallRequest(BaseModel):
    server: str
    tool: str
    """The tool's name on its server (McpTool.name)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None
    """The model's id for this call (for the shared context store)."""
    observe_limit: int | None = None
    """Characters of the output the observation keeps."""
    function_name: str | None = None
    """The name the model called the tool by (McpTool.function_name): the
    observation message the worker stores is named so."""


class McpCallResult(ProducedObservation):
    output: str
    error: bool = False
    """The tool ran and reported an error (or the server refused the call)."""
    tools_changed: bool = False
    """The server's tool list may have changed since it was last reported:
    it said so, or it was restarted. List the tools again."""


def schema_for(tool: McpTool) -> dict[str, Any]:
    """The function definition the model is given for an MCP tool."""
    about = f"[tool {tool.name} of MCP server {tool.server}]"
    return {
        "type": "function",
        "function": {
            "name": tool.function_name,
            "description": f"{about} {tool.description}".strip(),
            "parameters": tool.input_schema or EMPTY_PARAMETERS,
        },
    }


MCP_LIST_TOOLS = activity_config(
    start_to_close=Timeout(
        60,
        "servers are listed at once, each bounded by a 30 s connect (a stdio server fetched by npx/uvx on "
        "its first start) and a 20 s listing",
    ),
    retries=Retries(
        3,
        "an unreachable server is a problem line, not a failure, so a retry only follows a lost worker; "
        "listing again is harmless",
    ),
    heartbeat=TOOL_HEARTBEAT,
    cancellation=WAIT_FOR_THE_CALL,
)
MCP_CALL_SECONDS = 300
MCP_CALL_TOOL = activity_config(
    start_to_close=Timeout(
        MCP_CALL_SECONDS,
        "one MCP tool call; the worker bounds the call itself 15 s earlier, so a hung server is reported "
        "(and retried) rather than timed out",
    ),
    retries=Retries(
        4,
        "a server that died, dropped the connection or hung is restarted by the worker's pool and the call "
        "runs again (it may have had effects: the lesser evil); an unknown server fails the same way "
        "every time",
        initial_seconds=1,
        backoff=2,
        maximum_interval_seconds=10,
        non_retryable=(MCP_UNKNOWN_SERVER_ERROR,),
    ),
    heartbeat=TOOL_HEARTBEAT,
    cancellation=WAIT_FOR_THE_CALL,
)
