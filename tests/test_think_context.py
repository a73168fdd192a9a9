"""Each message is sent to the think activity once: the workflow's ContextSync,
the worker's ThinkContextCache, and the two together in real runs."""

from __future__ import annotations

import shutil
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.context_store import CONTEXT_DIR_NAME
from activities.think_context_cache import ThinkContextCache
from agent_model.llm_io import ThinkRequest
from agent_model.memory import Memory
from agent_model.messages import ToolChoice, assistant_message, tool_message, user_message
from agent_model.run import AgentRunInput, HumanAnswer
from agent_model.state import StopReason
from agent_model.errors import CONTEXT_MISSING_ERROR
from agent_model.think_context import ContextSync
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply, call, python, terminate
from testkit.settings import make_settings
from tests.test_agent_workflow import PROFILE, start
from tests.record_history import pending_question
from workflows.agent import AgentWorkflow

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def build(sync: ContextSync, memory: Memory, system: str = "be useful", tools=TOOLS) -> ThinkRequest:
    return sync.build("default", system, memory.numbered_window(), tools, ToolChoice.AUTO)


def grow(memory: Memory, step: int) -> None:
    memory.add(assistant_message(f"thought {step}"))
    memory.add(tool_message(f"observation {step} " + "x" * step, f"call-{step}", "bash"))
    memory.add(user_message(f"next step after {step}"))


# ---- the workflow's side ---------------------------------------------------------


def test_memory_ids_follow_their_messages_through_trimming():
    memory = Memory(max_messages=4)
    memory.add(user_message("the task"))
    for step in range(1, 8):
        grow(memory, step)
        assert len(memory.ids) == len(memory.messages)
        for message_id, message in memory.numbered_window():
            if message_id == 0:
                assert message.content == "the task"
            else:  # message k of step s has id 3*(s-1) + k
                step_of, kind = divmod(message_id - 1, 3)
                assert f"{step_of + 1}" in (message.content or "")
                assert message.role.value == ("assistant", "tool", "user")[kind]
    assert memory.next_id == 22
    assert memory.ids[0] == 0 and memory.ids[1:] == sorted(memory.ids[1:])


def test_first_request_is_complete_and_later_ones_carry_only_what_is_new():
    memory, sync = Memory(), ContextSync(key="run/1")
    memory.add(user_message("the task"))
    first = build(sync, memory)
    assert ContextSync.is_complete(first)
    assert first.system_prompt == "be useful" and first.tools == TOOLS
    sync.confirm(first)

    grow(memory, 1)
    second = build(sync, memory)
    assert not ContextSync.is_complete(second)
    assert [m.content for m in second.messages][0] == "thought 1" and len(second.messages) == 3
    assert second.system_prompt is None and second.tools is None
    assert second.context.window == [0, 1, 2, 3] and second.context.known_through == 0

    changed = build(sync, memory, system="be useful. Plan: step 2")
    assert changed.system_prompt == "be useful. Plan: step 2" and changed.tools is None

    sync.forget()
    assert ContextSync.is_complete(build(sync, memory))


# ---- the worker's side -------------------------------------------------------------


def test_cache_rebuilds_every_window_exactly_as_sent_whole():
    memory, sync, cache = Memory(max_messages=5), ContextSync(key="run/1"), ThinkContextCache()
    memory.add(user_message("the task"))
    for step in range(1, 12):
        system = f"be useful (step {step // 4})"  # changes now and then, like a plan status
        request = build(sync, memory, system=system)
        parts = cache.resolve(request)
        assert parts.messages == memory.window()
        assert (parts.system_prompt, parts.tools) == (system, TOOLS)
        sync.confirm(request)
        grow(memory, step)
    assert cache.misses == 0
    assert len(request.messages) == 3  # the last step sent one step's messages, not the window


def test_a_worker_without_the_context_says_so_and_a_complete_request_repairs_it():
    memory, sync = Memory(), ContextSync(key="run/1")
    memory.add(user_message("the task"))
    first = build(sync, memory)
    ThinkContextCache().resolve(first)
    sync.confirm(first)
    grow(memory, 1)

    restarted = ThinkContextCache()  # a new worker process
    with pytest.raises(ApplicationError) as missing:
        restarted.resolve(build(sync, memory))
    assert missing.value.type == CONTEXT_MISSING_ERROR and missing.value.non_retryable
    assert missing.value.category == ApplicationErrorCategory.BENIGN  # not logged as a failure
    assert restarted.misses == 1

    sync.forget()
    assert restarted.resolve(build(sync, memory)).messages == memory.window()


