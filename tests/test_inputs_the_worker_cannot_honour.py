"""Runs whose input asks what the worker cannot do: tool terms no activity
can be scheduled with (an input made by hand: any Temporal client can start
AgentWorkflow), a tool the run started with that a later deploy removed. The
call is an error observation that says so and the run goes on, instead of a
workflow task that fails on every attempt or a model told the tool is
unknown while the same message lists it as available."""

from __future__ import annotations

import asyncio

import pytest

from agent_model.state import AgentState, StopReason
from agent_model.tool_terms import ActivityTerms, BadToolTerms, ToolTerms
from testkit.fake_openai import Reply, call, python, terminate
from tests.test_agent_workflow import PROFILE, start
from tools import TOOLS, with_tool_terms

ABSURD = {
    "negative seconds": {"start_to_close_seconds": -5},
    "no time at all": {"start_to_close_seconds": 0},
    "negative attempts": {"maximum_attempts": -1},
    "a shrinking backoff": {"backoff": 0.5},
    "a negative heartbeat": {"heartbeat_seconds": -1},
    "a longest wait below the first": {"initial_seconds": 10, "maximum_interval_seconds": 1},
}


def with_terms(**change) -> object:
    profile = with_tool_terms(PROFILE)
    terms = profile.tool_terms["python_execute"]
    assert terms.activity is not None
    absurd = terms.model_copy(update={"activity": terms.activity.model_copy(update=change)})
    return profile.model_copy(update={"tool_terms": {**profile.tool_terms, "python_execute": absurd}})


@pytest.mark.parametrize("why", list(ABSURD))
def test_absurd_terms_are_named_before_an_activity_is_scheduled(why):
    good = ActivityTerms.of(TOOLS["python_execute"].activity)
    good.config()  # the code's own terms pass
    with pytest.raises(BadToolTerms):
        good.model_copy(update=ABSURD[why]).config()


async def test_a_call_under_absurd_terms_is_an_error_observation(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python("print(1)"), terminate("done")]
    handle = await start(time_skipping_env, settings, profile=with_terms(maximum_attempts=-1))
    # A generous bound: on the code before, the workflow task failed on every attempt.
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
    (record,) = result.steps[0].tool_calls
    assert record.error and "python_execute" in record.observation and "attempts" in record.observation


async def test_a_tool_the_run_started_with_that_this_worker_lacks_is_named_as_gone(
    time_skipping_env, worker, settings, fake_llm
):
    gone = {"type": "function", "function": {"name": "teleport", "description": "t", "parameters": {"type": "object"}}}
    profile = with_tool_terms(PROFILE)
    profile = profile.model_copy(
        update={
            "tools": [*profile.tools, "teleport"],
            "tool_terms": {**profile.tool_terms, "teleport": ToolTerms(definition=gone)},
        }
    )
    fake_llm.turns = [Reply(tool_calls=[call("teleport", {})]), terminate("done")]
    handle = await start(time_skipping_env, settings, profile=profile)
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.stop_reason == StopReason.TERMINATED
    (record,) = result.steps[0].tool_calls
    assert record.error and "teleport" in record.observation and "this worker has no tool" in record.observation
    assert "teleport" not in record.observation.partition("Available tools:")[2]
