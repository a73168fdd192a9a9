"""Every payload the workflows hand to Temporal stays under its 2 MiB limit by
construction: results, query answers, think requests (the memory window) and
current details, however long the run and its texts."""

from __future__ import annotations

import io
import json

from temporalio.api.sdk.v1 import WorkflowMetadata

from agent_model.flow import FlowOutcome, PlanningFlowResult, StepOutcome
from agent_model.memory import Memory
from agent_model.messages import Function, ToolCall, assistant_message, tool_message, user_message
from agent_model.payload import DETAILS_LIMIT, PAYLOAD_LIMIT, first_within, fit, json_size, newest_within
from agent_model.plan import Plan, PlanStep, StepStatus
from agent_model.run import AgentRunResult, HumanAnswer, StepRecord, ToolCallRecord, fit_result, records_page
from agent_model.state import AgentState, StopReason
from runtime import run_control
from runtime.follow import follow
from testkit.fake_openai import Reply, call
from tests.test_agent_workflow import PROFILE, start, wait_for_question
from workflows.agent import AgentWorkflow

BIG = 450_000
"""A reply's text just under the think activity's 512 KiB limit."""


def record(step: int, size: int) -> StepRecord:
    return StepRecord(
        step=step,
        thought="t" * size,
        tool_calls=[ToolCallRecord(id=f"c{step}", name="bash", arguments="{}", observation="o" * size)],
    )


# ---- pure functions ---------------------------------------------------------------------


def test_fit_keeps_what_fits_and_cuts_the_longest_texts_first():
    plan = Plan(plan_id="p", title="t", steps=[PlanStep(text="short"), PlanStep(text="x" * 3_000_000)])
    assert fit(plan.model_copy(update={"steps": plan.steps[:1]})) == plan.model_copy(update={"steps": plan.steps[:1]})
    fitted = fit(plan)
    assert json_size(fitted) <= PAYLOAD_LIMIT
    assert fitted.steps[0].text == "short" and fitted.steps[1].text.startswith("xxx")
    assert "more characters cut]" in fitted.steps[1].text


def test_control_characters_are_measured_as_json_writes_them():
    # Each \x01 becomes six bytes of JSON (\u0001): counting characters is not enough.
    fitted = fit(Plan(plan_id="p", title="\x01" * 400_000))
    assert json_size(fitted) <= PAYLOAD_LIMIT


def test_a_long_run_result_fits_however_many_steps():
    records = [record(n, 5_000) for n in range(1, 3001)]
    result = AgentRunResult(
        agent="a", state=AgentState.FINISHED, stop_reason=StopReason.MAX_STEPS, final_answer="A" * BIG, steps=records
    )
    assert json_size(result) > 2 * PAYLOAD_LIMIT
    fitted = fit_result(result)
    assert json_size(fitted) <= PAYLOAD_LIMIT
    assert fitted.steps[-1].step == 3000  # the newest records are the ones kept
    assert fitted.final_answer == "A" * BIG
    short = result.model_copy(update={"steps": records[:3]})
    assert fit_result(short) == short


def test_records_are_paged_within_the_limit():
    records = [record(n, 300_000) for n in range(1, 8)]
    pages, since = [], 0
    while page := records_page(records, since):
        assert json_size(page) <= PAYLOAD_LIMIT
        pages.append(page)
        since += len(page)
    assert [r.step for page in pages for r in page] == list(range(1, 8))
    assert len(pages) > 1


def test_a_record_too_large_alone_is_cut_to_fit():
    (page,) = [records_page([record(1, 3_000_000)], 0)]
    assert len(page) == 1 and json_size(page) <= PAYLOAD_LIMIT


def test_newest_and_first_within():
    items = [str(n) * 400_000 for n in range(5)]
    assert newest_within(items) == items[3:]
    assert first_within(items) == items[:2]
    assert newest_within([]) == first_within([]) == []


def test_memory_window_stays_within_its_bytes_and_keeps_tool_groups_whole():
    memory = Memory()
    memory.add(user_message("the task"))
    for n in range(8):
        call_ = ToolCall(id=f"c{n}", function=Function(name="bash", arguments="{}"))
        memory.add(assistant_message("a" * 200_000, [call_]))
        memory.add(tool_message("o" * 100_000, f"c{n}", "bash"))
    assert json_size(memory.messages) <= memory.max_bytes
    assert memory.messages[0].content == "the task"
    assert memory.messages[1].role.value == "assistant"  # never a tool reply without its call
    assert memory.messages[-1].tool_call_id == "c7"
    assert memory.sizes == [json_size(m) for m in memory.messages]
    small = Memory(max_bytes=1000)  # the newest group stays, even over the limit
    small.extend([user_message("task"), memory.messages[-2], memory.messages[-1]])
    assert [m.role.value for m in small.messages] == ["user", "assistant", "tool"]


def test_a_flow_result_fits():
    outcome = StepOutcome(index=0, text="s", executor="manus", run_id="r", status=StepStatus.COMPLETED, answer="a" * 900_000)
    result = PlanningFlowResult(
        outcome=FlowOutcome.COMPLETED, plan=Plan(plan_id="p", title="t"), steps=[outcome] * 3, summary="s" * 900_000
    )
    assert json_size(fit(result)) <= PAYLOAD_LIMIT


# ---- a whole run with replies near the think activity's limit ------------------------------


async def test_a_run_of_big_replies_stays_within_every_payload_limit(time_skipping_env, worker, settings, fake_llm):
    # Scripted by request, not by turn: the memory window drops old replies.
    replies = iter([python_with_thought(n) for n in range(6)] + [Reply(content="F" * BIG)])
    fake_llm.responder = lambda body, attempt: next(replies)
    handle = await start(time_skipping_env, settings, profile=PROFILE.model_copy(update={"max_steps": 10}))
    out = io.StringIO()
    result = await follow(handle, out, interactive=False)

    assert result.stop_reason == StopReason.ANSWERED and result.final_answer == "F" * BIG
    assert json_size(result) <= PAYLOAD_LIMIT
    assert [line.split("]")[0] for line in out.getvalue().splitlines() if line.startswith("[")] == [
        f"[{n}/10" for n in range(1, 8)
    ]
    pages, since = [], 0
    while page := await handle.query(AgentWorkflow.steps, since):
        pages.append(page)
        since += len(page)
    assert since == 7 and len(pages) > 1
    assert all(json_size(page) <= PAYLOAD_LIMIT for page in pages)
    assert json_size(await handle.query(AgentWorkflow.memory_messages)) <= PAYLOAD_LIMIT
    records = await run_control.records_of(time_skipping_env.client, handle.id)
    assert records[-1].step == 7
    # The window (what a worker that lost the run's context is sent whole) stays bounded.
    assert all(len(json_body(r)) <= 2 * PAYLOAD_LIMIT for r in fake_llm.requests)


async def test_current_details_stay_short_with_a_long_question(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "?" * 200_000})]), Reply(content="ok")]
    handle = await start(time_skipping_env, settings)
    question = await wait_for_question(handle)
    details = (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    assert "**waiting for the user**" in details and len(details) <= DETAILS_LIMIT + 100
    await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="fine"))
    await handle.result()


def python_with_thought(n: int) -> Reply:
    return Reply(content=f"{n}" * BIG, tool_calls=[call("python_execute", {"code": f"print({n})"})])


def json_body(request) -> bytes:
    return json.dumps(request.body).encode()
