"""Any worker serves any think: the shared context store, with the activity run
on two workers (separate in-memory caches, one workspace volume) against the
fake LLM over HTTP, and in real runs on a dev server without eager activities."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from activities.context_store import CONTEXT_DIR_NAME, ContextStore
from activities.llm import LLMActivities
from agent_model.memory import Memory
from agent_model.messages import ToolChoice, user_message
from agent_model.run import AgentRunInput
from agent_model.state import StopReason
from agent_model.errors import CONTEXT_MISSING_ERROR
from agent_model.think_context import ContextSync, message_digest
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply, python, terminate
from testkit.servers import start_dev_server
from testkit.settings import make_settings
from tests.test_agent_workflow import PROFILE
from tests.test_think_context import TOOLS, assert_each_request_extends_the_last, grow, think_inputs
from workflows.agent import AgentWorkflow

SYSTEM = "be useful"


def worker_activities(settings) -> LLMActivities:
    """One worker's think activity: its own memory cache, the shared workspace's store."""
    return LLMActivities(settings.llm, ContextStore(settings.workspace_root))


def expected_body_messages(memory: Memory) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, *(m.to_openai() for m in memory.window())]


async def think(acts: LLMActivities, request, env: ActivityEnvironment | None = None):
    return await (env or ActivityEnvironment()).run(acts.think, request)


def two_thinks(memory: Memory, sync: ContextSync):
    """The run's first think (complete) and its second (only the new messages)."""
    memory.add(user_message("the task"))
    first = sync.build("default", SYSTEM, memory.numbered_window(), TOOLS, ToolChoice.AUTO)
    sync.confirm(first)
    grow(memory, 1)
    second = sync.build("default", SYSTEM, memory.numbered_window(), TOOLS, ToolChoice.AUTO)
    assert len(second.messages) == 3 and second.system_prompt is None and second.tools is None
    return first, second


# ---- the workflow's side ------------------------------------------------------------


def test_a_think_names_each_window_message_by_a_short_content_digest():
    memory, sync = Memory(), ContextSync(key="run/1")
    first, second = two_thinks(memory, sync)
    assert second.context.digests == [message_digest(m) for m in memory.window()]
    assert all(len(d) == 16 for d in second.context.digests)
    assert second.context.digests[0] == first.context.digests[0]


# ---- one think, two workers ------------------------------------------------------------


async def test_another_worker_serves_the_next_think_from_the_shared_store(fake_llm, settings):
    fake_llm.turns = [Reply(content="a"), Reply(content="b")]
    memory, sync = Memory(), ContextSync(key="run/1")
    first, second = two_thinks(memory, sync)
    worker_a, worker_b = worker_activities(settings), worker_activities(settings)

    await think(worker_a, first)
    buffer = MetricBuffer(1000)
    env = ActivityEnvironment()
    env.metric_meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    await think(worker_b, second, env)  # worker B never saw the first think

    assert len(fake_llm.requests) == 2
    assert fake_llm.requests[1].messages == expected_body_messages(memory)
    assert fake_llm.requests[1].tools == TOOLS
    assert worker_b.context_cache.misses == 0
    names = {update.metric.name for update in buffer.retrieve_updates()}
    assert {"think_context_store_fetches", "think_context_fetch_ms"} <= names
    assert "think_context_misses" not in names

    # Worker B now holds the window itself: the third think needs no store.
    sync.confirm(second)
    grow(memory, 2)
    fake_llm.turns.append(Reply(content="c"))
    shutil.rmtree(Path(settings.workspace_root) / CONTEXT_DIR_NAME)
    await think(worker_b, sync.build("default", SYSTEM, memory.numbered_window(), TOOLS, ToolChoice.AUTO))
    assert fake_llm.requests[2].messages == expected_body_messages(memory)


async def test_a_tampered_blob_is_never_sent_to_the_model(fake_llm, settings):
    fake_llm.turns = [Reply(content="a"), Reply(content="b")]
    memory, sync = Memory(), ContextSync(key="run/1")
    first, second = two_thinks(memory, sync)
    await think(worker_activities(settings), first)

    store = ContextStore(settings.workspace_root)
    name = second.context.digests[0]
    blob = store.root / name[:2] / name
    blob.write_bytes(blob.read_bytes().replace(b"the task", b"the tusk"))

    with pytest.raises(ApplicationError) as missing:
        await think(worker_activities(settings), second)
    assert missing.value.type == CONTEXT_MISSING_ERROR
    assert len(fake_llm.requests) == 1  # the changed text never reached the model


def test_the_store_reads_only_blobs_whose_content_matches_their_name(tmp_path):
    store = ContextStore(tmp_path)
    name = store.put(b"hello", 16)
    assert store.get(name) == b"hello"
    (store.root / name[:2] / name).write_bytes(b"hell")  # torn or truncated
    assert store.get(name) is None
    assert store.get("../" + name) is None and store.get(name[:8]) is None
    assert not [p for p in store.root.rglob("*") if p.name.startswith(".tmp-")]


# ---- in real runs, several workers, no eager activities ----------------------------------------


@pytest.fixture(scope="module")
async def dev_env_without_eager_activities():
    env = await start_dev_server("--dynamic-config-value", "system.enableActivityEagerExecution=false")
    yield env
    await env.shutdown()


async def test_with_two_workers_no_think_fails_and_no_window_is_resent(
    dev_env_without_eager_activities, fake_llm, tmp_path
):
    env = dev_env_without_eager_activities
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    steps = 12
    fake_llm.turns = [python(f"print({i})") for i in range(steps)] + [terminate()]
    # A client of its own runtime: as two worker processes are, not two workers of one.
    other = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=pydantic_data_converter,
        runtime=Runtime(telemetry=TelemetryConfig()),
    )
    async with build_worker(env.client, settings), build_worker(other, settings):
        handle = await env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="do it", profile=PROFILE.model_copy(update={"max_steps": steps + 5})),
            id=f"run-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        assert (await handle.result()).stop_reason == StopReason.TERMINATED

    assert len(fake_llm.requests) == steps + 1
    assert_each_request_extends_the_last(fake_llm.requests)
    history = await handle.fetch_history()
    failed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert failed == []
    inputs = think_inputs(history)
    assert [ContextSync.is_complete(r) for r in inputs] == [True] + [False] * steps


def test_a_damaged_blob_is_written_again(tmp_path):
    store = ContextStore(tmp_path)
    name = store.put(b"hello", 16)
    (store.root / name[:2] / name).write_bytes(b"")
    assert store.put(b"hello", 16) == name and store.get(name) == b"hello"


def test_blobs_unused_for_a_week_are_pruned_and_used_ones_kept(tmp_path):
    import os
    import time

    from activities.context_store import UNUSED_FOR, ContextStore

    store = ContextStore(tmp_path)
    old = store.put(b'{"role":"user","content":"old"}', 16)
    used = store.put(b'{"role":"user","content":"used"}', 16)
    long_ago = time.time() - UNUSED_FOR - 60
    for name in (old, used):
        path = tmp_path / ".context" / name[:2] / name
        os.utime(path, (long_ago, long_ago))
    store.put(b'{"role":"user","content":"used"}', 16)  # a think wrote it again: in use
    assert store.prune() == 1
    assert store.get(old) is None and store.get(used) is not None