def test_a_held_prompt_with_another_digest_is_not_used():
    memory, sync, cache = Memory(), ContextSync(key="run/1"), ThinkContextCache()
    memory.add(user_message("the task"))
    first = build(sync, memory)
    cache.resolve(first)
    sync.confirm(first)
    stale = build(sync, memory).model_copy(deep=True)
    stale.context.system_digest = "0" * 32  # refers to a prompt the worker never saw
    with pytest.raises(ApplicationError):
        cache.resolve(stale)


def test_cache_evicts_the_least_recently_used_run_beyond_its_size():
    cache = ThinkContextCache(max_bytes=30_000)
    syncs = {}
    for run in ("a", "b", "c"):
        memory = Memory()
        memory.add(user_message(run * 12_000))
        syncs[run] = (ContextSync(key=run), memory)
        request = build(syncs[run][0], memory)
        cache.resolve(request)
        syncs[run][0].confirm(request)
    assert len(cache) == 2 and cache.size <= 30_000
    for run, expect_missing in (("a", True), ("c", False)):
        sync, memory = syncs[run]
        grow(memory, 1)
        if expect_missing:
            with pytest.raises(ApplicationError):
                cache.resolve(build(sync, memory))
        else:
            assert cache.resolve(build(sync, memory)).messages == memory.window()


# ---- in real runs -----------------------------------------------------------------------


def think_inputs(history) -> list[ThinkRequest]:
    inputs = []
    for event in history.events:
        attributes = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes") and attributes.activity_type.name == "think":
            (request,) = pydantic_data_converter.payload_converter.from_payloads(
                list(attributes.input.payloads), [ThinkRequest]
            )
            inputs.append(request)
    return inputs


def assert_each_request_extends_the_last(requests) -> None:
    """What the model saw: every request is the previous one plus the turn since."""
    for before, after in zip(requests, requests[1:]):
        assert after.messages[: len(before.messages)] == before.messages
        assert after.messages[len(before.messages)]["role"] == "assistant"
        assert after.tools == before.tools


async def test_a_run_sends_each_observation_once_and_the_model_still_sees_everything(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.turns = [python(f"print('{i}' * 3000)") for i in range(5)] + [terminate()]
    handle = await time_skipping_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="do it", profile=PROFILE.model_copy(update={"max_observe": 5000})),
        id=f"run-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )
    assert (await handle.result()).stop_reason == StopReason.TERMINATED

    requests = fake_llm.requests
    assert len(requests) == 6
    assert_each_request_extends_the_last(requests)
    assert sum(m["role"] == "tool" and len(m["content"]) >= 3000 for m in requests[-1].messages) == 5

    inputs = think_inputs(await handle.fetch_history())
    assert len(inputs) == 6
    assert len(inputs[0].messages) == 2 and inputs[0].system_prompt and inputs[0].tools
    for later in inputs[1:]:
        # Only the next-step prompt travels: the reply and its tool result are
        # in history as activity results already, and named by digest here.
        assert [m.role.value for m in later.messages] == ["user"]
        assert len(later.context.stored) == 2
        assert later.system_prompt is None and later.tools is None
    observations_sent = sum(len(m.content or "") >= 3000 for r in inputs for m in r.messages)
    assert observations_sent == 0


async def restart_run(dev_env, fake_llm, tmp_path, between=lambda settings: None):
    """A run whose worker stops while it waits for an answer; a new worker finishes it."""
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [
        python("print('before the restart')"),
        Reply(tool_calls=[call("ask_human", {"inquire": "go on?"})]),
        python("print('after the restart')"),
        terminate(),
    ]
    async with build_worker(dev_env.client, settings):
        handle = await start(dev_env, settings, profile=PROFILE)
        question = await pending_question(handle, 60)
    between(settings)
    # The first worker (and its context cache) is gone; a new one takes over.
    async with build_worker(dev_env.client, settings):
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="yes"))
        result = await handle.result()
    assert result.stop_reason == StopReason.TERMINATED
    assert_each_request_extends_the_last(fake_llm.requests)
    assert len(fake_llm.requests) == 4  # a failed lookup never reaches the model
    history = await handle.fetch_history()
    failures = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    return failures, [ContextSync.is_complete(r) for r in think_inputs(history)]


async def test_after_a_worker_restart_the_next_think_is_served_from_the_shared_store(dev_env, fake_llm, tmp_path):
    failures, complete = await restart_run(dev_env, fake_llm, tmp_path)
    assert failures == []
    assert complete == [True, False, False, False]


async def test_when_the_shared_store_lacks_the_window_too_the_workflow_sends_it_again(dev_env, fake_llm, tmp_path):
    def lose_the_store(settings):
        shutil.rmtree(settings.workspace_root / CONTEXT_DIR_NAME)

    failures, complete = await restart_run(dev_env, fake_llm, tmp_path, lose_the_store)
    assert failures == [CONTEXT_MISSING_ERROR]
    assert complete == [True, False, False, True, False]
