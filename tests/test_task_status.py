"""Temporal's status matches the outcome: a run or flow that did not do its
task ends FAILED with a one-line reason (the Web UI's status and Failures
filter), while everything that reads a run's ending still gets its whole
result; a run that did its task completes as before."""

from __future__ import annotations

import re
import uuid

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from agent_model.errors import TASK_NOT_DONE_ERROR
from agent_model.flow import FlowOutcome, PlanningFlowResult
from agent_model.outcome_words import agent_outcome
from agent_model.plan import StepStatus
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.session import SessionMessage
from agent_model.state import AgentState, StopReason
from runtime import mcp_server, run_control
from testkit.fake_openai import ErrorReply, Reply, call, python, terminate
from tests.test_agent_workflow import PROFILE
from tests.test_planning_flow import FlowScript, plan_reply, start_flow
from tests.test_run_control import Harness, harness, wait_for_question  # noqa: F401 (a fixture)
from tests.test_run_list import listed, rows, says
from tests.test_session_workflow import start as start_session, turn_ended
from workflows import search_attributes
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow

pytestmark = pytest.mark.timeout(90)


async def start(env, settings, **kw) -> WorkflowHandle:
    return await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="do it", profile=PROFILE, **kw),
        id=f"status-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        result_type=AgentRunResult,
    )


async def failure_of(handle: WorkflowHandle) -> ApplicationError:
    """The run's failure, checked to be the one a task not done ends with."""
    with pytest.raises(WorkflowFailureError) as ended:
        await handle.result()
    cause = ended.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == TASK_NOT_DONE_ERROR and cause.non_retryable
    assert "\n" not in cause.message
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    return cause


ENDINGS = {
    "gave up": ([terminate("I cannot", status="failure")], {}, StopReason.GAVE_UP, "gave up"),
    "step limit": ([python("print(1)")], {"max_steps": 1}, StopReason.MAX_STEPS, "step limit"),
    "error": ([ErrorReply(401)], {}, StopReason.ERROR, "error"),
    "empty replies": ([[Reply(content=None), Reply(content=None)]], {}, StopReason.EMPTY_REPLY, "error"),
}


@pytest.mark.parametrize("turns, run, reason, word", ENDINGS.values(), ids=ENDINGS.keys())
async def test_a_run_that_did_not_do_its_task_fails_with_its_result(
    time_skipping_env, worker, settings, fake_llm, turns, run, reason, word
):
    fake_llm.turns = turns
    handle = await start(time_skipping_env, settings, **run)
    failure = await failure_of(handle)

    (carried,) = failure.details
    result = AgentRunResult.model_validate(carried)
    assert result.stop_reason == reason and not result.succeeded
    assert failure.message.startswith(f"{word}: {agent_outcome(result).meaning}")
    if result.note:
        assert " ".join(result.note.split())[:100] in failure.message
    # The steps query replays the closed run, as for a completed one.
    assert await handle.query(AgentWorkflow.steps, 0) == result.steps
    assert await run_control.finished_result(time_skipping_env.client, handle.id) == result


async def test_a_run_that_did_its_task_completes(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python("print(1)"), terminate("done")]
    handle = await start(time_skipping_env, settings)
    assert (await handle.result()).final_answer == "done"
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_a_flow_with_a_blocked_step_fails_and_still_counts_the_step(time_skipping_env, worker, settings, fake_llm):
    fake_llm.responder = FlowScript(
        plan_reply("One", "Two"),
        {1: [python("print(1)"), terminate("one")], 2: [Reply(tool_calls=[call("terminate", {"status": "failure"})])]},
    )
    handle = await start_flow(time_skipping_env, settings, max_replans=0)
    failure = await failure_of(handle)

    result = PlanningFlowResult.model_validate(failure.details[0])
    assert result.outcome == FlowOutcome.BLOCKED and failure.message.startswith("blocked: ")
    assert "step 2 is blocked" in failure.message
    # The step's run failed too, and the flow still read its result from that failure.
    step_run = time_skipping_env.client.get_workflow_handle(f"{handle.id}/step-2", result_type=AgentRunResult)
    step_result = AgentRunResult.model_validate((await failure_of(step_run)).details[0])
    assert step_result.stop_reason == StopReason.GAVE_UP
    blocked = result.steps[1]
    assert blocked.status == StepStatus.BLOCKED and blocked.state == AgentState.FINISHED
    assert blocked.reason is not None and blocked.reason.startswith("gave_up")
    assert result.usage.total_tokens >= step_result.usage.total_tokens > 0
    plan = await handle.query(PlanningFlowWorkflow.plan_query)
    assert [s.status for s in plan.steps] == [StepStatus.COMPLETED, StepStatus.BLOCKED]


