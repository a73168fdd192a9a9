"""pydantic-ai's agent on Temporal, for bench/peers/compare.py.

Runs with .bench-venvs/pydantic-ai/bin/python (see setup.py):

    python bench/peers/pydantic_ai_agent.py --server HOST:PORT --base-url URL --task-queue Q

then one run request per stdin line (peer_harness.py). The agent and its
workflow are in pydantic_ai_workflow.py; the worker takes PydanticAIPlugin,
which sets the data converter and registers the agent's activities.
"""

from __future__ import annotations

import asyncio
import os

from temporalio.client import Client
from temporalio.worker import Worker

import peer_harness  # beside this file: python puts the script's folder on sys.path


async def main() -> None:
    args = peer_harness.parse_args("pydantic-ai's editor agent on Temporal, measured per run.")
    os.environ["PEER_LLM_BASE_URL"] = args.base_url
    import pydantic_ai_workflow
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

    client = await Client.connect(args.server, plugins=[PydanticAIPlugin()])
    pydantic_ai_workflow.workdir = peer_harness.Workdir()
    try:
        async with Worker(client, task_queue=args.task_queue, workflows=[pydantic_ai_workflow.EditorAgentWorkflow]):
            async def run(run_id: str, task: str, steps: int):
                return await client.start_workflow(
                    pydantic_ai_workflow.EditorAgentWorkflow.run, args=[task, steps], id=run_id,
                    task_queue=args.task_queue,
                )

            await peer_harness.serve(run)
    finally:
        pydantic_ai_workflow.workdir.close()


if __name__ == "__main__":
    asyncio.run(main())
