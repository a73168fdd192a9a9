"""Calls of one reply whose tools may run beside others (web_fetch, web_search)
run at once, each its own activity; observations keep the model's order; a
call of any other tool runs alone in its place; a run whose input lacks the
mark runs them one by one; a cancel reaches every call of the group.

On the dev server with an in-process worker and the fake LLM; the pages come
from a local server whose requests wait for one another (testkit/crowd.py),
so a page says whether its call had company.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult, StepRecord
from config.settings import WebSettings
from prompts import agent_notes
from runtime.worker_factory import build_worker
from testkit.crowd import Crowd
from testkit.e2e import has_heartbeated, wait_until
from testkit.fake_openai import Reply, call, terminate
from testkit.fake_web import FakeWeb
from testkit.run_results import final_result
from testkit.settings import make_settings
from tools import with_tool_terms
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.timeout(120)

PROFILE = AgentProfile(
    name="reader",
    system_prompt="You read pages in {directory}.",
    next_step_prompt="What next?",
    tools=["web_fetch", "bash", "python_execute", "terminate"],
    max_steps=4,
    max_observe=2000,
)


@pytest.fixture
def web() -> Iterator[FakeWeb]:
    server = FakeWeb().start()
    yield server
    server.stop()


@pytest.fixture
def reading_settings(fake_llm, tmp_path, web):
    return make_settings(fake_llm.base_url, tmp_path / "workspace").model_copy(
        update={"web": WebSettings(allow=(web.origin,))}
    )


def fetch(url: str):
    return call("web_fetch", {"url": url})


async def start_run(env, settings, profile: AgentProfile):
    return await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="Read the pages.", profile=profile),
        id=f"reader-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        result_type=AgentRunResult,
    )


def older_input_profile(profile: AgentProfile) -> AgentProfile:
    """The profile as an input written before tools carried the mark: the
    same terms, without the field."""
    data = json.loads(profile.model_dump_json())
    for terms in data["tool_terms"].values():
        del terms["concurrent"]
    return AgentProfile.model_validate(data)


def scheduled_and_completed(history) -> list[tuple[str, str]]:
    """("scheduled" | "completed", activity type) of the run's tool calls, in history order."""
    names: dict[int, str] = {}
    order = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            names[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            order.append(("scheduled", names[event.event_id]))
        elif event.HasField("activity_task_completed_event_attributes"):
            order.append(("completed", names[event.activity_task_completed_event_attributes.scheduled_event_id]))
    return [(what, name) for what, name in order if name not in ("prepare_workspace", "think")]


async def test_three_fetches_of_one_reply_are_in_flight_at_once(dev_env, fake_llm, reading_settings, web):
    crowd = Crowd(3, answer_order=("/p3", "/p2", "/p1"))
    urls = [web.route(f"/p{n}", crowd) for n in (1, 2, 3)]
    fake_llm.turns = [Reply(tool_calls=[fetch(url) for url in urls]), terminate("read")]
    profile = with_tool_terms(PROFILE)
    assert profile.tool_terms["web_fetch"].concurrent and not profile.tool_terms["bash"].concurrent
    async with build_worker(dev_env.client, reading_settings):
        result = await final_result(await start_run(dev_env, reading_settings, profile))

    assert crowd.most_in_flight == 3
    assert crowd.answered == ["/p3", "/p2", "/p1"]  # they finished last to first
    observations = [c.observation for c in result.steps[0].tool_calls]
    assert [o.splitlines()[-1] for o in observations] == [f"/p{n} answered 3 in flight." for n in (1, 2, 3)]
    # Memory, as the next think was sent it: one tool message per call, in the model's order.
    tool_messages = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [c.id for c in result.steps[0].tool_calls]
    assert [m["content"].splitlines()[-1] for m in tool_messages] == [o.splitlines()[-1] for o in observations]


async def test_an_input_without_the_mark_runs_them_one_by_one(dev_env, fake_llm, reading_settings, web):
    crowd = Crowd(3, patience=1.0)
    urls = [web.route(f"/p{n}", crowd) for n in (1, 2, 3)]
    fake_llm.turns = [Reply(tool_calls=[fetch(url) for url in urls]), terminate("read")]
    marked = with_tool_terms(PROFILE)
    assert marked.tool_terms["web_fetch"].concurrent
    older = older_input_profile(marked)
    assert not older.tool_terms["web_fetch"].concurrent
    async with build_worker(dev_env.client, reading_settings):
        result = await final_result(await start_run(dev_env, reading_settings, older))

    assert crowd.most_in_flight == 1 and crowd.answered == ["/p1", "/p2", "/p3"]
    assert [c.observation.splitlines()[-1] for c in result.steps[0].tool_calls] == [
        f"/p{n} answered alone." for n in (1, 2, 3)
    ]


async def test_a_bash_call_between_fetches_runs_alone_in_its_place(dev_env, fake_llm, reading_settings, web):
    before, after = Crowd(2), Crowd(2)
    first = [web.route(f"/a{n}", before) for n in (1, 2)]
    second = [web.route(f"/b{n}", after) for n in (1, 2)]
    fake_llm.turns = [
        Reply(tool_calls=[*map(fetch, first), call("bash", {"command": "echo between"}), *map(fetch, second)]),
        terminate("read"),
    ]
    async with build_worker(dev_env.client, reading_settings):
        handle = await start_run(dev_env, reading_settings, with_tool_terms(PROFILE))
        result = await final_result(handle)
        history = await handle.fetch_history()

    assert before.most_in_flight == 2 and after.most_in_flight == 2
    calls = result.steps[0].tool_calls
    assert [c.observation.splitlines()[-1] for c in calls] == [
        "/a1 answered 2 in flight.", "/a2 answered 2 in flight.", "between",
        "/b1 answered 2 in flight.", "/b2 answered 2 in flight.",
    ]
    order = scheduled_and_completed(history)
    bash_scheduled, bash_completed = order.index(("scheduled", "bash")), order.index(("completed", "bash"))
    assert order[:bash_scheduled] == [("scheduled", "web_fetch")] * 2 + [("completed", "web_fetch")] * 2
    assert order[bash_completed + 1:bash_completed + 3] == [("scheduled", "web_fetch")] * 2
    assert bash_completed == bash_scheduled + 1


async def test_cancel_during_a_group_stops_every_call_of_it(dev_env, fake_llm, reading_settings, web):
    crowd = Crowd(3, hold=True)
    urls = [web.route(f"/p{n}", crowd) for n in (1, 2, 3)]
    fake_llm.turns = [
        Reply(tool_calls=[*map(fetch, urls), call("python_execute", {"code": "print('never')"})]),
        terminate("never reached"),
    ]
    try:
        async with build_worker(dev_env.client, reading_settings):
            handle = await start_run(dev_env, reading_settings, with_tool_terms(PROFILE))
            await wait_until(lambda: crowd.in_flight == 3, 30, "three fetches in flight")
            await wait_until(lambda: has_heartbeated(handle, "web_fetch"), 10, "a fetch's first heartbeat")
            await handle.cancel()
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 30)
            assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
            (record,) = await handle.query(AgentWorkflow.steps, 0, result_type=list[StepRecord])
            history = await handle.fetch_history()
    finally:
        crowd.release()

    cancelled = agent_notes.TOOL_CANCELLED_OBSERVATION.format(tool="web_fetch")
    assert [(c.error, c.observation) for c in record.tool_calls] == [(True, cancelled)] * 3 + [
        (True, agent_notes.NOT_RUN_CANCELLED)
    ]
    assert len(fake_llm.requests) == 1
    # The run ended only after every call of the group had.
    kinds = [e.event_type for e in history.events]
    from temporalio.api.enums.v1 import EventType

    ended = kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED)
    assert kinds[:ended].count(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED) == 3


