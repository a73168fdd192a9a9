"""The baseline of P1: the least a Temporal think/act loop can cost.

One echo activity to stand for prepare_workspace, then per step two echo
activities (a "think" and an "act") with small string payloads. Same server,
same data converter and the same sandboxed workflow runner as durable-manus;
no LLM, no tool, no memory. P3 uses it as its reference too, with the "think"
echo sleeping like the fake LLM does.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

ECHO_OPTIONS = dict(start_to_close_timeout=timedelta(seconds=30))


@activity.defn(name="bench_echo")
async def echo(text: str) -> str:
    return text


@activity.defn(name="bench_slow_echo")
async def slow_echo(text: str, seconds: float) -> str:
    await asyncio.sleep(seconds)
    return text


@workflow.defn(name="BenchBareLoop")
class BareLoopWorkflow:
    @workflow.run
    async def run(self, steps: int, think_seconds: float = 0.0) -> int:
        await workflow.execute_activity(echo, "prepare", **ECHO_OPTIONS)
        for step in range(1, steps + 1):
            if think_seconds:
                await workflow.execute_activity(
                    slow_echo, args=[f"think {step}", think_seconds], **ECHO_OPTIONS
                )
            else:
                await workflow.execute_activity(echo, f"think {step}", **ECHO_OPTIONS)
            await workflow.execute_activity(echo, f"act {step}", **ECHO_OPTIONS)
        return steps


def bare_worker(client: Client, task_queue: str, **options) -> Worker:
    return Worker(
        client, task_queue=task_queue, workflows=[BareLoopWorkflow], activities=[echo, slow_echo], **options
    )
