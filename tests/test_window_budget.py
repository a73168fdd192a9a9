"""The memory window's budgets: estimated tokens, bytes of a complete think
request, and every profile's clipped observations, so that a worker that lost
a run's context can always be sent all of it (Temporal refuses a payload over
2 MiB)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import shutil
import threading
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.context_store import CONTEXT_DIR_NAME
from activities.llm_client import MAX_REPLY_BYTES
from activities.token_count import count_prompt_tokens, encoding_for
from tools import TOOLS, schemas
from agent_model.llm_io import ThinkRequest
from agent_model.memory import (
    DEFAULT_RESERVED_BYTES,
    MAX_USER_MESSAGE_BYTES,
    REQUEST_ENVELOPE_BYTES,
    REQUEST_LIMIT,
    Memory,
)
from agent_model.messages import Function, Message, Role, ToolCall, assistant_message, tool_message, user_message
from agent_model.payload import clip, json_size
from agent_model.plan import MAX_PLAN_STEPS, NOTES_LIMIT, STEP_TEXT_LIMIT, Plan, PlanStep
from agent_model.profiles import BUILTIN_PROFILES, SWE, AgentProfile
from agent_model.prompting import fill
from agent_model.run import OBSERVATION_LIMIT, AgentRunInput
from agent_model.state import StopReason
from agent_model.errors import CONTEXT_MISSING_ERROR
from agent_model.think_context import ContextSync
from agent_model.token_estimate import estimate_tokens, message_tokens
from runtime.worker_factory import build_worker
from testkit.fake_openai import ErrorReply, Reply, call, terminate
from testkit.settings import make_settings
from workflows.agent import AgentWorkflow

ROOT = Path(__file__).resolve().parent.parent
TEMPORAL_PAYLOAD_LIMIT = 2 * 1024 * 1024
"""What Temporal refuses a payload over (its default blob size limit)."""
ENCODING = encoding_for("gpt-4o")
LONG_DIRECTORY = "/" + "d" * 4095
"""The longest path a system prompt's {directory} can be."""


def real_tokens(text: str) -> int:
    return len(ENCODING.encode(text, disallowed_special=()))


def read(relative: str) -> str:
    return (ROOT / relative).read_text()


def printable(n: int, seed: int = 0) -> str:
    """n random printable ASCII characters, without the two JSON escapes."""
    alphabet = bytes(c for c in range(32, 127) if c not in b'"\\')
    table = bytes(alphabet[b % len(alphabet)] for b in range(256))
    return random.Random(seed).randbytes(n).translate(table).decode()


def control(n: int, seed: int = 0) -> str:
    """n control characters: six bytes of JSON each (\\u0001), the most any
    character costs a payload."""
    return "\x01" * n


FILLERS = {"printable": printable, "control": control}


# ---- the estimate ------------------------------------------------------------------


def samples() -> dict[str, str]:
    rng = random.Random(7)
    history = read("tests/histories/agent_run.json")
    return {
        # English prose
        "README.md": read("README.md"),
        "BENCHMARKS.md": read("BENCHMARKS.md"),
        "docs/web-ui.md": read("docs/web-ui.md"),
        "docs/in-flight-reexecution.md": read("docs/in-flight-reexecution.md"),
        # code
        "workflows/agent.py": read("workflows/agent.py"),
        "activities/llm.py": read("activities/llm.py"),
        "testkit/fake_openai.py": read("testkit/fake_openai.py"),
        "agent_model/plan.py": read("agent_model/plan.py"),
        # base64
        "base64": base64.b64encode(rng.randbytes(30_000)).decode(),
        "base64, 76-column lines": base64.encodebytes(rng.randbytes(30_000)).decode(),
        "base64url": base64.urlsafe_b64encode(rng.randbytes(30_000)).decode(),
        "base64 of text": base64.b64encode(read("README.md")[:20_000].encode()).decode(),
        # JSON
        "tool schemas": json.dumps(schemas(list(TOOLS))),
        "tool schemas, indented": json.dumps(schemas(list(TOOLS)), indent=2),
        "a history": history,
        "a history, compact": json.dumps(json.loads(history), separators=(",", ":")),
    }


@pytest.mark.parametrize("name", list(samples()))
def test_the_estimate_is_above_the_real_count_but_not_far(name):
    text = samples()[name]
    real = real_tokens(text)
    assert real > 300
    assert real <= estimate_tokens(text) <= 2 * real


def test_a_messages_estimate_covers_what_the_think_activity_counts():
    rng = random.Random(3)
    calls = [
        ToolCall(id=f"call_{n}", function=Function(name="bash", arguments=json.dumps({"command": f"ls -la /tmp/{n}"})))
        for n in range(3)
    ]
    window = [
        user_message(read("README.md")[:5000]),
        assistant_message("Looking around first.", calls),
        *(tool_message(base64.b64encode(rng.randbytes(3000)).decode(), c.id, "bash") for c in calls),
        user_message("What next?"),
        assistant_message(read("agent_model/memory.py")),
    ]
    assert sum(map(message_tokens, window)) >= count_prompt_tokens("gpt-4o", window)


