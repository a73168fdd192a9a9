"""planning: create and manage plans. Its state is the workflow's PlanBook and its
commands are pure functions (agent_model.plan), so it runs in the workflow and
has no activity."""

from __future__ import annotations

from typing import Any

from agent_model.plan import COMMANDS, PlanningError, StepStatus, run_command
from agent_model.tool_spec import ToolOutcome, ToolSpec, WorkflowTools

NAME = "planning"

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "Create, revise and track plans for complex tasks. Commands: create a plan "
            "with steps; update its title or steps (steps whose text is unchanged keep "
            "their status); list plans; get one; set_active; mark_step with a status "
            "and notes; delete."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": list(COMMANDS), "description": "What to do."},
                "plan_id": {
                    "type": "string",
                    "description": "The plan's ID; required for create, set_active and delete; "
                    "other commands default to the active plan.",
                },
                "title": {"type": "string", "description": "The plan's title (create, update)."},
                "steps": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The plan's steps, in order (create, update).",
                },
                "depends_on": {
                    "type": "array",
                    "items": {"type": "array", "items": {"type": "integer"}},
                    "description": "Optional, one entry per step (create, update): the 1-based numbers of "
                    "the earlier steps it needs; [] for a step that needs none. Steps that do not need "
                    "each other may run at the same time. Without it each step needs the one before.",
                },
                "step_index": {"type": "integer", "description": "0-based index of the step (mark_step)."},
                "step_status": {
                    "type": "string",
                    "enum": [s.value for s in StepStatus],
                    "description": "New status of the step (mark_step).",
                },
                "step_notes": {"type": "string", "description": "Notes on the step (mark_step)."},
            },
            "required": ["command"],
        },
    },
}


async def plan(tools: WorkflowTools, arguments: dict[str, Any]) -> ToolOutcome:
    try:
        return ToolOutcome(run_command(tools.plans, arguments))
    except PlanningError as e:
        return ToolOutcome(f"Error: {e}", error=True)


SPEC = ToolSpec(name=NAME, schema=SCHEMA, handler=plan)
