"""P1 (c): the agent's think/act loop in-process, without Temporal.

The real activity functions (LLMActivities.think, the tool's run,
prepare_workspace) are called directly in an activity context
(temporalio.testing.ActivityEnvironment: heartbeats go nowhere), with the same
memory logic as AgentWorkflow: the next-step prompt before each think, the
reply and the clipped observations appended to agent_model.memory.Memory, the
window sent with each think. No history, no serialisation, no server.
"""

from __future__ import annotations

import json

from temporalio.testing import ActivityEnvironment

from activities.tools.registry import TOOLS, schemas
from agent_model.llm_io import ThinkRequest
from agent_model.memory import Memory
from agent_model.messages import tool_message, user_message
from agent_model.profiles import AgentProfile
from agent_model.prompting import fill
from agent_model.tool_io import ToolRequest
from config.settings import Settings
from runtime.worker_factory import activities_for
from agent_model.payload import clip


class InProcessAgent:
    """Holds the activity objects across runs, as a worker would."""

    def __init__(self, settings: Settings) -> None:
        functions = activities_for(settings)
        self.by_name = {getattr(fn, "__temporal_activity_definition").name: fn for fn in functions}
        self.env = ActivityEnvironment()

    async def run(self, task: str, profile: AgentProfile, workspace: str) -> int:
        """Run the loop for profile.max_steps steps (or until a reply without a
        tool call); returns the steps taken."""
        directory = await self.env.run(self.by_name["prepare_workspace"], workspace)
        memory = Memory(max_messages=profile.max_memory_messages)
        memory.add(user_message(task))
        tools = schemas(profile.tools) or None
        step = 0
        while step < profile.max_steps:
            step += 1
            if profile.next_step_prompt:
                memory.add(user_message(fill(profile.next_step_prompt, directory=directory, plan_status="No plan yet.")))
            request = ThinkRequest(
                llm=profile.llm,
                system_prompt=fill(profile.system_prompt, directory=directory) or None,
                messages=memory.window(),
                tools=tools,
                tool_choice=profile.tool_choice,
            )
            response = await self.env.run(self.by_name["think"], request)
            reply = response.message
            memory.add(reply)
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                name = call.function.name
                if name not in profile.tools or TOOLS[name].runs_in_workflow:
                    raise RuntimeError(f"the in-process loop only runs activity tools, not {name}")
                result = await self.env.run(
                    self.by_name[name],
                    ToolRequest(workspace=workspace, arguments=json.loads(call.function.arguments or "{}")),
                )
                output = result.output or "(no output)"
                observation = clip(f"Error: {output}" if result.error else output, profile.max_observe)
                memory.add(tool_message(observation, call.id, name))
        return step
