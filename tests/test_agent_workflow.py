"""AgentWorkflow on the time-skipping server, real activities, fake LLM over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import CancelledError

from agent_model.messages import ToolChoice
from agent_model.profiles import AgentProfile
from agent_model.run import MAX_TOOL_CALLS_PER_REPLY, AgentRunInput, AgentRunResult, HumanAnswer, HumanQuestion
from agent_model.state import AgentState, StopReason
from prompts import agent_notes
from runtime.worker_factory import build_worker
from testkit.fake_openai import ErrorReply, Reply, call, python, terminate
from testkit.settings import make_settings
from testkit.run_results import final_result
from workflows.agent import AgentWorkflow

PROFILE = AgentProfile(
    name="tester",
    system_prompt="You are a test agent in {directory}.",
    next_step_prompt="What next?",
    tools=["python_execute", "ask_human", "terminate"],
    max_steps=6,
    max_observe=2000,
)


async def start(env, settings, task="do it", profile=PROFILE, **kw):
    return await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=task, profile=profile, **kw),
        id=f"run-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def run(env, settings, **kw) -> AgentRunResult:
    handle = await start(env, settings, **kw)
    return await final_result(handle)


def tool_messages(request) -> list[dict]:
    return [m for m in request.messages if m["role"] == "tool"]


async def test_terminate_after_a_tool_call(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python("print(17*23)"), terminate("17*23 = 391")]
    result = await run(time_skipping_env, settings)

    assert result.state == AgentState.FINISHED
    assert result.stop_reason == StopReason.TERMINATED
    assert result.succeeded
    assert result.final_answer == "17*23 = 391"
    assert result.steps_taken == 2
    assert result.steps[0].tool_calls[0].observation.strip() == "391"

    first, second = fake_llm.requests
    assert first.messages[0]["role"] == "system"
    assert first.messages[0]["content"].startswith("You are a test agent in /")
    assert [m["content"] for m in first.messages[1:]] == ["do it", "What next?"]
    assert {t["function"]["name"] for t in first.tools} == {"python_execute", "ask_human", "terminate"}
    (reply,) = tool_messages(second)
    assert reply["content"].strip() == "391"
    assert reply["tool_call_id"] == second.messages[3]["tool_calls"][0]["id"]
    assert result.usage.total_tokens > 0


async def test_answer_without_tool_ends_the_run(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(content="It is 42.")]
    result = await run(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.ANSWERED)
    assert result.final_answer == "It is 42."
    assert len(fake_llm.requests) == 1


async def test_answer_without_tool_can_be_configured_to_continue(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(content="thinking aloud"), terminate("ok")]
    profile = PROFILE.model_copy(update={"finish_on_answer": False})
    result = await run(time_skipping_env, settings, profile=profile)
    assert result.stop_reason == StopReason.TERMINATED
    assert len(fake_llm.requests) == 2


async def test_max_steps_ends_with_a_note(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(f"print({i})") for i in range(3)]
    result = await run(time_skipping_env, settings, max_steps=3)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.MAX_STEPS)
    assert not result.succeeded
    assert "3 steps" in result.note
    assert len(fake_llm.requests) == 3


async def test_bad_tool_json_becomes_an_observation(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", raw_arguments='{"code": "print(1)"')]),
        terminate(),
    ]
    result = await run(time_skipping_env, settings)
    assert result.stop_reason == StopReason.TERMINATED
    (reply,) = tool_messages(fake_llm.requests[1])
    assert reply["content"].startswith("Error: the arguments of python_execute are not valid JSON")
    assert result.steps[0].tool_calls[0].error


async def test_unknown_tool_becomes_an_observation(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("fly_to_the_moon", {})]), terminate()]
    result = await run(time_skipping_env, settings)
    assert result.stop_reason == StopReason.TERMINATED
    (reply,) = tool_messages(fake_llm.requests[1])
    assert "unknown tool 'fly_to_the_moon'" in reply["content"]


async def test_tool_failure_becomes_an_observation(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python("raise ValueError('boom')"), terminate()]
    result = await run(time_skipping_env, settings)
    assert result.stop_reason == StopReason.TERMINATED
    (reply,) = tool_messages(fake_llm.requests[1])
    assert reply["content"].startswith("Error:") and "ValueError: boom" in reply["content"]


async def test_stuck_hint_is_added_once(time_skipping_env, worker, settings, fake_llm):
    same = python("print('again')", content="Let me try again.")
    fake_llm.turns = [same] * 5 + [terminate()]
    result = await run(time_skipping_env, settings, max_steps=8)
    assert result.stop_reason == StopReason.TERMINATED
    last = fake_llm.requests[-1]
    hints = [m for m in last.messages if m["role"] == "user" and m["content"] == agent_notes.STUCK_HINT]
    assert len(hints) == 1
    # The hint comes after the third identical reply (threshold 2) and its tool reply.
    third_reply_request = fake_llm.requests[3]
    assert third_reply_request.messages[-2]["content"] == agent_notes.STUCK_HINT


async def wait_for_question(handle) -> HumanQuestion:
    for _ in range(200):
        question = await handle.query(AgentWorkflow.pending_question)
        if question is not None:
            return question
        await asyncio.sleep(0.05)
    raise AssertionError("no question was asked")


async def test_ask_human_answered(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "Which colour?"})]), terminate("blue it is")]
    handle = await start(time_skipping_env, settings)
    question = await wait_for_question(handle)
    assert question.text == "Which colour?"

    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id="9.9", text="red"))
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="  "))
    await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="blue"))

    result = await final_result(handle)
    assert result.final_answer == "blue it is"
    (reply,) = tool_messages(fake_llm.requests[1])
    assert reply["content"] == "The user answered: blue"
    assert await handle.query(AgentWorkflow.pending_question) is None


async def test_ask_human_times_out(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "Anyone there?"})]), terminate()]
    result = await run(time_skipping_env, settings)  # the time-skipping server jumps the hour
    assert result.stop_reason == StopReason.TERMINATED
    (reply,) = tool_messages(fake_llm.requests[1])
    assert reply["content"].startswith("No answer from the user within 3600 seconds")


async def test_cancellation_ends_cleanly_and_kills_the_tool(time_skipping_env, worker, settings, fake_llm, tmp_path):
    pid_file = tmp_path / "pid"
    code = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)"
    fake_llm.turns = [python(code)]
    handle = await start(time_skipping_env, settings)
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.05)
    pid = int(pid_file.read_text())
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await final_result(handle)
    assert isinstance(failure.value.cause, CancelledError)  # Temporal's status: CANCELED
    assert (await handle.query(AgentWorkflow.status)).state == AgentState.CANCELLED
    for _ in range(100):  # the activity learns of the cancellation at its next heartbeat
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the tool's process outlived the cancelled run")


async def test_token_limit_finishes_gracefully(time_skipping_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "ws", max_input_tokens=50)
    fake_llm.turns = [terminate()]
    async with build_worker(time_skipping_env.client, settings):
        result = await run(time_skipping_env, settings, task="word " * 200)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TOKEN_LIMIT)
    assert "over the limit of 50" in result.note
    assert fake_llm.requests == []


async def test_rejected_key_is_an_error_after_one_attempt(time_skipping_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "ws", api_key="sk-wrong")
    fake_llm.turns = [terminate()]
    async with build_worker(time_skipping_env.client, settings):
        result = await run(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert "401" in result.note
    assert len(fake_llm.requests) == 1


async def test_rate_limit_is_retried_after_retry_after(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [[ErrorReply(429, retry_after=1), ErrorReply(500), terminate("fine")]]
    result = await run(time_skipping_env, settings)
    assert result.final_answer == "fine"
    assert [r.status for r in fake_llm.requests] == [429, 500, 200]


async def test_one_tool_call_per_reply_when_the_profile_says_so(time_skipping_env, worker, settings, fake_llm):
    profile = PROFILE.model_copy(update={"max_tool_calls_per_step": 1})
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", {"code": "print(1)"}), call("python_execute", {"code": "print(2)"})]),
        terminate(),
    ]
    result = await run(time_skipping_env, settings, profile=profile)
    first, second = tool_messages(fake_llm.requests[1])
    assert first["content"].strip() == "1"
    assert second["content"].startswith("Error: only 1 tool call")
    assert result.succeeded


async def test_a_reply_of_thousands_of_tool_calls_keeps_the_first_few(time_skipping_env, worker, settings, fake_llm):
    many = [call("no_such_tool", {"n": n}) for n in range(3000)]
    fake_llm.turns = [Reply(tool_calls=many), terminate()]
    result = await run(time_skipping_env, settings)
    assert result.succeeded
    assert len(result.steps[0].tool_calls) == MAX_TOOL_CALLS_PER_REPLY
    assert "2968 tool call(s) beyond the first 32" in result.steps[0].note
    after = fake_llm.requests[1].messages
    (reply,) = [m for m in after if m["role"] == "assistant"]
    assert len(reply["tool_calls"]) == MAX_TOOL_CALLS_PER_REPLY == len(tool_messages(fake_llm.requests[1]))
    assert "asked for 3000 tool calls; only the first 32" in after[-2]["content"]


async def test_required_tool_choice_reminds_instead_of_finishing(time_skipping_env, worker, settings, fake_llm):
    profile = PROFILE.model_copy(update={"tool_choice": ToolChoice.REQUIRED})
    fake_llm.turns = [Reply(content="no tool"), terminate()]
    result = await run(time_skipping_env, settings, profile=profile)
    assert result.stop_reason == StopReason.TERMINATED
    assert fake_llm.requests[1].body["tool_choice"] == "required"
    assert fake_llm.requests[1].messages[-2]["content"] == agent_notes.TOOL_REQUIRED_REMINDER


async def test_queries_show_status_and_memory(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "ok?"})]), terminate()]
    handle = await start(time_skipping_env, settings)
    question = await wait_for_question(handle)
    status = await handle.query(AgentWorkflow.status)
    assert (status.state, status.step, status.max_steps) == (AgentState.RUNNING, 1, 6)
    assert status.pending_question == question
    memory = await handle.query(AgentWorkflow.memory_messages)
    assert [m.role.value for m in memory] == ["user", "user", "assistant"]
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    details = metadata.current_details
    assert "**waiting for the user** (question 1.1): ok?" in details and "**step** 1/6" in details
    await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="yes"))
    await final_result(handle)
    steps = await handle.query(AgentWorkflow.steps, 0)
    assert json.loads(steps[0].tool_calls[0].arguments) == {"inquire": "ok?"}


async def test_any_special_tool_ends_the_run(time_skipping_env, worker, settings, fake_llm):
    profile = PROFILE.model_copy(
        update={"tools": ["create_chat_completion", "terminate"], "special_tools": ["create_chat_completion", "terminate"]}
    )
    fake_llm.turns = [Reply(tool_calls=[call("create_chat_completion", {"response": "the structured answer"})])]
    result = await run(time_skipping_env, settings, profile=profile)
    assert result.stop_reason == StopReason.TERMINATED
    assert result.final_answer == "the structured answer"
    assert len(fake_llm.requests) == 1


async def test_planning_agent_edits_the_workflow_plan(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [
        Reply(tool_calls=[call("planning", {"command": "create", "plan_id": "p", "title": "T", "steps": ["a", "b"]})]),
        Reply(tool_calls=[call("planning", {"command": "mark_step", "step_index": 5})]),
        Reply(tool_calls=[call("planning", {"command": "mark_step", "step_index": 0, "step_status": "completed"})]),
        terminate(),
    ]
    handle = await start(time_skipping_env, settings, agent="planning", profile=None)
    result = await final_result(handle)
    assert result.succeeded
    (bad,) = tool_messages(fake_llm.requests[2])[1:2]
    assert bad["content"].startswith("Error: step_index 5 is out of range")
    # The next-step prompt shows the plan as it stands.
    assert "0. [✓] a" in fake_llm.requests[3].messages[-1]["content"]
    book = await handle.query(AgentWorkflow.plan_book)
    assert book.plans["p"].steps[0].status.value == "completed"
