"""P1 (c): the agent's think/act loop in-process, without Temporal.

The real activity functions (LLMActivities.think, the tool's run,
prepare_workspace) are called directly in an activity context
(temporalio.testing.ActivityEnvironment: heartbeats go nowhere), driven by the
same loop decisions as AgentWorkflow (agent_model/agent_loop.py): the
next-step prompt before each think, what the reply means, which calls run,
the observations memory keeps, stuck hints. No history, no serialisation, no
server; each think carries the whole window.
"""

from __future__ import annotations

from temporalio.testing import ActivityEnvironment

from agent_model import agent_loop
from agent_model.agent_loop import ReplyKind
from agent_model.llm_io import ThinkRequest
from agent_model.memory import Memory
from agent_model.messages import user_message
from agent_model.plan import PlanBook
from agent_model.profiles import AgentProfile
from agent_model.run import observe_limit
from agent_model.tool_arguments import parse_arguments
from agent_model.tool_io import ToolRequest, observation_text
from config.settings import Settings
from prompts import agent_notes
from runtime.worker_factory import activities_for
from tools import TOOLS, schemas


class InProcessAgent:
    """Holds the activity objects across runs, as a worker would."""

    def __init__(self, settings: Settings) -> None:
        functions = activities_for(settings)
        self.by_name = {getattr(fn, "__temporal_activity_definition").name: fn for fn in functions}
        self.env = ActivityEnvironment()

    async def run(self, task: str, profile: AgentProfile, workspace: str) -> int:
        """Run the loop for profile.max_steps steps (or until a reply without a
        tool call); returns the steps taken. Only activity tools are run."""
        directory = await self.env.run(self.by_name["prepare_workspace"], workspace)
        memory, plans, hinted = Memory.for_profile(profile), PlanBook(), set()
        memory.add(user_message(task))
        tools = schemas(profile.tools) or None
        limit = observe_limit(profile)
        step = 0
        while step < profile.max_steps:
            step += 1
            prompt = agent_loop.next_step_message(profile, directory, plans)
            if prompt is not None:
                memory.add(prompt)
            request = ThinkRequest(
                llm=profile.llm,
                system_prompt=agent_loop.system_prompt(profile, directory, plans),
                messages=memory.window(),
                tools=tools,
                tool_choice=profile.tool_choice,
            )
            reply = agent_loop.read_reply(await self.env.run(self.by_name["think"], request), profile)
            if reply.kind != ReplyKind.ACT:
                break
            memory.add(reply.message)
            for index, call in enumerate(reply.message.tool_calls or []):
                name = call.function.name
                refusal = agent_loop.unknown_tool(profile, name, TOOLS) or agent_loop.over_the_per_reply_limit(
                    profile, index
                )
                if refusal is None and TOOLS[name].runs_in_workflow:
                    raise RuntimeError(f"the in-process loop only runs activity tools, not {name}")
                arguments, bad = parse_arguments(name, call.function.arguments)
                if refusal is not None or arguments is None:
                    observation, error = refusal or bad, True
                else:
                    result = await self.env.run(self.by_name[name], ToolRequest(workspace=workspace, arguments=arguments))
                    observation, error = observation_text(result), result.error
                memory.add(agent_loop.observed(call, observation, error, limit)[0])
            if reply.dropped:
                memory.add(agent_loop.dropped_calls_reminder(reply))
            signature = agent_loop.stuck_hint_due(memory, reply.message, hinted, profile.duplicate_threshold)
            if signature is not None:
                hinted.add(signature)
                memory.add(user_message(agent_notes.STUCK_HINT))
        return step
