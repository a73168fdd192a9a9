"""Sessions in a real AgentWorkflow (time-skipping server, real activities, the
fake LLM over HTTP): after a turn the run waits for `send_message`, a message
becomes the next turn with memory, plan and step numbers carried, 50 turns stay
bounded across continue-as-new, and an idle session ends with a note."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult, StepRecord
from agent_model.session import SessionMessage, SessionTerms, SessionView
from agent_model.state import AgentState, StopReason
from testkit.fake_openai import Reply, call, python, terminate
from tests.test_continue_as_new import executions
from workflows.agent import AgentWorkflow

PROFILE = AgentProfile(
    name="chatty",
    system_prompt="You are a test agent in {directory}.",
    tools=["python_execute", "bash", "planning", "terminate"],
    max_steps=3,
    max_observe=2000,
)
TERMS = SessionTerms(idle_seconds=600, max_queued=2, message_limit=1000)


async def start(env, settings, terms: SessionTerms | None = TERMS, **kw) -> WorkflowHandle:
    return await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="first task", profile=PROFILE, session=terms, **kw),
        id=f"chat-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        result_type=AgentRunResult,
    )


async def turn_ended(handle: WorkflowHandle, turn: int) -> SessionView:
    """The session once turn `turn` has ended and the run waits idle."""
    for _ in range(3000):
        view = await handle.query(AgentWorkflow.session)
        if view is not None and view.idle and view.turn == turn and view.turns[-1].ended:
            return view
        await asyncio.sleep(0.01)
    raise AssertionError(f"turn {turn} did not end")


async def send(handle: WorkflowHandle, text: str) -> str:
    return await handle.execute_update(AgentWorkflow.send_message, SessionMessage(text=text))


async def refused(handle: WorkflowHandle, text: str) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as refusal:
        await send(handle, text)
    return str(refusal.value.cause)


async def test_a_follow_up_after_a_finished_turn_goes_on_in_the_same_conversation(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.turns = [
        Reply(tool_calls=[call("bash", {"command": "mkdir -p sub && cd sub && echo x > kept.txt"})]),
        terminate("answer one"),
        Reply(tool_calls=[call("bash", {"command": "pwd && cat kept.txt"})]),
        terminate("answer two"),
    ]
    handle = await start(time_skipping_env, settings)
    view = await turn_ended(handle, 1)
    assert view.turns[0].answer == "answer one" and view.turns[0].stop_reason == StopReason.TERMINATED
    status = await handle.query(AgentWorkflow.status)
    assert status.state == AgentState.IDLE and status.step == 2
    details = (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    assert "**state** IDLE" in details and "**turn 1**: first task" in details
    assert "**waiting for a message** (the session ends after 10 min idle)" in details and "send_message" in details

    assert await send(handle, "now the second thing") == "turn 2 starts now"
    view = await turn_ended(handle, 2)
    details = (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    assert "**turn 2**: now the second thing" in details
    assert [(t.turn, t.message, t.first_step, t.last_step) for t in view.turns] == [
        (1, "first task", 1, 2), (2, "now the second thing", 3, 4)
    ]
    # The memory goes on: the model sees turn 1 and the new message, and bash's directory is carried.
    second = fake_llm.requests[2].messages
    texts = [m.get("content") for m in second if m["role"] == "user"]
    assert "first task" in texts[0] and "now the second thing" in texts
    steps: list[StepRecord] = await handle.query(AgentWorkflow.steps, 0)
    assert [(r.step, r.turn) for r in steps] == [(1, 1), (2, 1), (3, 2), (4, 2)]
    assert steps[2].tool_calls[0].observation.split()[:2][-1] == "x"
    assert steps[2].tool_calls[0].observation.split()[0].endswith("/sub")

    result = await handle.result()  # time skips past the idle limit
    assert result.state == AgentState.FINISHED and result.stop_reason == StopReason.TERMINATED
    assert result.final_answer == "answer two" and result.steps_taken == 4
    assert "idle for 10 min" in (result.note or "") and f"python starter.py chat {handle.id}" in result.note
    assert [t.turn for t in result.turns] == [1, 2]


async def test_a_message_while_a_turn_works_is_queued_and_bad_ones_are_refused(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.turns = [python("import time; time.sleep(1)"), terminate("one"), terminate("two"), terminate("three")]
    handle = await start(time_skipping_env, settings)
    await asyncio.to_thread(fake_llm.wait_for_requests, 1)
    assert await send(handle, "then this") == "queued: turn 2 starts when turn 1 has ended"
    assert await send(handle, "and this") == "queued: turn 3 starts when turn 2 has ended"
    assert "already wait" in await refused(handle, "one too many")
    assert "the message is empty" in await refused(handle, "  ")
    assert "over the limit of 1000" in await refused(handle, "x" * 1001)
    view = await turn_ended(handle, 3)
    assert [(t.turn, t.message, t.answer) for t in view.turns] == [
        (1, "first task", "one"), (2, "then this", "two"), (3, "and this", "three")
    ]
    await handle.cancel()
    with pytest.raises(Exception):
        await handle.result()
    status = await handle.query(AgentWorkflow.status)
    assert status.state == AgentState.CANCELLED


async def test_a_run_that_is_no_session_refuses_a_message_and_ends_as_before(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.turns = [python("import time; time.sleep(1)"), terminate("done")]
    handle = await start(time_skipping_env, settings, terms=None)
    await asyncio.to_thread(fake_llm.wait_for_requests, 1)
    assert "was not started as a session" in await refused(handle, "hello")
    result = await handle.result()
    assert result.final_answer == "done" and result.turns == [] and await handle.query(AgentWorkflow.session) is None


async def test_an_idle_session_is_cancelled_as_any_run(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [terminate("one")]
    handle = await start(time_skipping_env, settings)
    await turn_ended(handle, 1)
    await handle.cancel()
    with pytest.raises(Exception):
        await handle.result()
    assert (await handle.query(AgentWorkflow.status)).state == AgentState.CANCELLED


async def test_fifty_turns_across_continue_as_new_keep_memory_turns_and_plan(
    time_skipping_env, worker, settings, fake_llm
):
    plan = call("planning", {"command": "create", "plan_id": "p", "title": "Chat", "steps": ["talk"]})

    def respond(request: dict, attempt: int):
        messages = request["messages"]
        if not any(m["role"] == "assistant" for m in messages):
            return Reply(tool_calls=[plan])
        said = [m["content"] for m in messages if m["role"] == "user" and str(m["content"]).startswith("message ")]
        return terminate(f"turn {said[-1].split()[1] if said else 1} done")

    fake_llm.responder = respond
    handle = await start(time_skipping_env, settings, steps_per_run=3)
    await turn_ended(handle, 1)
    for n in range(2, 51):
        assert await send(handle, f"message {n}") == f"turn {n} starts now"
        await turn_ended(handle, n)

    view = await handle.query(AgentWorkflow.session)
    assert len(view.turns) == 50 and view.turns[-1].answer == "turn 50 done" and view.turns[-1].first_step == 51
    last = fake_llm.requests[-1].messages
    user_texts = [m.get("content") or "" for m in last if m["role"] == "user"]
    assert any("first task" in t for t in user_texts) and "message 50" in user_texts
    assert (await handle.query(AgentWorkflow.plan_book)).plans["p"].title == "Chat"

    chain = await executions(time_skipping_env.client, handle.id)
    assert len(chain) >= 15  # one execution per 3 steps
    sizes = [len(h.events) for h in chain[:-1]]
    # Bounded however many turns went before: the later executions are no
    # longer than the first ones (how many workflow tasks an update takes
    # depends on timing, so single executions differ by a dozen events).
    first, later = sizes[:5], sizes[-5:]
    assert max(sizes) <= 1.5 * min(sizes), sizes
    assert sum(later) / len(later) <= sum(first) / len(first) + 12, sizes
    await handle.cancel()
