"""The OpenAI Agents SDK's agent on Temporal, for bench/peers/compare.py.

Runs with .bench-venvs/agents-sdk/bin/python (see setup.py):

    python bench/peers/agents_sdk_agent.py --server HOST:PORT --base-url URL --task-queue Q

then one run request per stdin line (peer_harness.py). The integration is
Temporal's own, OpenAIAgentsPlugin (temporalio.openai_agents, which
temporalio.contrib.openai_agents forwards to): every model call is its
invoke_model_activity, and the one tool, the editor's `view` of a file in a
temp dir, is an activity made a tool with activity_as_tool. The model is the
SDK's Chat Completions model (OpenAIProvider(use_responses=False)), because
the fake LLM speaks the Chat Completions API only, not Responses. The SDK's
own tracing (an exporter to OpenAI's servers) is off.
"""

from __future__ import annotations

import asyncio
import os

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    import peer_harness  # beside this file: python puts the script's folder on sys.path
    from agents import Agent, Runner
    from temporalio.openai_agents import OpenAIAgentsPlugin
    from temporalio.openai_agents.workflow import activity_as_tool

MODEL = "gpt-4o"
INSTRUCTIONS = "You are a benchmark agent. Follow the script in the task; view files with the editor."
WORKDIR: peer_harness.Workdir | None = None
"""Set by main(); the activity runs in this process, outside the sandbox."""


@activity.defn(name="str_replace_editor")
async def str_replace_editor(command: str, path: str) -> str:
    """View a file of the working directory with line numbers (command: view)."""
    assert WORKDIR is not None
    return WORKDIR.view(command, path)


@workflow.defn(name="BenchAgentsSdkEditorAgent")
class EditorAgentWorkflow:
    @workflow.run
    async def run(self, task: str, steps: int) -> str:
        agent = Agent(
            name="bench",
            instructions=INSTRUCTIONS,
            model=MODEL,
            tools=[activity_as_tool(str_replace_editor, start_to_close_timeout=peer_harness.TOOL_TIMEOUT)],
        )
        # The SDK's default is 10 turns; this run takes steps + 1 (the final answer).
        result = await Runner.run(agent, input=task, max_turns=steps + 2)
        return str(result.final_output)


async def main() -> None:
    global WORKDIR
    args = peer_harness.parse_args("The OpenAI Agents SDK's editor agent on Temporal, measured per run.")
    # Read by each trace provider when first used, so it holds for the one the plugin installs too
    # (set_tracing_disabled would only reach the provider in place now).
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI

    # Retries off in the client: the model activity's retry policy decides, as the integration advises.
    provider = OpenAIProvider(
        openai_client=AsyncOpenAI(base_url=args.base_url, api_key="bench-key", max_retries=0), use_responses=False
    )
    client = await Client.connect(args.server, plugins=[OpenAIAgentsPlugin(model_provider=provider)])
    WORKDIR = peer_harness.Workdir()
    try:
        async with Worker(
            client, task_queue=args.task_queue, workflows=[EditorAgentWorkflow], activities=[str_replace_editor]
        ):
            async def run(run_id: str, task: str, steps: int):
                return await client.start_workflow(
                    EditorAgentWorkflow.run, args=[task, steps], id=run_id, task_queue=args.task_queue
                )

            await peer_harness.serve(run)
    finally:
        WORKDIR.close()


if __name__ == "__main__":
    asyncio.run(main())
