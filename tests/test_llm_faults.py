"""LLM faults seen by a whole agent run: the fake OpenAI server misbehaves in
one way per test and the run, on the time-skipping server (retry backoff
timers are skipped), must end FINISHED or end gracefully with a clear note.
Each test also pins the exact number of HTTP attempts the fake saw, which is
what THINK_OPTIONS' retry policy and activities.llm_client.classify promise:

* transient faults (429, 5xx, connection reset, timeout, empty choices) are
  retried: one failed attempt, then the scripted success;
* 400/401/403 are rejected requests: exactly one attempt, state ERROR;
* a fault that never clears ends after THINK_OPTIONS' 6 attempts, state ERROR,
  as a normally completed workflow (not a failed one);
* malformed tool arguments and unknown tools are observations for the model;
* a content-filtered reply (finish_reason "content_filter", no content, no
  tool call) is a complete answer: no retry (the same request would be
  filtered again). The run then ends, not as a success (stop reason
  content_filtered), with a note that names the content filter, so that the
  user knows why there is no answer.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from activities.llm import THINK_OPTIONS
from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.state import AgentState, StopReason
from runtime.worker_factory import build_worker
from testkit.fake_openai import EmptyChoices, ErrorReply, Hang, Raw, Reply, Reset, call, terminate
from testkit.settings import make_settings
from testkit.run_results import final_result
from workflows.agent import AgentWorkflow

PROFILE = AgentProfile(
    name="fault-tester",
    system_prompt="You are a test agent in {directory}.",
    next_step_prompt="What next?",
    tools=["python_execute", "terminate"],
    max_steps=4,
    max_observe=2000,
)

ANSWER = "all done"
MAX_ATTEMPTS = 6
"""THINK_OPTIONS' maximum_attempts, restated so that a change is noticed."""


async def run_agent(env, settings, profile: AgentProfile = PROFILE) -> tuple[WorkflowHandle, AgentRunResult]:
    handle = await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="do it", profile=profile),
        id=f"fault-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        result_type=AgentRunResult,
    )
    result = await final_result(handle)
    # Whatever the fault, the run ended with a result (never left to time
    # out): COMPLETED when its task was done, else FAILED with the result.
    done = WorkflowExecutionStatus.COMPLETED if result.succeeded else WorkflowExecutionStatus.FAILED
    assert (await handle.describe()).status == done
    return handle, result


def attempts_by_turn(fake) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in fake.requests:
        counts[r.turn] = counts.get(r.turn, 0) + 1
    return counts


