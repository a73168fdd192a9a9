"""terminate: ends the run. Runs in the workflow (no I/O), so it has no activity."""

from __future__ import annotations

from typing import Any

from agent_model.tool_spec import RunEnds, ToolOutcome, ToolSpec, WorkflowTools

NAME = "terminate"

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "Finish the run. Call it when the task is complete, or when it cannot be "
            "completed and further attempts would not help."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "status": {
                    "type": "string",
                    "enum": ["success", "failure"],
                    "description": "Whether the task was accomplished.",
                },
                "answer": {
                    "type": "string",
                    "description": "The final answer or a short summary for the user.",
                },
            },
            "required": ["status"],
        },
    },
}


async def finish(tools: WorkflowTools, arguments: dict[str, Any]) -> ToolOutcome:
    answer = arguments.get("answer")
    raise RunEnds(
        gave_up=str(arguments.get("status", "success")) == "failure",
        answer=answer if isinstance(answer, str) and answer.strip() else None,
    )


SPEC = ToolSpec(name=NAME, schema=SCHEMA, handler=finish)
