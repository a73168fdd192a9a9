"""PlanningFlowWorkflow on the time-skipping server with child AgentWorkflows."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

from agent_model.flow import FlowOutcome, PlanningFlowInput, PlanningFlowResult
from agent_model.plan import DEFAULT_STEPS, StepStatus
from agent_model.state import AgentState
from prompts import planning as prompts
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply, call, python, terminate, turn_of
from testkit.settings import make_settings
from testkit.run_results import final_result
from workflows import search_attributes
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow


def plan_reply(*steps: str) -> Reply:
    return Reply(tool_calls=[call("planning", {"command": "create", "plan_id": "x", "title": "The plan", "steps": list(steps)})])


def step_number(body: dict) -> int:
    first_user = next(m for m in body["messages"] if m["role"] == "user")["content"]
    return int(re.search(r"Your step \(step (\d+)\)", first_user).group(1))


class FlowScript:
    """Routes each request to the planner, replanner, summariser or a step's agent."""

    def __init__(self, plan, steps: dict[int, list], replan=None, summary="Summary: all went well."):
        self.plan, self.steps, self.replan, self.summary = plan, steps, replan, summary
        self.by_role: dict[str, list[dict]] = {}

    def __call__(self, body: dict, attempt: int):
        system = body["messages"][0]["content"] if body["messages"][0]["role"] == "system" else ""
        if system.startswith(prompts.PLAN_SYSTEM_PROMPT):
            role, reply = "plan", self.plan
        elif system.startswith(prompts.REPLAN_SYSTEM_PROMPT):
            role, reply = "replan", self.replan
        elif system == prompts.FINALIZE_SYSTEM_PROMPT:
            role, reply = "summary", Reply(content=self.summary)
        else:
            number = step_number(body)
            script = self.steps[number]
            role, reply = f"step-{number}", script[min(turn_of(body), len(script) - 1)]
        self.by_role.setdefault(role, []).append(body)
        return reply


