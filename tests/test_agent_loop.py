"""The loop's decisions (agent_model/agent_loop.py) without Temporal, and the
proof that there is one loop: the in-process driver of the benchmarks and the
workflow show the model the same conversation."""

from __future__ import annotations

import uuid

from agent_model import agent_loop
from agent_model.agent_loop import ReplyKind, read_reply
from agent_model.llm_io import ThinkResponse
from agent_model.memory import Memory
from agent_model.messages import Role, ToolChoice, assistant_message, tool_message, user_message
from agent_model.messages import Function, ToolCall
from agent_model.run import MAX_TOOL_CALLS_PER_REPLY, AgentRunInput
from agent_model.usage import TokenUsage
from bench.inproc import InProcessAgent
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply, call, python
from tests.test_agent_workflow import PROFILE
from workflows.agent import AgentWorkflow


def tool_call(n: int, name: str = "python_execute") -> ToolCall:
    return ToolCall(id=f"c{n}", function=Function(name=name, arguments='{"code": "print(1)"}'))


def response(content=None, calls=None, finish_reason="stop") -> ThinkResponse:
    return ThinkResponse(message=assistant_message(content, calls or []), usage=TokenUsage(), finish_reason=finish_reason)


def test_what_a_reply_means():
    assert read_reply(response("no"), PROFILE.model_copy(update={"tool_choice": ToolChoice.REQUIRED})).kind == (
        ReplyKind.TOOL_REQUIRED
    )
    assert read_reply(response("the answer"), PROFILE).kind == ReplyKind.ANSWER  # finish_on_answer by default
    assert read_reply(response("hm"), PROFILE.model_copy(update={"finish_on_answer": False})).kind == ReplyKind.GO_ON
    assert read_reply(response(None), PROFILE).kind == ReplyKind.EMPTY
    assert read_reply(response(None, finish_reason="content_filter"), PROFILE).kind == ReplyKind.CONTENT_FILTERED
    acting = read_reply(response("go", [tool_call(1)]), PROFILE)
    assert acting.kind == ReplyKind.ACT and acting.dropped == 0


def test_a_reply_keeps_at_most_its_share_of_tool_calls():
    many = read_reply(response(None, [tool_call(n) for n in range(100)]), PROFILE)
    assert len(many.message.tool_calls) == MAX_TOOL_CALLS_PER_REPLY and many.dropped == 100 - MAX_TOOL_CALLS_PER_REPLY
    assert "asked for 100 tool calls" in agent_loop.dropped_calls_reminder(many).content


def test_which_calls_run_and_what_memory_keeps_of_them():
    swe = PROFILE.model_copy(update={"max_tool_calls_per_step": 1})
    assert agent_loop.over_the_per_reply_limit(swe, 0) is None
    assert agent_loop.over_the_per_reply_limit(swe, 1).startswith("Error: only 1 tool call")
    assert agent_loop.unknown_tool(PROFILE, "bash", {"bash": None}).startswith("Error: unknown tool 'bash'")
    assert agent_loop.unknown_tool(PROFILE, "python_execute", {"python_execute": None}) is None
    message, record = agent_loop.observed(tool_call(1), "x" * 500, False, 100)
    assert message.content == record.observation and message.content.startswith("x" * 100)
    assert "400 more characters" in message.content and message.tool_call_id == "c1"


def test_a_repeated_reply_gets_one_hint():
    memory, hinted = Memory(), set()
    memory.add(user_message("task"))
    reply = assistant_message("same thing")
    for _ in range(PROFILE.duplicate_threshold + 1):
        memory.add(reply)
    signature = agent_loop.stuck_hint_due(memory, reply, hinted, PROFILE.duplicate_threshold)
    assert signature is not None
    hinted.add(signature)
    assert agent_loop.stuck_hint_due(memory, reply, hinted, PROFILE.duplicate_threshold) is None


async def test_the_benchmark_loop_and_the_workflow_show_the_model_the_same_conversation(
    time_skipping_env, settings, fake_llm
):
    script = [
        python("print('a' * 3000)"),
        Reply(tool_calls=[call("no_such_tool", {})]),
        python("print(2)"),
        Reply(content="done"),
    ]
    profile = PROFILE.model_copy(update={"max_observe": 1000, "tools": ["python_execute", "terminate"]})

    fake_llm.turns = list(script)
    steps = await InProcessAgent(settings).run("do it", profile, "same-dir")
    in_process = [r.messages for r in fake_llm.requests]

    fake_llm.turns = list(script)
    async with build_worker(time_skipping_env.client, settings):
        handle = await time_skipping_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="do it", profile=profile, workspace="same-dir"),
            id=f"loop-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        await handle.result()
    in_workflow = [r.messages for r in fake_llm.requests[len(in_process):]]

    assert steps == 4 and len(in_process) == 4
    assert in_workflow == in_process


def test_an_activitys_message_is_taken_only_when_it_is_the_calls_plain_observation():
    """The workflow adds an activity's finished message as it is only when it
    answers this very call as a plain tool message within the limit; anything
    else (another call, another role, tool calls of its own, no text, images,
    too long) is replaced by the observation the workflow makes itself."""
    call_ = tool_call(1)
    plain = tool_message("391", "c1", "python_execute")
    assert agent_loop.observed(call_, "391", False, 100, plain)[0] is plain
    refused = {
        "another call": plain.model_copy(update={"tool_call_id": "c2"}),
        "another tool": plain.model_copy(update={"name": "bash"}),
        "assistant": plain.model_copy(update={"role": Role.ASSISTANT}),
        "tool calls": plain.model_copy(update={"tool_calls": [tool_call(2)]}),
        "no text": plain.model_copy(update={"content": None}),
        "an image": plain.model_copy(update={"base64_image": "aGk="}),
        "too long": plain.model_copy(update={"content": "x" * 100 + "y" * agent_loop.CUT_NOTE_ROOM + "z"}),
    }
    for why, message in refused.items():
        kept, record = agent_loop.observed(call_, "the plain observation", False, 100, message)
        assert kept == tool_message("the plain observation", "c1", "python_execute"), why
        assert record.observation == "the plain observation", why
