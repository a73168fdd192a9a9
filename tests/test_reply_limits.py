"""Replies near or over Temporal's payload limit: the think activity refuses a
reply over its limit after one request (never retried: the same request gets
a reply as large), and the run or flow ends at once with a note."""

from __future__ import annotations

import asyncio
import io
import time

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.llm import LLMActivities
from activities.llm_client import MAX_BODY_BYTES, MAX_REPLY_BYTES
from agent_model.errors import REPLY_TOO_LARGE_ERROR
from agent_model.flow import FlowOutcome
from agent_model.llm_io import ThinkRequest
from agent_model.messages import user_message
from agent_model.state import AgentState, StopReason
from config.settings import LLMSettings
from runtime import commands
from testkit.fake_openai import Raw, Reply, call
from testkit.run_results import final_result
from tests.test_agent_workflow import start
from tests.test_planning_flow import FlowScript, start_flow

TOO_LARGE = {"1.9 MB": 1_900_000, "3 MB": 3_000_000}
SECONDS = 30
"""A refused reply ends the run at once; six fetches with backoff take longer."""


async def think(fake, text="hello"):
    llm = LLMActivities({"default": LLMSettings(model="gpt-4o", base_url=fake.base_url, api_key="test-key")})
    return await ActivityEnvironment().run(llm.think, ThinkRequest(messages=[user_message(text)]))


@pytest.mark.parametrize("size", list(TOO_LARGE))
async def test_a_reply_over_the_limit_is_refused_for_good(fake_llm, size):
    fake_llm.turns = [Reply(content="x" * TOO_LARGE[size])]
    with pytest.raises(ApplicationError) as refused:
        await think(fake_llm)
    assert refused.value.type == REPLY_TOO_LARGE_ERROR and refused.value.non_retryable
    assert "over the limit of" in refused.value.message
    assert len(fake_llm.requests) == 1


async def test_tool_call_arguments_count_towards_the_limit(fake_llm):
    half = "y" * (MAX_REPLY_BYTES // 2 + 1000)
    fake_llm.turns = [[Reply(content=half), Reply(content=half, tool_calls=[call("python_execute", {"code": half})])]]
    assert (await think(fake_llm)).message.content == half
    with pytest.raises(ApplicationError) as refused:
        await think(fake_llm)
    assert refused.value.type == REPLY_TOO_LARGE_ERROR


async def test_a_body_over_the_cap_is_not_read(fake_llm):
    fake_llm.turns = [Raw(body=b" " * (MAX_BODY_BYTES + 1))]
    with pytest.raises(ApplicationError) as refused:
        await think(fake_llm)
    assert refused.value.type == REPLY_TOO_LARGE_ERROR
    assert refused.value.message == f"the reply's body has {MAX_BODY_BYTES + 1} bytes, over the limit of {MAX_BODY_BYTES}"


HUGE_REPLIES = {
    **{f"{size} of content": Reply(content="x" * TOO_LARGE[size]) for size in TOO_LARGE},
    "5 MB of tool arguments": Reply(tool_calls=[call("python_execute", {"code": "#" * 5_000_000})]),
}


@pytest.mark.parametrize("reply", list(HUGE_REPLIES))
async def test_a_run_ends_with_a_note_after_one_request(time_skipping_env, worker, settings, fake_llm, reply):
    fake_llm.turns = [HUGE_REPLIES[reply]]
    began = time.monotonic()
    handle = await start(time_skipping_env, settings)
    result = await asyncio.wait_for(final_result(handle), SECONDS)

    assert time.monotonic() - began < SECONDS
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.REPLY_TOO_LARGE)
    assert result.note.startswith("Stopped: the model's reply was too large to use")
    assert len(fake_llm.requests) == 1
    assert commands.report(result, io.StringIO()) == 1


async def test_a_flow_whose_planner_replies_too_much_ends_with_a_note(time_skipping_env, worker, settings, fake_llm):
    script = FlowScript(Reply(content="x" * 3_000_000), {})
    fake_llm.responder = script
    handle = await start_flow(time_skipping_env, settings)
    result = await asyncio.wait_for(final_result(handle), SECONDS)
    assert result.outcome == FlowOutcome.ERROR
    assert result.note.startswith(f"the planner's LLM call failed: {REPLY_TOO_LARGE_ERROR}: the reply")
    assert len(script.by_role["plan"]) == 1
    assert commands.report_flow(result, io.StringIO()) == 1
