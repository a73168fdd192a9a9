"""A run's recorded outcome is the truth: an empty reply is no answer, and an
answer that races the question's timeout has one outcome, told the same to
its sender and to the model."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError
from temporalio.worker._workflow_instance import _WorkflowLogicFlag

from agent_model.human import QuestionClosed, QuestionDesk
from agent_model.run import HumanAnswer, HumanQuestion
from agent_model.state import AgentState, StopReason
from prompts import agent_notes
from runtime.worker_factory import build_worker
from testkit.e2e import wait_until
from testkit.fake_openai import Reply, call, terminate
from testkit.settings import make_settings
from testkit.run_results import final_result
from tests.test_agent_workflow import PROFILE, run, start, tool_messages
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.timeout(90)


# ---- empty replies ---------------------------------------------------------------


async def test_two_empty_replies_in_a_row_end_the_run_in_error(time_skipping_env, worker, settings, fake_llm):
    # The empty reply stays out of the conversation, so the retry is the same turn.
    fake_llm.turns = [[Reply(content=None), Reply(content="  \n")]]
    result = await run(time_skipping_env, settings)

    assert not result.succeeded and not result.final_answer
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.EMPTY_REPLY)
    assert result.note.startswith("Stopped: the model replied with neither text nor a tool call")
    assert "finish_reason=stop" in result.note
    first, second = fake_llm.requests
    assert second.messages[-2] == {"role": "user", "content": agent_notes.EMPTY_REPLY_REMINDER}
    assert all(m["role"] != "assistant" for m in second.messages)
    assert [r.note for r in result.steps] == [agent_notes.EMPTY_REPLY_STEP_NOTE, result.note]


async def test_one_empty_reply_gets_a_reminder_and_the_run_goes_on(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [[Reply(content=""), terminate("391")]]
    result = await run(time_skipping_env, settings)
    assert result.final_answer == "391" and result.steps_taken == 2
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
    assert result.steps[0].note == agent_notes.EMPTY_REPLY_STEP_NOTE


async def test_empty_replies_that_are_not_in_a_row_are_each_reminded(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [
        [Reply(content=None), Reply(tool_calls=[call("python_execute", {"code": "print(1)"})])],
        [Reply(content=None), terminate("done")],
    ]
    result = await run(time_skipping_env, settings)
    assert result.stop_reason == StopReason.TERMINATED
    assert [r.note for r in result.steps][:3] == [
        agent_notes.EMPTY_REPLY_STEP_NOTE, None, agent_notes.EMPTY_REPLY_STEP_NOTE,
    ]


# ---- an answer and the question's timeout ---------------------------------------------


def test_an_answer_accepted_before_the_timeout_is_handled_stands():
    desk = QuestionDesk()
    desk.ask(HumanQuestion(id="1.1", text="Which colour?"))
    assert desk.refusal(HumanAnswer(question_id="1.1", text="blue")) is None
    assert desk.accept(HumanAnswer(question_id="1.1", text="blue")) == "answer to question 1.1 received"
    # The timeout, handled later in the same activation, finds the answer.
    assert desk.close("no answer came within 60 seconds") == "blue"
    assert desk.pending is None
    # A second answer is refused, so no sender hears "received" for an answer the model never gets.
    with pytest.raises(QuestionClosed, match="question 1.1 is closed: it was answered"):
        desk.accept(HumanAnswer(question_id="1.1", text="red"))


def test_an_answer_after_the_timeout_is_refused():
    desk = QuestionDesk()
    desk.ask(HumanQuestion(id="2.1", text="Go ahead?"))
    assert desk.close("no answer came within 60 seconds") is None
    refusal = desk.refusal(HumanAnswer(question_id="2.1", text="yes"))
    assert refusal == "question 2.1 is closed: no answer came within 60 seconds"
    with pytest.raises(QuestionClosed):
        desk.accept(HumanAnswer(question_id="2.1", text="yes"))
    assert desk.answer is None


def test_refusals_name_the_reason():
    desk = QuestionDesk()
    assert desk.refusal(HumanAnswer(question_id="1.1", text="x")) == "no question is waiting for an answer"
    desk.ask(HumanQuestion(id="3.1", text="?"))
    assert desk.refusal(HumanAnswer(question_id="9.9", text="x")) == "question 9.9 is not the one waiting (question 3.1)"
    assert desk.refusal(HumanAnswer(question_id="3.1", text=" ")) == "the answer is empty"


def single_batch_worker(client, settings):
    # No cache, so no sticky queue: the next workflow task goes to whichever worker polls.
    worker = build_worker(client, settings, max_cached_workflows=0)
    # How temporalio will process an activation's jobs by default in a later
    # release (the TODO on _WorkflowLogicFlag): all applied, then run in one
    # batch, so the timer's firing no longer waits for the update's effect.
    worker._set_default_workflow_logic_flag(
        _WorkflowLogicFlag.PROCESS_WORKFLOW_ACTIVATION_JOBS_AS_SINGLE_BATCH, enabled=True
    )
    return worker


async def test_answer_and_timeout_in_one_activation_have_one_outcome(dev_env, fake_llm, tmp_path):
    """The question times out while no worker runs; then the answer is sent,
    and the worker that starts gets the timer's firing and the answer in one
    workflow task. The sender and the model must hear the same outcome.

    With temporalio 1.35's default job order (updates run, and conditions are
    checked, before timers fire) the answer already won; the single batch is
    where the model was told of the timeout after "received"."""
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    profile = PROFILE.model_copy(update={"human_timeout_seconds": 1.0})
    fake_llm.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "Which colour?"})]), terminate("done")]
    async with single_batch_worker(dev_env.client, settings):
        handle = await start(dev_env, settings, profile=profile)
        await wait_until(lambda: handle.query(AgentWorkflow.pending_question), 30, "the question")
        question = await handle.query(AgentWorkflow.pending_question)

    async def timer_fired() -> bool:
        history = await handle.fetch_history()
        return any(e.HasField("timer_fired_event_attributes") for e in history.events)

    await wait_until(timer_fired, 30, "the question's timeout")
    answering = asyncio.ensure_future(
        handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="blue"))
    )
    await asyncio.sleep(1.0)  # the server holds the update for the next workflow task
    assert not answering.done()
    async with single_batch_worker(dev_env.client, settings):
        try:
            confirmation = await asyncio.wait_for(answering, 30)
        except WorkflowUpdateFailedError as e:
            confirmation = None
            assert "closed: no answer came within 1 seconds" in str(e.cause)
        result = await asyncio.wait_for(final_result(handle), 30)

    kinds = [e.event_type for e in (await handle.fetch_history()).events]
    fired = kinds.index(EventType.EVENT_TYPE_TIMER_FIRED)
    # One workflow task after the timer fired decided both.
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in kinds[fired : kinds.index(EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED, fired)]
    (reply,) = tool_messages(fake_llm.requests[1])
    if confirmation is not None:
        assert confirmation == f"answer to question {question.id} received"
        assert reply["content"] == "The user answered: blue"
    else:
        assert reply["content"].startswith("No answer from the user within 1 seconds")
    assert result.final_answer == "done"


def test_the_desk_remembers_only_the_newest_closed_questions():
    from agent_model.desk import CLOSED_KEPT
    from agent_model.human import HumanAnswer, HumanQuestion, QuestionDesk

    desk = QuestionDesk()
    for n in range(CLOSED_KEPT + 5):
        desk.ask(HumanQuestion(id=f"{n}.1", text="?"))
        desk.close("it timed out")
    assert len(desk.closed) == CLOSED_KEPT
    assert desk.refusal(HumanAnswer(question_id=f"{CLOSED_KEPT + 4}.1", text="late")) == (
        f"question {CLOSED_KEPT + 4}.1 is closed: it timed out"
    )
    assert "0.1" not in desk.closed