def test_estimates_of_empty_and_unusual_texts():
    assert estimate_tokens("") == estimate_tokens(None) == 0
    assert estimate_tokens("é" * 100) >= real_tokens("é" * 100)  # a token per UTF-8 byte at most
    assert estimate_tokens("\ud800") == 3  # a lone surrogate does not break workflow code
    for text in ("1234567890" * 10, "\n" * 10_000, "\r\n" * 5000, "\t" * 10_000, " " * 10_000, "a\n" * 5000):
        assert estimate_tokens(text) >= real_tokens(text)


# ---- trimming to the budgets -------------------------------------------------------


def step_messages(step: int, observation: str, calls: int = 1) -> list[Message]:
    tool_calls = [
        ToolCall(id=f"call-{step}-{n}", function=Function(name="bash", arguments='{"command": "ls"}'))
        for n in range(calls)
    ]
    return [
        assistant_message(f"step {step}", tool_calls),
        *(tool_message(f"{step}: {observation}", c.id, "bash") for c in tool_calls),
        user_message(f"what next after {step}?"),
    ]


def assert_valid_for_the_api(memory: Memory) -> None:
    """The task first; no tool reply without its call, no call without its replies."""
    assert memory.messages[0].content == "the task"
    called: dict[str, bool] = {}
    for message in memory.messages[1:]:
        if message.role == Role.TOOL:
            assert message.tool_call_id in called
            called[message.tool_call_id] = True
        for c in message.tool_calls or []:
            called[c.id] = False
    assert all(called.values())
    assert len(memory.ids) == len(memory.sizes) == len(memory.tokens) == len(memory.messages)
    assert memory.tokens == [message_tokens(m) for m in memory.messages]
    assert memory.sizes == [json_size(m) for m in memory.messages]


def test_the_token_budget_drops_the_oldest_groups_whole_and_keeps_the_task():
    memory = Memory(max_tokens=10_000)
    memory.add(user_message("the task"))
    observation = printable(1000)  # ~1000 tokens
    for step in range(12):
        memory.extend(step_messages(step, observation, calls=2))
        assert memory.window_tokens() <= 10_000
        assert_valid_for_the_api(memory)
    steps_kept = {m.content for m in memory.messages if m.role == Role.ASSISTANT}
    assert 1 < len(steps_kept) < 12
    assert "step 11" in steps_kept
    # One more group and no room left: the oldest one goes first.
    oldest = min(int(s.split()[1]) for s in steps_kept)
    memory.extend(step_messages(12, observation, calls=2))
    assert f"step {oldest}" not in {m.content for m in memory.messages}


def test_the_newest_group_stays_even_alone_over_every_budget():
    memory = Memory(max_tokens=100, max_bytes=5000, reserved_bytes=0)
    memory.add(user_message("the task"))
    memory.extend(step_messages(1, printable(20_000), calls=2))
    # The next-step prompt after it is a group of its own, yet the reply and
    # its tool outputs stay: the model always sees what its last call gave.
    assert [m.role.value for m in memory.messages] == ["user", "assistant", "tool", "tool", "user"]
    memory.extend(step_messages(2, printable(20_000)))
    assert [m.role.value for m in memory.messages] == ["user", "assistant", "tool", "user"]
    assert memory.messages[1].content == "step 2"
    assert_valid_for_the_api(memory)


def test_the_byte_budget_counts_the_prompt_tools_and_context_reference():
    memory = Memory(max_tokens=10**9)
    memory.add(user_message("the task"))
    for step in range(40):
        memory.extend(step_messages(step, control(5000)))  # ~30 KB of JSON each
        assert memory.request_bytes() <= REQUEST_LIMIT
    assert_valid_for_the_api(memory)
    system, tools = printable(200_000), schemas(list(TOOLS))
    before = len(memory.messages)
    memory.reserve(system, tools)
    assert memory.reserved_bytes == REQUEST_ENVELOPE_BYTES + json_size(system) + json_size(tools)
    assert len(memory.messages) < before and memory.request_bytes() <= REQUEST_LIMIT
    sync = ContextSync(key="wf-" + "x" * 100 + "/run-" + "y" * 36)
    request = sync.build("default", system, memory.numbered_window(), tools, SWE.tool_choice)
    assert ContextSync.is_complete(request)
    assert json_size(request) <= memory.request_bytes()


