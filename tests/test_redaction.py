"""The worker's keys never leave an activity: not in results, not in errors,
hence never in a run's history, the model's context or the terminal."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from pydantic import BaseModel, SecretStr
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.context_store import CONTEXT_DIR_NAME
from activities.redaction import ERROR_MESSAGE_LIMIT, REDACTED, RedactingInterceptor, Redactor, worker_secrets
from agent_model.run import AgentRunInput
from agent_model.state import AgentState, StopReason
from runtime.worker_factory import build_worker
from testkit.fake_openai import ErrorReply, python, terminate
from testkit.settings import make_settings
from testkit.run_results import final_result
from tests.test_agent_workflow import PROFILE
from workflows.agent import AgentWorkflow

KEY = "sk-live-0123456789abcdef"
TEMPORAL_KEY = "tmprl-key-fedcba9876543210"


# ---- the redactor --------------------------------------------------------------------


class Inner(BaseModel):
    texts: list[str]
    table: dict[str, str]


class Outer(BaseModel):
    text: str
    inner: Inner
    count: int = 3


def test_every_string_in_a_result_is_redacted():
    redactor = Redactor([KEY, "short", None, ""])
    value = Outer(text=f"key={KEY}", inner=Inner(texts=["a", KEY * 2], table={KEY: f"x{KEY}y"}))
    redacted = redactor.value(value)
    assert KEY not in redacted.model_dump_json()
    assert redacted.text == f"key={REDACTED}" and redacted.inner.texts == ["a", REDACTED * 2]
    assert redacted.inner.table == {REDACTED: f"x{REDACTED}y"} and redacted.count == 3
    assert redactor.text("short stays") == "short stays"  # under 8 characters: not a secret


def test_errors_keep_how_they_retry():
    redactor = Redactor([KEY])
    original = ApplicationError(
        f"401: bad key {KEY}", f"detail {KEY}", 7, type="LLMRequestRejected", non_retryable=True,
        next_retry_delay=timedelta(seconds=3),
    )
    error = redactor.error(original)
    assert (error.message, error.details) == (f"401: bad key {REDACTED}", (f"detail {REDACTED}", 7))
    assert (error.type, error.non_retryable, error.next_retry_delay) == ("LLMRequestRejected", True, timedelta(seconds=3))
    other = redactor.error(PermissionError(f"cannot read {KEY}"))
    assert (other.message, other.type, other.non_retryable) == (f"cannot read {REDACTED}", "PermissionError", False)
    assert len(redactor.error(ValueError(KEY + "x" * 100_000)).message) < ERROR_MESSAGE_LIMIT + 100


def test_the_worker_secrets_are_every_llm_key_and_temporals(tmp_path, monkeypatch):
    settings = make_settings("http://x/v1", tmp_path, api_key=KEY)
    settings.llm["other"] = settings.llm["default"].model_copy(update={"api_key": SecretStr("sk-other-key-123")})
    monkeypatch.setenv("TEMPORAL_API_KEY", TEMPORAL_KEY)
    assert sorted(worker_secrets(settings)) == sorted([KEY, "sk-other-key-123", TEMPORAL_KEY])


# ---- on a worker ----------------------------------------------------------------------


class Leak(BaseModel):
    output: str


@activity.defn
async def leaky(how: str) -> Leak:
    if how == "result":
        return Leak(output=f"found {KEY}")
    if how == "application_error":
        raise ApplicationError(f"rejected {KEY}", type="Rejected", non_retryable=True)
    raise RuntimeError(f"crashed near {KEY}")


@workflow.defn(sandboxed=False)
class LeakWorkflow:
    @workflow.run
    async def run(self, how: str) -> str:
        result = await workflow.execute_activity(
            leaky, how, start_to_close_timeout=timedelta(seconds=10), retry_policy=RetryPolicy(maximum_attempts=1)
        )
        return result.output


@pytest.mark.parametrize("how", ["result", "application_error", "runtime_error"])
async def test_the_interceptor_redacts_results_and_errors(time_skipping_env, how):
    queue = f"leak-{uuid.uuid4().hex[:8]}"
    client = time_skipping_env.client
    async with Worker(
        client,
        task_queue=queue,
        workflows=[LeakWorkflow],
        activities=[leaky],
        interceptors=[RedactingInterceptor(Redactor([KEY]))],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(LeakWorkflow.run, how, id=f"leak-{uuid.uuid4().hex[:8]}", task_queue=queue)
        if how == "result":
            assert await handle.result() == f"found {REDACTED}"
        else:
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            cause = failed.value.cause
            assert isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError)
            assert REDACTED in cause.cause.message and KEY not in str(cause.cause)
            assert cause.cause.type == {"application_error": "Rejected", "runtime_error": "RuntimeError"}[how]
        assert_history_clean(await handle.fetch_history(), expect_redacted=True)


def assert_history_clean(history, expect_redacted: bool) -> None:
    events = [e.SerializeToString() for e in history.events]  # payload bytes included, not base64
    assert not [e for e in events if KEY.encode() in e]
    if expect_redacted:
        assert any(REDACTED.encode() in e for e in events)


async def start_agent(env, settings):
    return await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="do it", profile=PROFILE),
        id=f"redact-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def test_a_401_echoing_the_key_is_redacted_in_history_and_note(time_skipping_env, fake_llm, tmp_path):
    fake_llm.api_key = KEY
    settings = make_settings(fake_llm.base_url, tmp_path / "ws", api_key=KEY)
    fake_llm.turns = [ErrorReply(401, message=f"Incorrect API key provided: {KEY}.")]
    async with build_worker(time_skipping_env.client, settings):
        handle = await start_agent(time_skipping_env, settings)
        result = await final_result(handle)
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert KEY not in result.note and f"Incorrect API key provided: {REDACTED}" in result.note
    assert_history_clean(await handle.fetch_history(), expect_redacted=True)


async def test_a_tool_printing_the_key_is_redacted_before_the_model_sees_it(time_skipping_env, fake_llm, tmp_path):
    fake_llm.api_key = KEY
    settings = make_settings(fake_llm.base_url, tmp_path / "ws", api_key=KEY)
    half = len(KEY) // 2
    # The code builds the key, so that only its output holds it.
    fake_llm.turns = [python(f"print({KEY[:half]!r} + {KEY[half:]!r})"), terminate("ok")]
    async with build_worker(time_skipping_env.client, settings):
        handle = await start_agent(time_skipping_env, settings)
        result = await handle.result()
    assert result.succeeded
    assert result.steps[0].tool_calls[0].observation.strip() == REDACTED
    tool_reply = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert tool_reply[0]["content"].strip() == REDACTED
    assert_history_clean(await handle.fetch_history(), expect_redacted=True)
    # The observation reached the model through the shared context store: the
    # store holds it as redacted, never the key.
    blobs = [p.read_bytes() for p in (settings.workspace_root / CONTEXT_DIR_NAME).rglob("*") if p.is_file()]
    assert any(REDACTED.encode() in blob for blob in blobs)
    assert not [blob for blob in blobs if KEY.encode() in blob]
