"""An LLM that cannot be used is named while it is retried: the think's
failure, which the follower shows and the run's note keeps, gives the
endpoint's host:port (never a key or a password) and the attempt."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.state import AgentState
from testkit.fake_openai import ErrorReply
from testkit.settings import make_settings
from testkit.run_results import final_result
from runtime.worker_factory import build_worker
from workflows.agent import AgentWorkflow

PROFILE = AgentProfile(
    name="endpoint-tester", system_prompt="You are a test agent.", next_step_prompt="What next?",
    tools=["terminate"], max_steps=2, max_observe=2000,
)
MAX_ATTEMPTS = 6
"""The think's retry policy's attempts (activities/llm.py THINK_OPTIONS)."""


async def run_to_end(env, settings) -> AgentRunResult:
    return await final_result(await env.client.start_workflow(
        AgentWorkflow.run, AgentRunInput(task="do it", profile=PROFILE), id=f"endpoint-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue, result_type=AgentRunResult,
    ))


async def test_an_endpoint_that_keeps_failing_is_named_with_the_attempt(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [ErrorReply(503)]  # every attempt
    result = await run_to_end(time_skipping_env, settings)
    assert result.state == AgentState.ERROR
    host_port = urlsplit(fake_llm.base_url).netloc
    assert f"LLM endpoint at {host_port} (attempt {MAX_ATTEMPTS}) answered 503" in result.note, result.note


async def test_an_unreachable_endpoint_is_named_without_its_password(time_skipping_env, tmp_path):
    settings = make_settings("http://user:hunter2@127.0.0.1:9/v1", tmp_path / "ws")
    async with build_worker(time_skipping_env.client, settings):
        result = await run_to_end(time_skipping_env, settings)
    assert result.state == AgentState.ERROR
    assert f"cannot reach the LLM endpoint at 127.0.0.1:9 (attempt {MAX_ATTEMPTS})" in result.note, result.note
    assert "hunter2" not in result.note
