"""The PlanningFlow end to end: its worker is SIGKILLed while a child agent runs."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from agent_model.flow import FlowOutcome, PlanningFlowInput, PlanningFlowResult
from agent_model.plan import StepStatus
from testkit.e2e import (
    child_env,
    has_heartbeated,
    server_address,
    start_starter,
    start_worker,
    unique_queue,
    wait_until,
)
from testkit.fake_openai import Reply, call, python, terminate, turn_of
from tests.test_e2e import appending_code, stop_all, tagged
from tests.test_planning_flow import FlowScript, plan_reply, step_number
from workflows.planning import PlanningFlowWorkflow

pytestmark = pytest.mark.e2e


async def test_flow_survives_a_worker_crash_during_a_child(dev_env, fake_llm, tmp_path):
    log = tmp_path / "executions.log"
    steps = {n: [python(appending_code(log, f"step{n}", f"print({n})\n")), terminate(f"step {n} done")] for n in (1, 2, 3)}
    slow_step2 = [steps[2][0], Reply(tool_calls=steps[2][1].tool_calls, delay=30)]  # dies waiting for this think
    script = FlowScript(plan_reply("First", "Second", "Third"), {**steps, 2: slow_step2})
    fake_llm.responder = script
    queue = unique_queue("crash-flow")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    logs = tmp_path / "logs"
    flow_id = f"e2e-flow-{uuid.uuid4().hex[:8]}"
    first = second = None
    try:
        first = start_worker(env, logs, name="worker1")
        handle = await dev_env.client.start_workflow(
            PlanningFlowWorkflow.run,
            PlanningFlowInput(task="three steps"),
            id=flow_id,
            task_queue=queue,
            result_type=PlanningFlowResult,
            execution_timeout=timedelta(seconds=3600),
        )
        child = dev_env.client.get_workflow_handle(f"{flow_id}/step-2")

        def slow_think_started() -> bool:
            return any(step_number(b) == 2 and turn_of(b) == 1 for b in script.by_role.get("step-2", []))

        await wait_until(slow_think_started, 60, "step 2's slow think")
        await wait_until(lambda: has_heartbeated(child, "think"), 10, "a heartbeat of step 2's think", 0.2)
        first.kill()
        script.steps[2] = steps[2]  # the retried think answers at once

        second = start_worker(env, logs, name="worker2")
        result = await asyncio.wait_for(handle.result(), 90)

        assert result.outcome == FlowOutcome.COMPLETED, result
        assert [s.status for s in result.plan.steps] == [StepStatus.COMPLETED] * 3
        assert [o.answer for o in result.steps] == ["step 1 done", "step 2 done", "step 3 done"]
        # No step ran twice: each step's tool ran once, and one child per step.
        assert [len(tagged(log, f"step{n}")) for n in (1, 2, 3)] == [1, 1, 1]
        for n in (1, 2, 3):
            runs = [w async for w in dev_env.client.list_workflows(f'WorkflowId = "{flow_id}/step-{n}"')]
            assert len(runs) == 1, (n, runs)
        assert len(script.by_role["plan"]) == 1 and len(script.by_role["summary"]) == 1
        assert [len(script.by_role[f"step-{n}"]) for n in (1, 3)] == [2, 2]
        assert len(script.by_role["step-2"]) == 3  # the killed think and its retry
    finally:
        await stop_all(first, second)


async def test_starter_runs_a_planning_flow(dev_env, fake_llm, tmp_path):
    fake_llm.responder = FlowScript(
        plan_reply("[manus] Compute", "[data_analysis] Double it"),
        {1: [python("print(17*23)"), terminate("391")], 2: [python("print(782)"), terminate("782")]},
        summary="391, doubled: 782.",
    )
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue("flow"), base_url=fake_llm.base_url)
    starter = start_starter(
        ["--flow", "planning", "--agents", "manus,data_analysis", "--timeout", "600", "Compute 17*23, then double it"],
        env,
        tmp_path / "logs",
    )
    try:
        code = await starter.wait(90)
        out = starter.stdout()
        assert code == 0, starter.describe()
        assert "step 2 completed: 782" in out and "flow finished: every step of the plan completed" in out
        assert out.rstrip().endswith("391, doubled: 782.")
    finally:
        await stop_all(starter)
