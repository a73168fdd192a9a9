"""Deploying new code under open runs: each run finishes as it began.

The deploy is what an operator does: the run's worker stops, and a worker of
new code takes the open run over. In the new code the manus profile has lost
python_execute and has max_steps=2, and every run continues as new after each
step (agent_model/continuation.py). Runs started by the starter carry their
profile and thresholds in their input, so none of that reaches them.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from datetime import timedelta

from temporalio.api.enums.v1 import EventType

from agent_model import continuation, profiles
from agent_model.flow import FlowOutcome, PlanningFlowResult
from agent_model.profiles import DATA_ANALYSIS, MANUS, AgentProfile
from agent_model.run import AgentRunResult, HumanAnswer
from agent_model.state import StopReason
from runtime.run_start import start_agent_run, start_planning_flow
from runtime.worker_factory import build_worker
from tools import TOOLS
from testkit.fake_openai import Hang, Reply, call, python, terminate
from tests.record_history import pending_question
from tests.test_planning_flow import FlowScript, plan_reply
from workflows.agent import AgentWorkflow

LOST_TOOL = "python_execute"
RESULT_WAIT = 60
"""Seconds a finishing run gets; a few are plenty, the rest is for a loaded machine."""


OLD_TOOL = TOOLS[LOST_TOOL]
NEW_DESCRIPTION = "Reworded by the new deploy."
NEW_TIMEOUT = timedelta(seconds=7)


def deploy_new_code(monkeypatch) -> None:
    """The new worker's code: manus lost a tool and most of its steps, every
    run continues as new after each step, and the lost tool's file (still there
    for other agents) has a new description and a shorter timeout."""
    lost = MANUS.model_copy(update={"tools": [t for t in MANUS.tools if t != LOST_TOOL], "max_steps": 2})
    monkeypatch.setitem(profiles.BUILTIN_PROFILES, "manus", lost)
    monkeypatch.setattr(continuation, "HISTORY_EVENTS_PER_RUN", 1)
    schema = copy.deepcopy(OLD_TOOL.schema)
    schema["function"]["description"] = NEW_DESCRIPTION
    assert OLD_TOOL.activity is not None
    monkeypatch.setitem(
        TOOLS, LOST_TOOL, replace(OLD_TOOL, schema=schema, activity={**OLD_TOOL.activity, "start_to_close_timeout": NEW_TIMEOUT})
    )


def described(request) -> str:
    (tool,) = [t for t in request.tools or [] if t["function"]["name"] == LOST_TOOL]
    return tool["function"]["description"]


async def scheduled_timeouts(handle) -> list[timedelta]:
    """start_to_close of every python_execute call in every execution of the run."""
    timeouts = []
    async for event in handle.fetch_history_events():
        attributes = event.activity_task_scheduled_event_attributes
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and attributes.activity_type.name == LOST_TOOL:
            timeouts.append(attributes.start_to_close_timeout.ToTimedelta())
    return timeouts


def offered(request) -> set[str]:
    return {tool["function"]["name"] for tool in request.tools or []}


async def result_of(handle):
    try:
        return await asyncio.wait_for(handle.result(), RESULT_WAIT)
    except asyncio.TimeoutError:
        raise AssertionError(f"no result within {RESULT_WAIT} s (a non-determinism error in the new code's replay?)") from None


async def finished_as_it_began(env, handle, fake_llm, steps: int) -> AgentRunResult:
    result = await result_of(handle)
    assert result.stop_reason == StopReason.TERMINATED, result
    assert result.steps_taken == steps  # beyond the new code's max_steps=2
    assert result.steps[1].tool_calls[0].observation.strip() == "42"  # the lost tool still ran
    assert all(LOST_TOOL in offered(r) for r in fake_llm.completed()), [offered(r) for r in fake_llm.completed()]
    # The tool as the run began with it: its description, its activity's timeout.
    assert {described(r) for r in fake_llm.completed()} == {OLD_TOOL.schema["function"]["description"]}
    assert OLD_TOOL.activity is not None
    assert set(await scheduled_timeouts(handle)) == {OLD_TOOL.activity["start_to_close_timeout"]}
    # The run's own thresholds: it never continued as new.
    first = env.client.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
    last = (await first.fetch_history()).events[-1]
    assert last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    return result


async def test_a_run_waiting_on_a_question_finishes_as_it_began(dev_env, settings, fake_llm, monkeypatch):
    fake_llm.turns = [
        Reply(tool_calls=[call("ask_human", {"inquire": "Go on?"})]),
        python("print(6*7)"),
        python("print(1)"),
        terminate("42"),
    ]
    async with build_worker(dev_env.client, settings):
        handle = await start_agent_run(
            dev_env.client, settings, "compute", agent="manus", max_steps=None, steps_per_run=None, run_id=None
        )
        question = await pending_question(handle, RESULT_WAIT)
    deploy_new_code(monkeypatch)
    async with build_worker(dev_env.client, settings):
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="yes"))
        await finished_as_it_began(dev_env, handle, fake_llm, steps=4)


async def test_a_run_with_a_think_in_flight_finishes_as_it_began(dev_env, settings, fake_llm, monkeypatch):
    fake_llm.turns = [
        python("print(1)"),
        [Hang(), python("print(6*7)")],  # the old worker stops while the model answers
        python("print(2)"),
        terminate("42"),
    ]
    async with build_worker(dev_env.client, settings, graceful_shutdown_timeout=timedelta(0)):
        handle = await start_agent_run(
            dev_env.client, settings, "compute", agent="manus", max_steps=None, steps_per_run=None, run_id=None
        )
        await fake_llm.await_requests(2)
    deploy_new_code(monkeypatch)
    async with build_worker(dev_env.client, settings):
        await finished_as_it_began(dev_env, handle, fake_llm, steps=4)


async def test_a_flow_started_before_a_deploy_gives_its_steps_the_profiles_it_began_with(
    dev_env, settings, fake_llm, monkeypatch
):
    script = FlowScript(plan_reply("[manus] Compute", "[data_analysis] Report"), {1: [terminate("a")], 2: [terminate("b")]})
    fake_llm.responder = script
    handle = await start_planning_flow(
        dev_env.client, settings, "compute and report", agents=("manus", "data_analysis"), timeout=600,
        max_steps=None, steps_per_run=None, run_id=None,
    )
    deploy_new_code(monkeypatch)  # before any worker took the flow
    monkeypatch.setitem(profiles.BUILTIN_PROFILES, "data_analysis", AgentProfile(name="data_analysis", description="new"))
    async with build_worker(dev_env.client, settings):
        result: PlanningFlowResult = await result_of(handle)
    assert result.outcome == FlowOutcome.COMPLETED, result
    (planner,) = script.by_role["plan"]
    assert DATA_ANALYSIS.description in planner["messages"][0]["content"]
    for role in ("step-1", "step-2"):
        (request,) = script.by_role[role]
        assert LOST_TOOL in {t["function"]["name"] for t in request["tools"]}, role
