"""The tools of the run's MCP servers (config/mcp.json on the worker).

This tool has no function of its own: its state is the servers' tools as the
model was last shown them, and those are the functions it offers and answers
(mcp_<server>_<tool>). They are listed before the run's first think and again
after a server said its tools changed; each call is an activity, and the
tool's own errors are observations.

Worker side: activities/mcp/ (one connection per server, stdio servers as
the worker's children), or activities/mcp_missing.py without the mcp package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow

from agent_model.approval import GateFacts
from agent_model.mcp import (
    CALL_TOOL_ACTIVITY,
    LIST_TOOLS_ACTIVITY,
    MCP_CALL_TOOL,
    MCP_LIST_TOOLS,
    McpCallRequest,
    McpCallResult,
    McpListRequest,
    McpTool,
    McpToolList,
    schema_for,
)
from agent_model.profiles import AgentProfile
from agent_model.prompting import fill
from agent_model.tool_io import observation_text, produced_text
from agent_model.tool_spec import ToolOutcome, ToolSpec, ToolState, WorkflowTools, scheduled
from prompts import mcp as words

if TYPE_CHECKING:  # worker side; imported when the worker builds the activities
    from activities.worker_resources import WorkerResources

NAME = "mcp"


class McpSlot(BaseModel):
    """This tool's slot in the run."""

    model_config = ConfigDict(frozen=True)

    tools: list[McpTool] = Field(default_factory=list)
    """The servers' tools, as the model was last shown them."""
    listed: bool = False
    stale: bool = False
    """A server said its tools changed: list them again before the next think."""

    def named(self, function_name: str) -> McpTool | None:
        return next((tool for tool in self.tools if tool.function_name == function_name), None)


def _answers(slot: McpSlot, function_name: str) -> bool:
    return slot.named(function_name) is not None


def _gate_facts(slot: McpSlot, function_name: str) -> GateFacts:
    """For the approval gates: whether the server marks the tool read-only."""
    tool = slot.named(function_name)
    return GateFacts(read_only=tool is not None and tool.read_only)


def _definitions(slot: McpSlot) -> list[dict[str, Any]]:
    return [schema_for(tool) for tool in slot.tools]


async def _list_when_due(tools: WorkflowTools) -> None:
    """The servers' tools, listed by a worker that has the servers, before the
    first think and after a server said they changed."""
    slot = tools.slot(NAME, McpSlot)
    if slot.listed and not slot.stale:
        return
    servers = tools.profile.mcp_servers
    listed = await workflow.execute_activity(
        LIST_TOOLS_ACTIVITY,
        McpListRequest(servers=[] if "*" in servers else list(servers)),
        result_type=McpToolList,
        **scheduled(tools.options(NAME, "list"), "list the MCP servers' tools"),
    )
    tools.keep(NAME, McpSlot(tools=listed.tools, listed=True))
    if listed.problems:
        tools.note(fill(words.SERVERS_UNREACHABLE, problems="\n".join(listed.problems)))
    elif slot.stale:
        tools.note(words.TOOLS_CHANGED)


async def call_server_tool(tools: WorkflowTools, arguments: dict[str, Any]) -> ToolOutcome:
    """One call of a server's tool, as an activity: the tool's own errors are
    observations, a lost server is retried by the activity."""
    slot = tools.slot(NAME, McpSlot)
    call = tools.call
    tool = slot.named(call.tool)
    if tool is None:  # the workflow dispatches only the names this tool answers
        return ToolOutcome(f"Error: no MCP tool is called {call.tool}.", error=True)
    request = McpCallRequest(
        server=tool.server,
        tool=tool.name,
        arguments=arguments,
        call_id=call.call_id,
        observe_limit=call.observe_limit,
        function_name=tool.function_name,
    )
    result = await workflow.execute_activity(
        CALL_TOOL_ACTIVITY,
        request,
        result_type=McpCallResult,
        **scheduled(tools.options(NAME, "call"), f"{tool.server}: {tool.name}"[:80]),
    )
    if result.tools_changed:
        tools.keep(NAME, tools.slot(NAME, McpSlot).model_copy(update={"stale": True}))
    return ToolOutcome(
        produced_text(result, observation_text(result)),
        error=result.error, message=result.message, stored_digest=result.stored_digest
    )


def _used_by(spec: ToolSpec, profile: AgentProfile) -> bool:
    return bool(profile.mcp_servers)


def build_many(resources: WorkerResources) -> list[Any]:
    if resources.mcp_pool is None:
        from activities.mcp_missing import McpMissing

        return McpMissing().all()
    from activities.mcp.activities import McpActivities

    return McpActivities(resources.mcp_pool).all()


SPEC = ToolSpec(
    name=NAME,
    schema=None,
    handler=call_server_tool,
    state=ToolState(
        model=McpSlot, before_think=_list_when_due, definitions=_definitions, answers=_answers,
        gate_facts=_gate_facts,
    ),
    used_by=_used_by,
    own_activities={"list": MCP_LIST_TOOLS, "call": MCP_CALL_TOOL},
    build_many=build_many,
)
