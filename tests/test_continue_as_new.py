"""A long run goes on in new executions (continue-as-new) and nobody can tell:
the model, the CLI, the Web UI details and a PlanningFlow see one run."""

from __future__ import annotations

import io
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from agent_model.continuation import (
    HISTORY_BYTES_PER_RUN,
    HISTORY_EVENTS_PER_RUN,
    RECORDS_LIMIT,
    compact_records,
    continued_input,
    current_limits,
    should_continue_as_new,
)
from agent_model.flow import FlowOutcome, PlanningFlowResult
from agent_model.memory import Memory
from agent_model.messages import assistant_message, tool_message, user_message
from agent_model.payload import json_size
from agent_model.plan import PlanBook
from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult, RunState, StepRecord, ToolCallRecord
from agent_model.state import StopReason
from agent_model.think_context import ContextSync
from runtime import run_control, run_list
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply, call, python, terminate
from testkit.settings import make_settings
from tests.test_planning_flow import FlowScript, plan_reply, start_flow
from tests.test_run_control import harness  # noqa: F401  (a fixture)
from tests.test_think_context import assert_each_request_extends_the_last, think_inputs
from workflows.agent import AgentWorkflow

LIMITS = current_limits()

PROFILE = AgentProfile(
    name="tester",
    system_prompt="You are a test agent in {directory}.",
    next_step_prompt="What next?",
    tools=["python_execute", "bash", "planning", "terminate"],
    max_steps=20,
    max_observe=2000,
)


# ---- the decisions, without a server ------------------------------------------------


def test_a_run_continues_when_the_server_suggests_it_or_its_share_is_taken():
    assert not should_continue_as_new(False, 100, 10_000, 5, None, LIMITS)
    assert should_continue_as_new(True, 100, 10_000, 5, None, LIMITS)
    assert should_continue_as_new(False, HISTORY_EVENTS_PER_RUN, 0, 5, None, LIMITS)
    assert should_continue_as_new(False, 100, HISTORY_BYTES_PER_RUN, 5, None, LIMITS)
    assert should_continue_as_new(False, 100, 10_000, 3, 3, LIMITS)
    assert not should_continue_as_new(False, 100, 10_000, 2, 3, LIMITS)
    # A new execution that has not taken a step yet never continues again.
    assert not should_continue_as_new(True, HISTORY_EVENTS_PER_RUN, HISTORY_BYTES_PER_RUN, 0, 1, LIMITS)


def test_the_carried_state_of_a_maximal_run_fits_in_one_payload():
    memory = Memory()
    memory.add(user_message("the task " * 1000))
    records = []
    for step in range(1, 3001):
        if step > 2900:  # the window holds far fewer anyway
            memory.add(assistant_message(f"thought {step} " + "t" * 3000))
            memory.add(tool_message("o" * 100_000, f"call-{step}", "bash"))
        records.append(
            StepRecord(
                step=step,
                thought="t" * 3000,
                tool_calls=[ToolCallRecord(id=f"c{step}", name="bash", arguments="a" * 5000, observation="o" * 100_000)],
            )
        )
    kept = compact_records(records, LIMITS)
    assert json_size(kept) <= RECORDS_LIMIT
    assert kept[-1].step == 3000 and [r.step for r in kept] == list(range(kept[0].step, 3001))
    carried = RunState(
        profile=PROFILE, directory="/w/run", step=3000, memory=memory, context=ContextSync(key="k"),
        plans=PlanBook(), records=kept, earlier_runs=["r" * 36] * 20,
    )
    run = continued_input(AgentRunInput(task="the task " * 1000, profile=PROFILE), carried, "run", LIMITS)
    assert json_size(run) < 2 * 1024 * 1024  # Temporal's payload limit
    assert run.carried.records == kept and run.profile is None and len(run.task) < 2100


def test_step_records_give_way_when_the_next_input_would_be_too_large():
    memory = Memory()
    memory.add(user_message("t" * 600_000))  # the task is always kept, whatever its size
    for step in range(1, 20):
        memory.add(assistant_message("a" * 50_000))
    records = [StepRecord(step=n, thought="r" * 20_000) for n in range(1, 20)]
    wordy = PROFILE.model_copy(update={"system_prompt": "p" * 1_300_000})  # a profile given with the run
    carried = RunState(
        profile=wordy, directory="/w", step=19, memory=memory, context=ContextSync(key="k"), records=compact_records(records, LIMITS)
    )
    run = continued_input(AgentRunInput(task="t" * 600_000, profile=wordy), carried, "run", LIMITS)
    assert run.carried.records == [] and json_size(run) < 2 * 1024 * 1024


# ---- real runs ------------------------------------------------------------------------


async def executions(client: Client, workflow_id: str) -> list:
    """The histories of a run's executions, first to last."""
    handle = client.get_workflow_handle(workflow_id)
    first = (await handle.describe()).raw_description.workflow_execution_info
    chain, run_id = [], None
    history = await client.get_workflow_handle(workflow_id, run_id=first.first_run_id).fetch_history()
    while True:
        chain.append(history)
        last = history.events[-1]
        if last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return chain
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()


