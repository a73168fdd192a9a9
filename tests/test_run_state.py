"""One state object: a run's whole mutable state is agent_model/run_state.py
RunState, and continue-as-new hands all of it to the next execution, so a
field added to it cannot be left behind.

- without a server: every field of a state (each given a value other than its
  default) comes back from the continued input's payload, compacted only
  where continuation.py says;
- on a real server: a run that continues as new after every step and the same
  run that never does are indistinguishable through everything a caller can
  see (result, queries, the refusal of a late answer, what the model is sent).
"""

from __future__ import annotations

import asyncio
import json
import uuid

from temporalio.client import WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from agent_model.approval_desk import ApprovalDesk
from agent_model.budget import Budget
from agent_model.continuation import carried_state, continued_input, current_limits
from agent_model.human import HumanAnswer, HumanQuestion, QuestionDesk
from agent_model.memory import Memory
from agent_model.messages import user_message
from agent_model.plan import PlanBook, run_command
from agent_model.records import StepRecord
from agent_model.session import SessionState, TurnRecord
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.run_state import RunState
from agent_model.state import AgentState
from agent_model.think_context import ContextSync
from agent_model.usage import TokenUsage
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply, call, terminate
from tests.test_agent_workflow import PROFILE
from workflows.agent import AgentWorkflow


def a_state_with_every_field_set() -> RunState:
    memory = Memory()
    memory.add(user_message("the task"))
    plans = PlanBook()
    run_command(plans, {"command": "create", "plan_id": "p", "title": "T", "steps": ["a", "b"]})
    return RunState(
        context=ContextSync(key="run/1", known_through=3, system_digest="s", tools_digest="t", stored=[4]),
        profile=PROFILE,
        agent_state=AgentState.RUNNING,
        directory="/w/run",
        step=7,
        steps_before=3,
        memory=memory,
        plans=plans,
        usage=TokenUsage(prompt_tokens=5, completion_tokens=6, total_tokens=11),
        hinted=["signature"],
        empty_replies=1,
        records=[StepRecord(step=7, thought="thinking")],
        earlier_runs=["run-0"],
        desk=QuestionDesk(closed={"2.1": "it was answered"}, answer="yes"),
        approvals=ApprovalDesk(closed={"1.1": "it was decided (approve)"}),
        budget=Budget(max_tokens=1000, ask_at_ceiling=True),
        final_answer="not yet",
        note="a note",
        session=SessionState(turn=2, idle=True, inbox=["next"], turns=[TurnRecord(turn=1, message="the task", first_step=1)]),
        tool_state={"bash": {"cwd": "/w/run/sub"}, "browser_use": {"tabs": [{"url": "http://x/"}]}},
    )


def test_continue_as_new_carries_every_field_of_the_state():
    state = a_state_with_every_field_set()
    default = RunState(context=ContextSync(key="run/1"))
    unset = [name for name in RunState.model_fields if getattr(state, name) == getattr(default, name)]
    assert unset == [], f"give these fields a value in a_state_with_every_field_set: {unset}"

    limits = current_limits()
    run = continued_input(AgentRunInput(task="the task", profile=PROFILE), carried_state(state, "run-1", limits), "run", limits)
    # As the next execution receives it: through the payload converter.
    (received,) = pydantic_data_converter.payload_converter.from_payloads(
        pydantic_data_converter.payload_converter.to_payloads([run]), [AgentRunInput]
    )
    carried = received.carried
    assert isinstance(carried, RunState)
    compacted = {"steps_before": 7, "earlier_runs": ["run-0", "run-1"]}
    for name in RunState.model_fields:
        expected = compacted.get(name, getattr(state, name))
        assert getattr(carried, name) == expected, name


# ---- on a real server ---------------------------------------------------------------------


def script() -> list[Reply]:
    same = Reply(content="same again", tool_calls=[call("bash", {"command": "pwd"})])
    return [
        Reply(tool_calls=[call("bash", {"command": "mkdir -p sub && cd sub"})]),
        Reply(tool_calls=[call("ask_human", {"inquire": "first?"})]),
        Reply(tool_calls=[call("planning", {"command": "create", "plan_id": "p", "title": "T", "steps": ["a", "b"]})]),
        same, same, same, same,  # a stuck hint once, not again after a continue-as-new
        Reply(tool_calls=[call("ask_human", {"inquire": "second?"})]),
        terminate("done"),
    ]


async def observed_run(env, settings, fake_llm, workspace: str, steps_per_run: int | None) -> dict:
    """Everything a caller sees of the scripted run."""
    fake_llm.turns = script()
    first_request = len(fake_llm.requests)
    profile = PROFILE.model_copy(update={"tools": ["bash", "planning", "ask_human", "terminate"], "max_steps": 12})
    started = await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="do it", profile=profile, workspace=workspace, steps_per_run=steps_per_run),
        id=f"state-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )
    handle = env.client.get_workflow_handle(started.id, result_type=AgentRunResult)  # whichever execution is current
    answered: list[HumanQuestion] = []
    late_refusal = None
    while len(answered) < 2:
        try:
            question = await handle.query(AgentWorkflow.pending_question)
        except RPCError:  # asked while one execution handed over to the next: ask again
            question = None
        if question is None or (answered and question.id == answered[-1].id):
            await asyncio.sleep(0.1)
            continue
        if answered:  # the first question is long closed: answering it again is refused, for its reason
            try:
                await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=answered[0].id, text="again"))
            except WorkflowUpdateFailedError as e:
                late_refusal = str(e.cause)
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="yes"))
        answered.append(question)
    result: AgentRunResult = await handle.result()
    latest = env.client.get_workflow_handle(started.id)
    seen = {
        "result": result.model_dump(mode="json"),
        "status": (await latest.query(AgentWorkflow.status)).model_dump(mode="json"),
        "memory": [m.model_dump(mode="json") for m in await latest.query(AgentWorkflow.memory_messages)],
        "plans": (await latest.query(AgentWorkflow.plan_book)).model_dump(mode="json"),
        "late_refusal": late_refusal,
        "model_was_sent": [request.body for request in fake_llm.requests[first_request:]],
    }
    assert result.directory
    return json.loads(json.dumps(seen).replace(result.directory, "<run directory>"))


async def test_a_run_continued_after_every_step_is_the_run_that_never_was(dev_env, settings, fake_llm):
    async with build_worker(dev_env.client, settings):
        once = await observed_run(dev_env, settings, fake_llm, "state-once", None)
        often = await observed_run(dev_env, settings, fake_llm, "state-many", 1)

    assert once["result"]["stop_reason"] == "terminated" and once["result"]["steps_taken"] == 9
    assert "is closed: it was answered" in once["late_refusal"]
    assert "/sub" in once["result"]["steps"][3]["tool_calls"][0]["observation"]  # the shell's directory carried
    assert sum("repeated" in (record["note"] or "") for record in once["result"]["steps"]) == 1
    for part in once:
        assert often[part] == once[part], part
