"""create_chat_completion: a structured reply from the model. The response is the
tool's own argument, so it runs in the workflow and has no activity."""

from __future__ import annotations

from typing import Any

from agent_model.tool_spec import ToolOutcome, ToolSpec, WorkflowTools

NAME = "create_chat_completion"

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": "Give a structured reply: the text of the answer for the user.",
        "parameters": {
            "type": "object",
            "properties": {
                "response": {"type": "string", "description": "The reply text."}
            },
            "required": ["response"],
        },
    },
}


async def respond(tools: WorkflowTools, arguments: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(str(arguments.get("response", "")))


SPEC = ToolSpec(name=NAME, schema=SCHEMA, handler=respond)