async def activity_events(handle) -> list[tuple[str, str, object]]:
    """(activity type, event kind, event) for every scheduled/started/completed/failed event."""
    history = await handle.fetch_history()
    scheduled: dict[int, str] = {}
    events = []
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            scheduled[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            events.append((scheduled[e.event_id], "scheduled", e))
        for kind in ("started", "completed", "failed"):
            field = f"activity_task_{kind}_event_attributes"
            if e.HasField(field):
                events.append((scheduled[getattr(e, field).scheduled_event_id], kind, e))
    return events


def test_the_retry_policy_is_the_one_these_tests_assume():
    policy = THINK_OPTIONS["retry_policy"]
    assert policy.maximum_attempts == MAX_ATTEMPTS
    assert policy.initial_interval == timedelta(seconds=1)


# ---- transient faults: one failed attempt, then success ------------------------------


TRANSIENT = {
    "429-retry-after": (ErrorReply(429, retry_after=7), 429),
    "500": (ErrorReply(500), 500),
    "connection-reset": (Reset(), None),
    "empty-choices": (EmptyChoices(), 200),
}


@pytest.mark.parametrize("fault", list(TRANSIENT))
async def test_transient_fault_then_success(time_skipping_env, worker, settings, fake_llm, fault):
    response, status = TRANSIENT[fault]
    fake_llm.turns = [[response, terminate(ANSWER)]]
    handle, result = await run_agent(time_skipping_env, settings)

    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
    assert result.final_answer == ANSWER
    assert [(r.turn, r.attempt, r.status) for r in fake_llm.requests] == [(0, 0, status), (0, 1, 200)]
    assert [r.completed for r in fake_llm.requests] == [status is not None, True]
    events = await activity_events(handle)
    (started,) = [e for name, kind, e in events if (name, kind) == ("think", "started")]
    assert started.activity_task_started_event_attributes.attempt == 2
    if fault == "429-retry-after":
        # The retry waited for Retry-After (7 s, skipped by the test server's
        # clock), not for the retry policy's 1 s first backoff.
        (scheduled,) = [e for name, kind, e in events if (name, kind) == ("think", "scheduled")]
        (completed,) = [e for name, kind, e in events if (name, kind) == ("think", "completed")]
        waited = completed.event_time.ToDatetime() - scheduled.event_time.ToDatetime()
        assert timedelta(seconds=7) <= waited < timedelta(seconds=30), waited


async def test_a_response_that_never_comes_times_out_then_succeeds(time_skipping_env, fake_llm, tmp_path):
    """Hang(): the HTTP call is cut by LLMSettings.request_timeout (1 s here),
    and the retry gets the answer."""
    settings = make_settings(fake_llm.base_url, tmp_path / "ws", request_timeout=1)
    fake_llm.turns = [[Hang(), terminate(ANSWER)]]
    async with build_worker(time_skipping_env.client, settings):
        handle, result = await run_agent(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
    assert result.final_answer == ANSWER
    assert [(r.turn, r.attempt, r.status, r.completed) for r in fake_llm.requests] == [
        (0, 0, None, False),
        (0, 1, 200, True),
    ]
    # The first attempt was cut by the 1 s request timeout (real time), not by
    # the 10 s heartbeat timeout nor the default 300 s request timeout.
    gap = fake_llm.requests[1].received_at - fake_llm.requests[0].received_at
    assert 0.9 <= gap < 8, gap
    events = await activity_events(handle)
    (started,) = [e for name, kind, e in events if (name, kind) == ("think", "started")]
    assert started.activity_task_started_event_attributes.attempt == 2


# ---- the model's reply is unusable: an observation, and the run goes on ------------


async def test_malformed_tool_arguments_become_an_observation(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", raw_arguments='{"code": "print(1)"')]),
        terminate(ANSWER),
    ]
    handle, result = await run_agent(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
    assert attempts_by_turn(fake_llm) == {0: 1, 1: 1}
    (tool_reply,) = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert tool_reply["content"].startswith("Error: the arguments of python_execute are not valid JSON")
    assert result.steps[0].tool_calls[0].error
    # The tool never ran: nothing but the two thinks (the directory is a local activity).
    assert {name for name, _, _ in await activity_events(handle)} == {"think"}


async def test_unknown_tool_becomes_an_observation(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("launch_rocket", {"where": "moon"})]), terminate(ANSWER)]
    handle, result = await run_agent(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
    assert attempts_by_turn(fake_llm) == {0: 1, 1: 1}
    (tool_reply,) = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert tool_reply["content"] == "Error: unknown tool 'launch_rocket'. Available tools: python_execute, terminate."
    assert result.steps[0].tool_calls[0].error
    assert {name for name, _, _ in await activity_events(handle)} == {"think"}


async def test_repeated_and_empty_tool_call_ids_are_renamed_so_the_next_request_is_valid(
    time_skipping_env, worker, settings, fake_llm
):
    """The API refuses (400) a request in which two calls share an id or a call
    has none; the run's next request must be one it accepts."""
    empty_id = {
        "id": "x", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
            {"id": "", "type": "function", "function": {"name": "launch_rocket", "arguments": "{}"}},
            {"id": "dup", "type": "function", "function": {"name": "launch_rocket", "arguments": "{}"}},
        ]}}],
    }
    fake_llm.turns = [
        Reply(tool_calls=[call("launch_rocket", {"n": 1}, id="dup"), call("launch_rocket", {"n": 2}, id="dup")]),
        Raw(body=empty_id),
        terminate(ANSWER),
    ]
    _, result = await run_agent(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
    assert attempts_by_turn(fake_llm) == {0: 1, 1: 1, 2: 1}
    messages = fake_llm.requests[-1].messages
    call_ids = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert len(call_ids) == 4 and all(call_ids) and len(set(call_ids)) == 4, call_ids
    assert answered == call_ids


async def test_a_lone_surrogate_in_the_reply_is_replaced_and_the_step_asked_once(
    time_skipping_env, worker, settings, fake_llm
):
    """JSON "\\ud800" is valid JSON but no UTF-8: the reply is kept with
    U+FFFD in its place, not retried until the run fails."""
    fake_llm.turns = [
        Reply(content="thinking \ud800", tool_calls=[call("launch\ud800", {"where": "\udc00"}, id="id\ud800")]),
        terminate(ANSWER),
    ]
    _, result = await run_agent(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
    assert attempts_by_turn(fake_llm) == {0: 1, 1: 1}
    step = result.steps[0]
    assert step.thought == "thinking \ufffd"
    assert (step.tool_calls[0].id, step.tool_calls[0].name) == ("id\ufffd", "launch\ufffd")
    assert step.tool_calls[0].error  # an unknown tool: an observation for the model
    assistant = [m for m in fake_llm.requests[1].messages if m["role"] == "assistant"]
    assert assistant[0]["content"] == "thinking \ufffd"


# ---- content filter --------------------------------------------------------------------

CONTENT_FILTERED = {"content-none": None, "content-empty": ""}


@pytest.mark.parametrize("case", list(CONTENT_FILTERED))
async def test_content_filter_ends_the_run_without_retrying(time_skipping_env, worker, settings, fake_llm, case):
    """A filtered reply is a complete answer from the API: one attempt, no
    retry (the same request would be filtered again), the run ends."""
    fake_llm.turns = [Reply(content=CONTENT_FILTERED[case], finish_reason="content_filter"), terminate(ANSWER)]
    _, result = await run_agent(time_skipping_env, settings)
    assert [(r.turn, r.attempt, r.status) for r in fake_llm.requests] == [(0, 0, 200)]
    assert result.state in (AgentState.FINISHED, AgentState.ERROR)
    assert result.steps_taken == 1


@pytest.mark.parametrize("case", list(CONTENT_FILTERED))
async def test_content_filter_is_not_a_success_and_says_why(time_skipping_env, worker, settings, fake_llm, case):
    fake_llm.turns = [Reply(content=CONTENT_FILTERED[case], finish_reason="content_filter"), terminate(ANSWER)]
    _, result = await run_agent(time_skipping_env, settings)
    assert len(fake_llm.requests) == 1
    assert not result.succeeded, result
    assert result.stop_reason == StopReason.CONTENT_FILTERED
    assert result.note and "content filter" in result.note.lower().replace("_", " "), result


# ---- rejected requests: one attempt, ERROR, the status in the note ---------------------


@pytest.mark.parametrize("status", [400, 401, 403])
async def test_rejected_request_fails_after_one_attempt(time_skipping_env, worker, settings, fake_llm, status):
    fake_llm.turns = [[ErrorReply(status), terminate(ANSWER)]]
    handle, result = await run_agent(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR), result
    assert f"answered {status}" in result.note, result.note
    assert [(r.turn, r.attempt, r.status) for r in fake_llm.requests] == [(0, 0, status)]
    events = await activity_events(handle)
    assert [kind for name, kind, _ in events if name == "think"] == ["scheduled", "started", "failed"]


async def test_rate_limited_on_every_attempt_ends_in_error_after_six(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [ErrorReply(429)]  # every attempt of turn 0
    handle, result = await run_agent(time_skipping_env, settings)
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR), result
    assert "429" in result.note, result.note
    assert [(r.turn, r.attempt, r.status) for r in fake_llm.requests] == [(0, a, 429) for a in range(MAX_ATTEMPTS)]
    events = await activity_events(handle)
    (started,) = [e for name, kind, e in events if (name, kind) == ("think", "started")]
    assert started.activity_task_started_event_attributes.attempt == MAX_ATTEMPTS
