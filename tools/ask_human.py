"""ask_human: a question for the user. The workflow publishes it and waits
durably for the `answer` update, so it has no activity."""

from __future__ import annotations

from typing import Any

from agent_model.tool_spec import ToolOutcome, ToolSpec, WorkflowTools

NAME = "ask_human"

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "Ask the user a question and wait for the reply. Use it only for "
            "information or decisions that only the user can give."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "inquire": {"type": "string", "description": "The question to ask."}
            },
            "required": ["inquire"],
        },
    },
}


async def ask(tools: WorkflowTools, arguments: dict[str, Any]) -> ToolOutcome:
    question = str(arguments.get("inquire", ""))
    if not question.strip():
        return ToolOutcome("Error: ask_human needs a non-empty `inquire`.")
    return ToolOutcome(await tools.ask_user(question))


SPEC = ToolSpec(name=NAME, schema=SCHEMA, handler=ask)