async def start_continuing(env, settings):
    """A run that continues as new every 2 steps, and a handle that follows it."""
    started = await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="do it", profile=PROFILE, steps_per_run=2),
        id=f"can-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )
    return started, env.client.get_workflow_handle(started.id, result_type=AgentRunResult)


async def test_a_run_that_continues_as_new_goes_on_where_it_was(dev_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [
        Reply(tool_calls=[call("bash", {"command": "mkdir -p sub && cd sub"})]),
        Reply(tool_calls=[call("planning", {"command": "create", "plan_id": "p", "title": "T", "steps": ["a", "b"]})]),
        python("print('three')"),
        Reply(tool_calls=[call("bash", {"command": "pwd"})]),
        python("print('five')"),
        terminate("all done"),
    ]
    async with build_worker(dev_env.client, settings):
        started, handle = await start_continuing(dev_env, settings)
        result = await handle.result()
        chain = await executions(dev_env.client, started.id)
        records = await run_control.records_of(dev_env.client, started.id)
        plan = await handle.query(AgentWorkflow.plan_book)
        out = io.StringIO()
        await run_list.list_runs(dev_env.client, out, limit=200)

    assert result.stop_reason == StopReason.TERMINATED and result.final_answer == "all done"
    assert result.steps_taken == 6 and [s.step for s in result.steps] == [1, 2, 3, 4, 5, 6]
    assert len(chain) == 3  # continued after steps 2 and 4
    # The model saw one conversation: each request the previous one plus a turn.
    assert_each_request_extends_the_last(fake_llm.requests)
    assert plan.active == "p"
    assert records[3].tool_calls[0].observation.strip().endswith("/sub")  # the shell's directory came along
    assert [r.step for r in records] == [1, 2, 3, 4, 5, 6]
    assert sum(r.usage.total_tokens for r in records) == result.usage.total_tokens > 0  # usage came along
    # The workers' context came along too: no execution resent the window.
    inputs = [r for history in chain for r in think_inputs(history)]
    assert [ContextSync.is_complete(r) for r in inputs] == [True] + [False] * 5
    failed = [e for h in chain for e in h.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert failed == []
    assert [line.split()[0] for line in out.getvalue().splitlines()].count(started.id) == 1


async def test_rewind_reaches_a_step_of_an_earlier_execution(dev_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [python("print('one')"), python("print('two')"), python("print('three')"), terminate("done")]
    async with build_worker(dev_env.client, settings):
        started, handle = await start_continuing(dev_env, settings)
        await handle.result()
        asked = len(fake_llm.requests)
        out = io.StringIO()
        try:
            await run_control.rewind(dev_env.client, started.id, 4, out)
        except run_control.RunControlError as e:
            assert "--to-step must be from 0 to 3" in str(e)
        else:
            raise AssertionError("step 4 of a 4-step run was accepted")
        await run_control.rewind(dev_env.client, started.id, 1, out)  # step 2 began in the first execution
        again = await handle.result()
    assert again.final_answer == "done" and again.steps_taken == 4
    reasked = fake_llm.requests[asked:]
    assert [r.turn for r in reasked] == [1, 2, 3]  # steps 2..4 asked again, step 1 not
    assert [m["content"].strip() for m in reasked[0].messages if m["role"] == "tool"] == ["one"]


async def test_a_flow_step_that_continues_as_new_delivers_its_result(time_skipping_env, worker, settings, fake_llm):
    script = FlowScript(
        plan_reply("[manus] Collect the data"),
        {1: [python("print(1)"), python("print(2)"), python("print(3)"), terminate("collected")]},
    )
    fake_llm.responder = script
    handle = await start_flow(time_skipping_env, settings, agents=["manus"], steps_per_run=1)
    result: PlanningFlowResult = await handle.result()
    assert result.outcome == FlowOutcome.COMPLETED
    assert [o.answer for o in result.steps] == ["collected"]
    child = time_skipping_env.client.get_workflow_handle(f"{handle.id}/step-1")
    assert len(await executions(time_skipping_env.client, child.id)) == 4


async def test_the_cli_follows_shows_and_lists_a_continued_run_as_one(harness, fake_llm):
    fake_llm.turns = [python(f"print('out {n}')") for n in range(1, 6)] + [terminate("five printed")]
    out = await harness.cli("--steps-per-run", "2", "print five things")
    printed = [line for line in out.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in printed] == [f"[{n}/20" for n in range(1, 7)]
    assert out.rstrip().endswith("five printed")
    run_id = next(line.split()[1] for line in out.splitlines() if line.startswith("run "))

    shown = await harness.cli("show", run_id)
    assert [f"── step {n} ──" in shown for n in range(1, 7)] == [True] * 6
    assert "← out 5" in shown
    listed = await harness.cli("list")
    assert [line.split()[0] for line in listed.splitlines()].count(run_id) == 1
    handle = harness.dev_env.client.get_workflow_handle(run_id)
    details = (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    assert "**continued** after step 4, in execution 3 of this run" in details
    assert "--steps-per-run must be at least 1" in await harness.cli("--steps-per-run", "0", "x", expect=2)
