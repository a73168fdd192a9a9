"""Parallel plan steps: a PlanningFlow of 4 independent steps, run with
parallel_steps=3 against parallel_steps=1 (today's one step after another).

    python -m bench.flow_parallel [--rounds N]

One dev server, one in-process worker, the fake LLM; each step's think takes
THINK_DELAY seconds (the fake holds its reply), so a step is ~one slow think.
Rounds are interleaved (3, 1, 3, 1, ...); the figure is the ratio of median
flow wall times, measured in this one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from agent_model.flow import PlanningFlowInput
from bench.common import log
from prompts import planning as prompts
from runtime.worker_factory import build_worker
from testkit.fake_openai import FakeOpenAI, Reply, call
from testkit.run_results import final_result
from testkit.servers import start_dev_server
from testkit.settings import make_settings
from workflows.planning import PlanningFlowWorkflow

THINK_DELAY = 0.5
STEPS = 4


def responder(body: dict, attempt: int) -> Reply:
    system = body["messages"][0]["content"] if body["messages"][0]["role"] == "system" else ""
    if system.startswith(prompts.PLAN_SYSTEM_PROMPT):
        steps = [f"Chore {n}" for n in range(1, STEPS + 1)]
        arguments = {"command": "create", "plan_id": "p", "title": "Chores", "steps": steps, "depends_on": [[]] * STEPS}
        return Reply(tool_calls=[call("planning", arguments)])
    if system == prompts.FINALIZE_SYSTEM_PROMPT:
        return Reply(content="All chores done.")
    return Reply(tool_calls=[call("terminate", {"status": "success", "answer": "done"})], delay=THINK_DELAY)


async def one_flow(env, queue: str, parallel: int) -> float:
    began = time.monotonic()
    handle = await env.client.start_workflow(
        PlanningFlowWorkflow.run,
        PlanningFlowInput(task="Do four chores", parallel_steps=parallel),
        id=f"bench-flow-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )
    result = await final_result(handle)
    assert result.succeeded, result.note
    return time.monotonic() - began


async def main(rounds: int) -> None:
    fake = FakeOpenAI().start()
    fake.responder = responder
    env = await start_dev_server()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            settings = make_settings(fake.base_url, Path(scratch) / "workspace")
            async with build_worker(env.client, settings):
                await one_flow(env, settings.task_queue, 3)  # warm-up
                walls: dict[int, list[float]] = {3: [], 1: []}
                for n in range(rounds):
                    for parallel in (3, 1):
                        walls[parallel].append(await one_flow(env, settings.task_queue, parallel))
                        log(f"round {n + 1}: parallel_steps={parallel}: {walls[parallel][-1]:.2f} s")
    finally:
        await env.shutdown()
        fake.stop()
    medians = {p: statistics.median(w) for p, w in walls.items()}
    print(json.dumps({
        "think_delay_s": THINK_DELAY, "steps": STEPS, "rounds": rounds,
        "median_wall_s": {f"parallel_{p}": round(m, 3) for p, m in medians.items()},
        "ratio_parallel3_over_sequential": round(medians[3] / medians[1], 3),
    }))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