async def start_flow(env, settings, **kw):
    return await env.client.start_workflow(
        PlanningFlowWorkflow.run,
        PlanningFlowInput(task="Analyse sales and chart them", **kw),
        id=f"flow-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def test_three_steps_two_executors(time_skipping_env, worker, settings, fake_llm):
    script = FlowScript(
        plan_reply("[manus] Collect the data", "[DATA_ANALYSIS] Chart it", "Write the report"),
        {n: [terminate(f"step {n} done")] for n in (1, 2, 3)},
    )
    fake_llm.responder = script
    handle = await start_flow(time_skipping_env, settings, agents=["manus", "data_analysis"])
    result: PlanningFlowResult = await final_result(handle)

    assert result.outcome == FlowOutcome.COMPLETED and result.succeeded
    assert [s.status for s in result.plan.steps] == [StepStatus.COMPLETED] * 3
    assert [o.run_id for o in result.steps] == [f"{handle.id}/step-{n}" for n in (1, 2, 3)]
    assert [o.executor for o in result.steps] == ["manus", "data_analysis", "manus"]
    assert [o.answer for o in result.steps] == ["step 1 done", "step 2 done", "step 3 done"]
    assert result.summary == "Summary: all went well."

    (planner,) = script.by_role["plan"]
    assert planner["tool_choice"] == "required"
    assert "- data_analysis:" in planner["messages"][0]["content"] and "[manus]" in planner["messages"][0]["content"]
    assert planner["messages"][1]["content"].endswith("Analyse sales and chart them")
    (step2,) = script.by_role["step-2"]
    assert step2["messages"][0]["content"].startswith("You are a data analyst")
    assert script.by_role["step-1"][0]["messages"][0]["content"].startswith("You are Manus")
    step2_task = step2["messages"][1]["content"]
    assert "Your step (step 2): [DATA_ANALYSIS] Chart it" in step2_task
    assert "0. [✓] [manus] Collect the data" in step2_task and "1. [→] [DATA_ANALYSIS] Chart it" in step2_task
    (summary,) = script.by_role["summary"]
    assert "step 2 (data_analysis, completed): step 2 done" in summary["messages"][1]["content"]

    child = time_skipping_env.client.get_workflow_handle(f"{handle.id}/step-2")
    assert (await (await child.describe()).static_summary()).startswith("step 2 · data_analysis: [DATA_ANALYSIS] Chart it")
    child_results = [await time_skipping_env.client.get_workflow_handle(o.run_id, result_type=None).result() for o in result.steps]
    assert sum(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in child_results) < result.usage.total_tokens
    plan = await handle.query(PlanningFlowWorkflow.plan_query)
    assert plan.steps[2].status == StepStatus.COMPLETED
    details = (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    assert "Progress: 3/3 steps completed" in details and "2. [✓] Write the report" in details


async def test_blocked_step_triggers_a_replan(time_skipping_env, worker, settings, fake_llm):
    script = FlowScript(
        plan_reply("Collect the data", "Chart it", "Write the report"),
        {
            1: [terminate("data collected")],
            2: [python("print('trying')"), python("print('still trying')")],
            3: [terminate("simple chart made")],
        },
        replan=Reply(tool_calls=[call("planning", {"command": "update", "steps": ["Collect the data", "Chart it", "Make a simpler chart"]})]),
    )
    fake_llm.responder = script
    result = await final_result(await start_flow(time_skipping_env, settings, max_steps_per_agent=2))

    assert result.replans == 1
    assert [s.text for s in result.plan.steps] == ["Collect the data", "Chart it", "Make a simpler chart"]
    assert [s.status for s in result.plan.steps] == [StepStatus.COMPLETED, StepStatus.BLOCKED, StepStatus.COMPLETED]
    assert result.plan.steps[1].notes.startswith("max_steps: Stopped after reaching the step limit (2 steps)")
    assert result.outcome == FlowOutcome.BLOCKED  # never "completed regardless"
    (replan,) = script.by_role["replan"]
    assert "Step 2 is blocked: max_steps" in replan["messages"][1]["content"]


async def test_blocked_step_without_replans_left_ends_the_flow(time_skipping_env, worker, settings, fake_llm):
    script = FlowScript(plan_reply("Only step", "Never reached"), {1: [Reply(tool_calls=[call("terminate", {"status": "failure"})])]})
    fake_llm.responder = script
    result = await final_result(await start_flow(time_skipping_env, settings, max_replans=0))
    assert result.outcome == FlowOutcome.BLOCKED
    assert "step 1 is blocked (gave_up" in result.note
    assert [s.status for s in result.plan.steps] == [StepStatus.BLOCKED, StepStatus.NOT_STARTED]
    assert "replan" not in script.by_role and "summary" in script.by_role


async def test_malformed_plan_falls_back_to_the_default(time_skipping_env, worker, settings, fake_llm):
    script = FlowScript(
        Reply(tool_calls=[call("planning", raw_arguments='{"command": "create", "steps": [')]),
        {n: [terminate(f"ok {n}")] for n in (1, 2, 3)},
    )
    fake_llm.responder = script
    result = await final_result(await start_flow(time_skipping_env, settings))
    assert [s.text for s in result.plan.steps] == list(DEFAULT_STEPS)
    assert result.plan.notes.startswith("Default plan: the planning call's arguments are not valid JSON")
    assert result.outcome == FlowOutcome.COMPLETED


async def test_time_bound_ends_the_flow_with_a_partial_result(time_skipping_env, worker, settings, fake_llm):
    script = FlowScript(
        plan_reply("Ask the user", "Use the answer", "Report"),
        {1: [Reply(tool_calls=[call("ask_human", {"inquire": "Anyone?"})])], 2: [terminate()], 3: [terminate()]},
    )
    fake_llm.responder = script
    handle = await start_flow(time_skipping_env, settings)
    result = await final_result(handle)  # time skips: the child's 1 h question outlasts the flow's bound

    assert result.outcome == FlowOutcome.TIMED_OUT
    assert "3600 s ran out during step 1" in result.note
    assert [s.status for s in result.plan.steps] == [StepStatus.BLOCKED, StepStatus.NOT_STARTED, StepStatus.NOT_STARTED]
    assert "timed out" in result.plan.steps[0].notes.lower()
    assert result.summary == "Summary: all went well."  # the reserve left time to summarise


async def test_cancelling_the_flow_cancels_the_child(time_skipping_env, worker, settings, fake_llm):
    script = FlowScript(plan_reply("Sleep", "Never"), {1: [python("import time; time.sleep(60)")]})
    fake_llm.responder = script
    handle = await start_flow(time_skipping_env, settings)
    child = time_skipping_env.client.get_workflow_handle_for(AgentWorkflow.run, f"{handle.id}/step-1")
    for _ in range(200):
        if "step-1" in script.by_role:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # the tool is running
    await handle.cancel()
    for run in (handle, child):  # both end with Temporal's status CANCELED
        with pytest.raises(WorkflowFailureError) as failure:
            await run.result()
        assert isinstance(failure.value.cause, CancelledError)
    assert (await child.query(AgentWorkflow.status)).state == AgentState.CANCELLED
    assert (await handle.query(PlanningFlowWorkflow.plan_query)).steps[0].status == StepStatus.BLOCKED


async def test_a_flow_started_with_search_attributes_gives_them_to_its_children(dev_env, fake_llm, tmp_path):
    """On the dev server, which has the attributes registered: each step's run
    is filterable by its own agent and publishes its own final state."""
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.responder = FlowScript(
        plan_reply("[manus] Collect the data", "[DATA_ANALYSIS] Chart it"),
        {n: [terminate(f"step {n} done")] for n in (1, 2)},
    )
    async with build_worker(dev_env.client, settings):
        handle = await dev_env.client.start_workflow(
            PlanningFlowWorkflow.run,
            PlanningFlowInput(task="Analyse sales and chart them", agents=["manus", "data_analysis"]),
            id=f"flow-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
            search_attributes=search_attributes.initial(search_attributes.FLOW_AGENT_NAME),
        )
        result = await final_result(handle)
    assert result.outcome == FlowOutcome.COMPLETED
    for outcome in result.steps:
        attributes = (await dev_env.client.get_workflow_handle(outcome.run_id).describe()).typed_search_attributes
        assert attributes.get(search_attributes.AGENT_NAME) == outcome.executor
        assert attributes.get(search_attributes.AGENT_STATE) == AgentState.FINISHED.value
    assert [o.executor for o in result.steps] == ["manus", "data_analysis"]