async def test_each_call_of_a_group_has_its_own_span(dev_env, fake_llm, reading_settings, web):
    from testkit.tracing import ancestors, in_memory_tracing, named, parent_of

    crowd = Crowd(3)
    urls = [web.route(f"/p{n}", crowd) for n in (1, 2, 3)]
    fake_llm.turns = [Reply(tool_calls=[fetch(url) for url in urls]), terminate("read")]
    tracing, exporter = in_memory_tracing()
    async with build_worker(dev_env.client, reading_settings, tracing=tracing):
        result = await final_result(await start_run(dev_env, reading_settings, with_tool_terms(PROFILE)))
    spans = list(exporter.get_finished_spans())

    assert crowd.most_in_flight == 3
    (step,) = named(spans, "step 1")
    calls = named(spans, "execute_tool web_fetch")
    # One span per call, side by side under the step (none inside another).
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in calls) == sorted(c.id for c in result.steps[0].tool_calls)
    assert all(parent_of(span, spans) is step for span in calls)
    # Each call's activity runs under its own call's span.
    owners = [
        [a for a in ancestors(activity, spans) if a in calls] for activity in named(spans, "RunActivity:web_fetch")
    ]
    assert all(len(owner) == 1 for owner in owners) and len({id(owner[0]) for owner in owners}) == 3


async def test_a_gated_call_waits_for_its_decision_alone(dev_env, fake_llm, reading_settings, web):
    from agent_model.approval import ApprovalMode, ApprovalPolicy, TimeoutAction

    crowd = Crowd(2, patience=1.0)
    urls = [web.route(f"/p{n}", crowd) for n in (1, 2)]
    fake_llm.turns = [Reply(tool_calls=[fetch(url) for url in urls]), terminate("read")]
    profile = with_tool_terms(PROFILE)
    assert profile.tool_terms["web_fetch"].concurrent
    policy = ApprovalPolicy(mode=ApprovalMode.ALL, timeout_seconds=1, on_timeout=TimeoutAction.APPROVE)
    async with build_worker(dev_env.client, reading_settings):
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Read the pages.", profile=profile, approval=policy),
            id=f"reader-{uuid.uuid4().hex[:8]}",
            task_queue=reading_settings.task_queue,
            result_type=AgentRunResult,
        )
        result = await final_result(handle)

    calls = result.steps[0].tool_calls
    assert crowd.most_in_flight == 1
    assert [(c.approval.decided_by if c.approval else None, c.observation.splitlines()[-1]) for c in calls] == [
        ("timeout", "/p1 answered alone."), ("timeout", "/p2 answered alone.")
    ]


async def test_the_per_reply_limit_still_refuses_the_calls_over_it(dev_env, fake_llm, reading_settings, web):
    crowd = Crowd(2)
    urls = [web.route(f"/p{n}", crowd) for n in (1, 2, 3)]
    fake_llm.turns = [Reply(tool_calls=[fetch(url) for url in urls]), terminate("read")]
    profile = with_tool_terms(PROFILE.model_copy(update={"max_tool_calls_per_step": 2}))
    assert profile.tool_terms["web_fetch"].concurrent
    async with build_worker(dev_env.client, reading_settings):
        result = await final_result(await start_run(dev_env, reading_settings, profile))

    calls = result.steps[0].tool_calls
    assert crowd.most_in_flight == 2 and len(web.requests_to("/p3")) == 0
    assert [c.observation.splitlines()[-1] for c in calls[:2]] == ["/p1 answered 2 in flight.", "/p2 answered 2 in flight."]
    assert calls[2].error and calls[2].observation == "Error: only 2 tool call(s) per reply; this one was not run."
