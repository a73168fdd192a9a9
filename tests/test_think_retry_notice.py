"""While a think is being retried, the follower says so, once per attempt, with
the think's last failure (the endpoint's host:port and the attempt, as
activities/llm_client.py words it), instead of a silent progress counter."""

from __future__ import annotations

import io
import uuid
from urllib.parse import urlsplit

import pytest
from temporalio.api.common.v1 import ActivityType
from temporalio.api.failure.v1 import Failure
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.contrib.pydantic import pydantic_data_converter

from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from runtime.follow import Watch, follow
from runtime.retry_notice import RetryNotices, retrying_think
from runtime.worker_factory import build_worker
from testkit.fake_openai import ErrorReply, Reply, terminate
from testkit.settings import make_settings
from workflows.agent import AgentWorkflow

PROFILE = AgentProfile(
    name="retry-notice", system_prompt="You are a test agent.", next_step_prompt="What next?",
    tools=["terminate"], max_steps=2, max_observe=2000,
)


def described(*activities: PendingActivityInfo) -> DescribeWorkflowExecutionResponse:
    return DescribeWorkflowExecutionResponse(pending_activities=list(activities))


def think(attempt: int, failure: str | None) -> PendingActivityInfo:
    info = PendingActivityInfo(activity_type=ActivityType(name="think"), attempt=attempt)
    if failure is not None:
        info.last_failure.CopyFrom(Failure(message=failure))
    return info


async def test_a_retried_think_is_one_line_with_its_last_failure():
    failure = "cannot reach the LLM endpoint at 127.0.0.1:9 (attempt 2): Connection refused\n(more)"
    assert await retrying_think(described(think(3, failure)), pydantic_data_converter) == (
        3, "think is being retried (attempt 3): cannot reach the LLM endpoint at 127.0.0.1:9 (attempt 2): "
        "Connection refused (more)",
    )


async def test_a_first_attempt_or_another_activity_is_not_a_retry():
    assert await retrying_think(described(think(1, None)), pydantic_data_converter) is None
    other = PendingActivityInfo(activity_type=ActivityType(name="python_execute"), attempt=4)
    other.last_failure.CopyFrom(Failure(message="boom"))
    assert await retrying_think(described(other), pydantic_data_converter) is None


async def test_each_attempt_is_told_once_per_run():
    notices = RetryNotices()
    converter = pydantic_data_converter
    assert await notices.line("r1", described(think(2, "503")), converter) is not None
    assert await notices.line("r1", described(think(2, "503")), converter) is None
    assert await notices.line("r2", described(think(2, "503")), converter) is not None
    assert await notices.line("r1", described(think(3, "503")), converter) is not None


async def no_stall(run_id: str, waited: float) -> None:
    return None


@pytest.mark.e2e
async def test_the_follower_names_the_endpoint_while_the_think_is_retried(dev_env, fake_llm, tmp_path):
    # Two 503s, then an answer that takes a moment: attempt 3 waits out a 2 s
    # backoff and then runs for a second, long enough for the follower's checks.
    fake_llm.turns = [[ErrorReply(503), ErrorReply(503), Reply(tool_calls=terminate("done").tool_calls, delay=1)]]
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    settings.task_queue = f"retry-notice-{uuid.uuid4().hex[:8]}"
    out = io.StringIO()
    async with build_worker(dev_env.client, settings):
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run, AgentRunInput(task="do it", profile=PROFILE), id=f"retry-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue, result_type=AgentRunResult,
        )
        result = await follow(handle, out, interactive=False, watch=Watch(dev_env.client, no_stall))
    assert result.succeeded, result
    host_port = urlsplit(fake_llm.base_url).netloc
    lines = [line for line in out.getvalue().splitlines() if line.startswith("think is being retried (attempt 3): ")]
    assert len(lines) == 1, out.getvalue()
    assert f"LLM endpoint at {host_port} (attempt 2) answered 503" in lines[0], out.getvalue()