async def test_a_session_whose_turn_gave_up_goes_on_and_ends_by_its_last_turn(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.turns = [terminate("I cannot", status="failure"), terminate("done now")]
    handle = await start_session(time_skipping_env, settings)
    await turn_ended(handle, 1)
    # The failed turn did not fail the run: it takes the next message.
    await handle.execute_update(AgentWorkflow.send_message, SessionMessage(text="try again"))
    result = await handle.result()  # the idle time skips by: the session ends with its last turn's outcome
    assert result.stop_reason == StopReason.TERMINATED
    assert [t.stop_reason for t in result.turns] == [StopReason.GAVE_UP, StopReason.TERMINATED]
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_result_show_list_and_the_mcp_server_read_a_failed_run(harness):
    h: Harness = harness
    h.fake.turns = [terminate("I cannot", status="failure")]
    handle = await h.dev_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="An impossible task", agent="manus"),
        id=f"status-{uuid.uuid4().hex[:8]}",
        task_queue=h.settings.task_queue,
        search_attributes=search_attributes.initial("manus"),
    )
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    out = await h.cli("result", handle.id, expect=1)  # the exit code of a run that gave up, as before
    assert "gave up: the agent ended without doing its task" in out and "I cannot" in out
    assert "The run ends (gave_up)" in await h.cli("show", handle.id)  # its steps, from the result
    assert says(rows(await listed(h, expect={handle.id}))[handle.id], "gave up")
    assert handle.id in await h.cli("list", "--state", "failed", "--limit", "100")

    client = h.dev_env.client
    fields = await mcp_server.ended_fields(client, handle.id, await run_control.describe(client, handle.id))
    assert (fields["state"], fields["stop_reason"], fields["final_answer"]) == ("FINISHED", "gave_up", "I cannot")


async def test_the_printed_link_opens_the_tab_that_shows_what_the_run_waits_for(harness):
    """Web UI 2.54's User Metadata tab (/workflows/ID/RUN/user-metadata) holds
    the Summary and the Current Details with the question; the run's bare page
    opens the Timeline, where neither shows."""
    h: Harness = harness
    h.fake.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "Which colour?"})]), terminate("blue")]
    out = await h.cli("run", "--detach", "Pick a colour")
    link = next(line.removeprefix("Web UI: ") for line in out.splitlines() if line.startswith("Web UI: "))
    match = re.fullmatch(r"http://[^/]+/namespaces/default/workflows/([^/]+)/([0-9a-f-]{36})/user-metadata", link)
    assert match is not None, link
    run_id, execution = match.groups()
    handle = h.dev_env.client.get_workflow_handle(run_id, run_id=execution)
    await wait_for_question(handle)
    description = await handle.describe()
    assert description.run_id == execution and await description.static_summary() == "Pick a colour"
    assert "Which colour?" in (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    await h.cli("answer", run_id, "blue")


async def test_every_execution_of_a_continued_run_shows_its_task(time_skipping_env, worker, settings, fake_llm):
    """The first execution's Summary is the task; Temporal gives the ones
    continue-as-new starts none, so their details open with it."""
    fake_llm.turns = [python(f"print({n})") for n in range(3)] + [terminate("done")]
    task = "count   to three\nthen stop"
    started = await time_skipping_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=task, profile=PROFILE, steps_per_run=2),
        id=f"status-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        static_summary=task,
    )
    latest = time_skipping_env.client.get_workflow_handle(started.id, result_type=AgentRunResult)
    assert (await latest.result()).steps_taken == 4
    first = time_skipping_env.client.get_workflow_handle(started.id, run_id=started.result_run_id)
    assert await (await first.describe()).static_summary() == task
    description = await latest.describe()
    assert description.run_id != started.result_run_id  # it did continue
    metadata = await latest.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert metadata.current_details.startswith("**task** count to three then stop")


async def test_a_run_that_gave_up_takes_a_follow_up(harness):
    """FAILED because its task was not done, the run keeps its state: `chat ID`
    goes on with it, as with a completed run."""
    h: Harness = harness
    h.fake.turns = [terminate("I cannot", status="failure"), terminate("now I can")]
    handle = await h.start("a hard task")
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    out = await h.cli("chat", handle.id, "try again with a hint")
    assert f"{handle.id}: turn 2 starts now (the run went on in a new execution)" in out
    assert "turn 2: finished: the agent ended its task" in out and "now I can" in out
