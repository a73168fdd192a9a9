"""pydantic-ai's agent and its workflow, for pydantic_ai_agent.py.

pydantic-ai's Temporal integration wants the agent at a module's top level
(the workflow names it, and the worker registers its activities from it), so
the agent is built at import from PEER_LLM_BASE_URL, which the program sets
before importing this module. The agent is durable through the
TemporalDurability capability (pydantic_ai.durable_exec.temporal, the
integration's current form; TemporalAgent, its older wrapper, is deprecated
in 2.68): each model request and each call of the one tool, the editor's
`view` of a file in a temp dir, is an activity. The model is OpenAIChatModel,
the Chat Completions API that the fake LLM speaks.
"""

from __future__ import annotations

import os

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import peer_harness
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

BASE_URL_VARIABLE = "PEER_LLM_BASE_URL"
INSTRUCTIONS = "You are a benchmark agent. Follow the script in the task; view files with the editor."

agent = Agent(
    OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=os.environ[BASE_URL_VARIABLE], api_key="bench-key")),
    name="bench_editor",
    instructions=INSTRUCTIONS,
    capabilities=[TemporalDurability()],
)
workdir: peer_harness.Workdir | None = None
"""Set by the program; the tool's activity runs in its process, outside the sandbox."""


@agent.tool_plain
async def str_replace_editor(command: str, path: str) -> str:
    """View a file of the working directory with line numbers (command: view)."""
    assert workdir is not None
    return workdir.view(command, path)


@workflow.defn(name="BenchPydanticAiEditorAgent")
class EditorAgentWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [agent]

    @workflow.run
    async def run(self, task: str, steps: int) -> str:
        # The default request limit (50) is below a 50-step run's steps + 1 model calls.
        result = await agent.run(task, usage_limits=UsageLimits(request_limit=steps + 2))
        return result.output