def test_add_returns_the_id_it_gave():
    memory = Memory(max_messages=2)
    assert memory.add(user_message("the task")) == 0
    ids = [memory.add(m) for m in step_messages(1, "out")]
    assert ids == [1, 2, 3] and memory.ids[-1] == 3
    assert memory.add(assistant_message("done")) == 4


def test_a_task_too_long_for_a_request_is_cut_and_kept_first():
    memory = Memory()
    memory.add(user_message(control(400_000)))
    assert json_size(memory.messages[0]) <= MAX_USER_MESSAGE_BYTES
    assert "more characters cut: too long for the memory window" in memory.messages[0].content
    memory.extend(step_messages(1, "out"))
    assert memory.request is memory.messages[0]
    plan_prompt = user_message(printable(600_000))  # a next-step prompt with a huge plan
    memory.add(plan_prompt)
    assert json_size(memory.messages[-1]) <= MAX_USER_MESSAGE_BYTES
    reply = assistant_message(printable(MAX_USER_MESSAGE_BYTES))  # produced by an activity: kept as it is
    memory.add(reply)
    assert memory.messages[-1] is reply


def test_memory_is_workflow_state_that_survives_serialisation():
    memory = Memory.for_profile(SWE.model_copy(update={"max_window_tokens": 5000, "max_memory_messages": 30}))
    assert (memory.max_tokens, memory.max_messages) == (5000, 30)
    memory.add(user_message("the task"))
    for step in range(10):
        memory.extend(step_messages(step, printable(3000, seed=step)))
    converter = pydantic_data_converter.payload_converter
    (copy,) = converter.from_payloads(converter.to_payloads([memory]), [Memory])
    assert copy == memory
    assert copy.add(user_message("more")) == memory.add(user_message("more"))
    assert copy == memory
    # Carried by a run of an earlier version (continue-as-new): no estimates yet.
    older = memory.model_dump(mode="json", exclude={"tokens", "max_tokens", "reserved_bytes"})
    assert Memory.model_validate(older).tokens == memory.tokens


# ---- a complete resend of a maximal window, for every built-in profile ------------------


def maximal_plan_status(filler) -> str:
    steps = [PlanStep(text=filler(STEP_TEXT_LIMIT, n), notes=filler(NOTES_LIMIT, n)) for n in range(MAX_PLAN_STEPS)]
    return Plan(plan_id="p" * 100, title="t" * 200, steps=steps, notes=filler(NOTES_LIMIT)).render()


