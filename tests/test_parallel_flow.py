"""PlanningFlow runs steps that do not need each other as concurrent child
runs (PlanningFlowInput.parallel_steps), on the dev server with a real worker.

Concurrency is read from the flow's history (the order of its child events),
never from wall-clock times."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle

from agent_model.flow import FlowOutcome, PlanningFlowInput, PlanningFlowResult
from agent_model.plan import StepStatus
from testkit.e2e import wait_until
from testkit.fake_openai import Reply, call, python, terminate
from testkit.run_results import final_result
from tests.test_cancel import dev_settings, dev_worker  # noqa: F401 (fixtures)
from tests.test_planning_flow import FlowScript
from workflows.planning import PlanningFlowWorkflow

THINK_DELAY = 0.3
"""Each step's think takes this long, so that concurrent steps surely overlap."""


def plan_with(steps: list[str], depends_on: list | None) -> Reply:
    arguments = {"command": "create", "plan_id": "x", "title": "The plan", "steps": steps}
    if depends_on is not None:
        arguments["depends_on"] = depends_on
    return Reply(tool_calls=[call("planning", arguments)])


def done(n: int) -> list[Reply]:
    return [Reply(tool_calls=[call("terminate", {"status": "success", "answer": f"step {n} done"})], delay=THINK_DELAY)]


async def start(env, settings, **kw) -> WorkflowHandle:
    return await env.client.start_workflow(
        PlanningFlowWorkflow.run,
        PlanningFlowInput(task="Four independent chores", **kw),
        id=f"flow-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def child_events(handle: WorkflowHandle) -> list[tuple[str, int]]:
    """("start" | "end" | "think", step number or 0) in the flow's history order."""
    events = []
    for e in (await handle.fetch_history()).events:
        if e.HasField("start_child_workflow_execution_initiated_event_attributes"):
            events.append(("start", int(e.start_child_workflow_execution_initiated_event_attributes.workflow_id.rsplit("-", 1)[1])))
        for field in (
            "child_workflow_execution_completed_event_attributes",
            "child_workflow_execution_failed_event_attributes",
            "child_workflow_execution_canceled_event_attributes",
        ):
            if e.HasField(field):
                events.append(("end", int(getattr(e, field).workflow_execution.workflow_id.rsplit("-", 1)[1])))
        if e.HasField("activity_task_scheduled_event_attributes"):
            events.append(("think", 0))
    return events


def position(events, kind: str, step: int) -> int:
    return events.index((kind, step))


async def test_four_independent_steps_run_three_at_a_time(dev_env, dev_worker, dev_settings, fake_llm):
    fake_llm.responder = FlowScript(plan_with(["a", "b", "c", "d"], [[], [], [], []]), {n: done(n) for n in (1, 2, 3, 4)})
    handle = await start(dev_env, dev_settings, parallel_steps=3)
    result: PlanningFlowResult = await final_result(handle)

    assert result.outcome == FlowOutcome.COMPLETED
    assert sorted(o.run_id for o in result.steps) == [f"{handle.id}/step-{n}" for n in (1, 2, 3, 4)]
    events = await child_events(handle)
    first_end = min(position(events, "end", n) for n in (1, 2, 3))
    assert all(position(events, "start", n) < first_end for n in (1, 2, 3))  # three overlap
    assert position(events, "start", 4) > first_end  # the limit held the fourth back
    for n in (1, 2, 3):  # the children's own times overlap too
        child = await dev_env.client.get_workflow_handle(f"{handle.id}/step-{n}").describe()
        others = [await dev_env.client.get_workflow_handle(f"{handle.id}/step-{m}").describe() for m in (1, 2, 3) if m != n]
        assert all(child.start_time < o.close_time and o.start_time < child.close_time for o in others)
    assert (await handle.query(PlanningFlowWorkflow.plan_query)).steps[3].status == StepStatus.COMPLETED
    assert len(await handle.query(PlanningFlowWorkflow.step_outcomes)) == 4


async def test_a_step_starts_only_after_the_step_it_needs(dev_env, dev_worker, dev_settings, fake_llm):
    fake_llm.responder = FlowScript(plan_with(["a", "b needs a", "c"], [[], [1], []]), {n: done(n) for n in (1, 2, 3)})
    handle = await start(dev_env, dev_settings, parallel_steps=3)
    result = await final_result(handle)

    assert result.outcome == FlowOutcome.COMPLETED
    events = await child_events(handle)
    assert position(events, "start", 3) < position(events, "end", 1)  # 1 and 3 together
    assert position(events, "start", 2) > position(events, "end", 1)
    assert result.plan.steps[1].depends_on == [1]


async def test_an_input_without_the_limit_runs_in_order(dev_env, dev_worker, dev_settings, fake_llm):
    fake_llm.responder = FlowScript(plan_with(["a", "b", "c"], [[], [], []]), {n: done(n) for n in (1, 2, 3)})
    handle = await start(dev_env, dev_settings)  # as flows started before parallel steps
    result = await final_result(handle)

    assert result.outcome == FlowOutcome.COMPLETED
    assert [s.depends_on for s in result.plan.steps] == [[], [], []]  # declared, but not used
    starts_and_ends = [e for e in await child_events(handle) if e[0] != "think"]
    assert starts_and_ends == [("start", 1), ("end", 1), ("start", 2), ("end", 2), ("start", 3), ("end", 3)]


async def test_a_blocked_step_among_parallel_ones_is_replanned(dev_env, dev_worker, dev_settings, fake_llm):
    script = FlowScript(
        plan_with(["a", "b", "c"], [[], [], []]),
        {
            1: done(1),
            2: [Reply(tool_calls=[call("terminate", {"status": "failure"})], delay=THINK_DELAY)],
            3: [python("print('slow')"), *done(3)],
            4: done(4),
        },
        replan=Reply(tool_calls=[call("planning", {"command": "update", "steps": ["a", "b", "c", "b again"]})]),
    )
    fake_llm.responder = script
    handle = await start(dev_env, dev_settings, parallel_steps=3)
    result = await final_result(handle)

    assert result.replans == 1
    assert [s.text for s in result.plan.steps] == ["a", "b", "c", "b again"]
    assert [s.status for s in result.plan.steps] == [StepStatus.COMPLETED, StepStatus.BLOCKED, StepStatus.COMPLETED, StepStatus.COMPLETED]
    assert result.outcome == FlowOutcome.BLOCKED  # step 2 stays blocked
    events = await child_events(handle)
    replan_think = len(events) - 1 - events[::-1].index(("think", 0), 1)  # the think before the summary's
    assert position(events, "end", 3) < replan_think < position(events, "start", 4)  # siblings finished first
    assert "Step 2 is blocked: gave_up" in script.by_role["replan"][0]["messages"][1]["content"]


async def test_cancelling_the_flow_cancels_every_running_step(dev_env, dev_worker, dev_settings, fake_llm):
    # Each step's think hangs: their process tools would take turns on the
    # shared workspace's tool lock, thinks do not.
    script = FlowScript(plan_with(["a", "b", "c"], [[], [], []]), {n: [Reply(content="late", delay=15)] for n in (1, 2, 3)})
    fake_llm.responder = script
    handle = await start(dev_env, dev_settings, parallel_steps=3)
    await wait_until(lambda: all(f"step-{n}" in script.by_role for n in (1, 2, 3)), 60, "all three steps' thinks")
    details = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "**running** step(s) 1, 2, 3" in details.current_details
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    for n in (1, 2, 3):
        child = dev_env.client.get_workflow_handle(f"{handle.id}/step-{n}")
        assert (await child.describe()).status == WorkflowExecutionStatus.CANCELED
    plan = await handle.query(PlanningFlowWorkflow.plan_query)
    assert [s.status for s in plan.steps] == [StepStatus.BLOCKED] * 3