def maximal_reply(step: int, calls: list[ToolCall], filler) -> Message:
    """A reply as large as the think activity returns (MAX_REPLY_BYTES of JSON)."""
    empty = json_size(assistant_message("", calls))
    per_char = json_size(filler(100)) // 100 + 1
    return assistant_message(filler((MAX_REPLY_BYTES - empty) // per_char, step), calls)


@pytest.mark.parametrize("task", ["short", "maximal"])
@pytest.mark.parametrize("replies", ["short", "maximal"])
@pytest.mark.parametrize("filler_name", sorted(FILLERS))
@pytest.mark.parametrize("name", sorted(BUILTIN_PROFILES))
def test_a_complete_resend_of_a_maximal_window_fits_in_one_payload(name, filler_name, replies, task):
    profile, filler = BUILTIN_PROFILES[name], FILLERS[filler_name]
    assert profile.max_observe is not None and profile.max_observe <= OBSERVATION_LIMIT  # every profile clips
    memory = Memory.for_profile(profile)
    tools = schemas(profile.tools) or None
    system = fill(profile.system_prompt, directory=LONG_DIRECTORY) or None
    assert REQUEST_ENVELOPE_BYTES + json_size(system) + json_size(tools) <= DEFAULT_RESERVED_BYTES
    plan_status = maximal_plan_status(filler)
    sync = ContextSync(key=f"run-{'w' * 60}/{uuid.uuid4()}")
    calls_per_step = profile.max_tool_calls_per_step or 4
    added = 0

    def think() -> ThinkRequest:
        nonlocal added
        if profile.next_step_prompt:
            memory.add(user_message(fill(profile.next_step_prompt, directory=LONG_DIRECTORY, plan_status=plan_status)))
            added += 1
        return sync.build(profile.llm, system, memory.numbered_window(), tools, profile.tool_choice)

    # About the most a workflow input can carry, or a line.
    memory.add(user_message(filler(1_900_000) if task == "maximal" else "the task"))
    for step in range(profile.max_steps):
        sync.confirm(think())
        calls = [
            ToolCall(id=f"call_{step}_{n}", function=Function(name=profile.tools[0], arguments='{"command": "x"}'))
            for n in range(calls_per_step)
        ]
        reply = maximal_reply(step, calls, filler) if replies == "maximal" else assistant_message(filler(2000, step), calls)
        memory.add(reply)
        for c in calls:
            observation = clip(filler(2 * profile.max_observe, step), profile.max_observe)
            memory.add(tool_message(observation, c.id, c.function.name))
        added += 1 + len(calls)

    sync.forget()  # a worker without the run's context: everything again
    request = think()
    assert ContextSync.is_complete(request)
    assert len(request.messages) == len(memory.messages) < added  # the window was trimmed
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([request])
    assert payload.ByteSize() < TEMPORAL_PAYLOAD_LIMIT
    assert json_size(request) <= memory.request_bytes()
    assert memory.window_tokens() <= profile.max_window_tokens or memory.messages[1] is reply
    if memory.request_bytes() > REQUEST_LIMIT:  # only the task and the newest step are left
        assert memory.messages[1] is reply


# ---- the worst case in a real run: a crash, then the whole window again ------------------


async def crash_then_resend(env, fake_llm, tmp_path, profile: AgentProfile, task: str, replies: list[Reply], crash_at: int):
    """A run whose think `crash_at` fails once (429) while the worker that held
    the run's context stops; the shared store is lost too, so the next worker
    cannot serve the retry and the workflow sends the complete request."""
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    served: list[dict] = []
    failed = threading.Event()

    def responder(body: dict, attempt: int):
        if len(served) == crash_at and not failed.is_set():
            failed.set()
            return ErrorReply(429, retry_after=5)
        served.append(body)
        return replies[len(served) - 1]

    fake_llm.responder = responder
    async with build_worker(env.client, settings):
        handle = await env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task=task, profile=profile),
            id=f"run-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        assert await asyncio.to_thread(failed.wait, 60)
    shutil.rmtree(settings.workspace_root / CONTEXT_DIR_NAME)
    async with build_worker(env.client, settings):
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.stop_reason == StopReason.TERMINATED

    history = await handle.fetch_history()
    thinks = [
        e.activity_task_scheduled_event_attributes.input
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "think"
    ]
    failures = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert CONTEXT_MISSING_ERROR in failures
    converter = pydantic_data_converter.payload_converter
    complete = [ContextSync.is_complete(converter.from_payloads(list(p.payloads), [ThinkRequest])[0]) for p in thinks]
    assert complete[0] and complete[crash_at + 1] and not any(complete[1 : crash_at + 1])
    return served, max(p.ByteSize() for p in thinks), thinks[crash_at + 1]


def window_tokens(body: dict) -> int:
    """Real tokens of the window a request carries (all but the system prompt)."""
    total = 0
    for m in body["messages"]:
        if m["role"] != "system":
            total += real_tokens(m.get("content") or "")
            total += sum(real_tokens(c["function"]["arguments"]) for c in m.get("tool_calls") or [])
    return total


async def test_after_a_crash_the_swe_agent_gets_its_whole_window_again_within_the_budgets(
    dev_env, fake_llm, tmp_path
):
    # 14 steps of 32,000 characters of base64 each (clipped to 20,000, ~14k
    # tokens): the window is full of tokens long before the crash at step 13.
    steps, crash_at = 14, 12
    command = "head -c 24000 /dev/urandom | base64 -w0"
    replies = [Reply(tool_calls=[call("bash", {"command": f"{command}; echo {n}"})]) for n in range(steps)]
    served, largest, _ = await crash_then_resend(
        dev_env, fake_llm, tmp_path, SWE, "Look at random data.", [*replies, terminate()], crash_at
    )
    resent = served[crash_at]
    outputs = [m for m in resent["messages"] if m["role"] == "tool"]
    assert all(len(m["content"]) >= 20_000 for m in outputs)
    assert 2 <= len(outputs) < crash_at  # the oldest steps were dropped
    assert resent["messages"][1] == {"role": "user", "content": "Look at random data."}
    assert window_tokens(resent) <= SWE.max_window_tokens
    assert largest < TEMPORAL_PAYLOAD_LIMIT


async def test_a_huge_task_is_cut_so_that_a_resend_with_a_maximal_reply_stays_within_the_request_limit(
    dev_env, fake_llm, tmp_path
):
    task = printable(1_200_000)  # the workflow input takes it (under 2 MiB)
    thought = printable(450_000, seed=1)  # the think activity takes it (under 512 KiB)
    bash = call("bash", {"command": "head -c 30000 /dev/zero | tr '\\0' '\\1'"})  # 20,000 \u0001 after clipping
    replies = [Reply(content=thought, tool_calls=[bash]), Reply(content=thought, tool_calls=[bash]), terminate()]
    served, largest, resend = await crash_then_resend(dev_env, fake_llm, tmp_path, SWE, task, replies, 2)
    assert largest < TEMPORAL_PAYLOAD_LIMIT
    assert resend.ByteSize() <= REQUEST_LIMIT
    sent_task = served[2]["messages"][1]["content"]
    assert task.startswith(sent_task.split("\n... [")[0]) and "more characters cut" in sent_task
