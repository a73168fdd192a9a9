"""The think activity against the fake OpenAI server, through the real SDK."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from datetime import timedelta

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from activities import llm as llm_activity
from activities.llm import LLMActivities, is_reasoning_model
from activities.token_count import count_prompt_tokens, image_tokens
from tools import schemas
from agent_model.llm_io import ThinkRequest
from agent_model.messages import Function, ToolCall, ToolChoice, assistant_message, tool_message, user_message
from config.settings import LLMSettings
from testkit.fake_openai import EmptyChoices, ErrorReply, Hang, Raw, Reply, Reset, call


def think_with(fake, **llm) -> LLMActivities:
    fields = {"model": "gpt-4o", "base_url": fake.base_url, "api_key": "test-key", **llm}
    return LLMActivities({"default": LLMSettings(**fields)})


def request(text: str = "hello", **kw) -> ThinkRequest:
    return ThinkRequest(system_prompt="be brief", messages=[user_message(text)], **kw)


async def think(activities: LLMActivities, req: ThinkRequest):
    return await ActivityEnvironment().run(activities.think, req)


async def test_reply_with_tool_calls_and_usage(fake_llm):
    fake_llm.turns = [Reply(content="ok", tool_calls=[call("python_execute", {"code": "print(1)"})], usage=(12, 5))]
    response = await think(think_with(fake_llm), request(tools=schemas(["python_execute"])))
    assert response.message.content == "ok"
    assert response.message.tool_calls[0].function.name == "python_execute"
    assert response.message.tool_calls[0].function.arguments == '{"code": "print(1)"}'
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 5)
    assert response.finish_reason == "tool_calls"
    body = fake_llm.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["tool_choice"] == "auto"
    assert body["max_tokens"] == 4096 and body["temperature"] == 0.0
    assert not body.get("stream")


async def test_reasoning_models_get_max_completion_tokens_and_no_temperature(fake_llm):
    fake_llm.turns = [Reply(content="ok")]
    await think(think_with(fake_llm, model="o3-mini"), request())
    body = fake_llm.requests[0].body
    assert body["max_completion_tokens"] == 4096
    assert "temperature" not in body and "max_tokens" not in body
    assert is_reasoning_model("o1") and not is_reasoning_model("gpt-4o")


@pytest.mark.parametrize(
    "model, reasoning",
    [
        ("gpt-5", True), ("gpt-5.1", True), ("gpt-5-mini-2025-08-07", True), ("openai/o3-mini", True),
        ("o4-mini", True), ("gpt-5-chat-latest", False), ("gpt-4.1", False),
    ],
)
async def test_reasoning_models_are_told_apart_by_name(fake_llm, model, reasoning):
    fake_llm.turns = [Reply(content="ok")]
    await think(think_with(fake_llm, model=model, max_tokens=900), request())
    body = fake_llm.requests[-1].body
    if reasoning:
        assert body["max_completion_tokens"] == 900, model
        assert "max_tokens" not in body and "temperature" not in body, model
    else:
        assert body["max_tokens"] == 900 and body["temperature"] == 0.0, model


async def test_images_are_sent_as_content_parts(fake_llm):
    fake_llm.turns = [Reply(content="a cat")]
    req = ThinkRequest(messages=[user_message("what is this?", base64_image="QUJD")])
    await think(think_with(fake_llm), req)
    content = fake_llm.requests[0].messages[0]["content"]
    assert content[1]["image_url"]["url"] == "data:image/png;base64,QUJD"


async def test_token_limit_is_checked_per_request_before_sending(fake_llm):
    fake_llm.turns = [Reply(content="never sent")]
    activities = think_with(fake_llm, max_input_tokens=100)
    with pytest.raises(ApplicationError) as err:
        await think(activities, request("word " * 500))
    assert err.value.type == "TokenLimitExceeded" and err.value.non_retryable
    assert fake_llm.requests == []
    # A small request afterwards passes: the budget is per request, not cumulative.
    await think(activities, request("short"))
    assert len(fake_llm.requests) == 1


async def test_401_is_not_retryable(fake_llm):
    fake_llm.turns = [Reply(content="x")]
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm, api_key="sk-wrong"), request())
    assert err.value.non_retryable and "401" in err.value.message
    assert "sk-wrong" not in err.value.message


async def test_400_about_tools_explains_itself(fake_llm):
    fake_llm.turns = [ErrorReply(400, message="tools are not supported for this model")]
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm), request())
    assert err.value.non_retryable and "support function calling" in err.value.message


async def test_429_is_retryable_with_retry_after(fake_llm):
    fake_llm.turns = [ErrorReply(429, retry_after=7)]
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm), request())
    assert not err.value.non_retryable
    assert err.value.next_retry_delay == timedelta(seconds=7)


async def test_retry_after_ms_sets_the_next_wait(fake_llm):
    fake_llm.turns = [ErrorReply(429, retry_after=7, headers={"retry-after-ms": "1500"})]
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm), request())
    assert not err.value.non_retryable and err.value.next_retry_delay == timedelta(seconds=1.5)


async def test_x_should_retry_false_is_not_retried(fake_llm):
    fake_llm.turns = [ErrorReply(503, headers={"x-should-retry": "false"})]
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm), request())
    assert err.value.non_retryable and "503" in err.value.message and "says not to retry" in err.value.message


async def test_x_should_retry_true_is_retried_even_for_a_rejection(fake_llm):
    fake_llm.turns = [ErrorReply(400, headers={"x-should-retry": "true", "retry-after-ms": "250"})]
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm), request())
    assert not err.value.non_retryable and err.value.type == "LLMUnavailable"
    assert err.value.next_retry_delay == timedelta(milliseconds=250)


@pytest.mark.parametrize("status", [408, 409, 500, 503])
async def test_transient_statuses_are_retryable(fake_llm, status):
    fake_llm.turns = [ErrorReply(status)]
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm), request())
    assert not err.value.non_retryable and str(status) in err.value.message


@pytest.mark.parametrize(
    "turn, settings, error_type",
    [
        (Reset(), {}, "LLMConnectionError"),
        (Hang(), {"request_timeout": 0.5}, "LLMTimeout"),
        (EmptyChoices(), {}, "LLMEmptyResponse"),
    ],
    ids=["connection-reset", "timeout", "empty-choices"],
)
async def test_transient_failures_are_retryable(fake_llm, turn, settings, error_type):
    fake_llm.turns = [turn]
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm, **settings), request())
    assert err.value.type == error_type and not err.value.non_retryable


async def test_heartbeats_while_waiting(fake_llm):
    fake_llm.turns = [Reply(content="slow", delay=4.5)]
    env = ActivityEnvironment()
    beats: list = []
    env.on_heartbeat = lambda *details: beats.append(details)
    response = await env.run(think_with(fake_llm).think, request())
    assert response.message.content == "slow"
    assert len(beats) >= 2


async def test_unknown_llm_profile_is_not_retryable(fake_llm):
    with pytest.raises(ApplicationError) as err:
        await think(think_with(fake_llm), request(llm="vision"))
    assert err.value.type == "UnknownLLMProfile" and err.value.non_retryable


def png(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return base64.b64encode(header + struct.pack(">I", zlib.crc32(header[12:])) + b"\x00" * 16).decode()


def test_image_tokens_follow_the_tile_formula():
    assert image_tokens(png(512, 512)) == 170 * 1 + 85
    assert image_tokens(png(1024, 1024)) == 170 * 4 + 85  # scaled to 768x768 -> 2x2 tiles
    assert image_tokens(png(4096, 1024)) == 170 * 4 + 85  # 2048x512, never scaled up -> 4x1
    assert image_tokens(png(2048, 4096)) == 170 * 6 + 85  # 1024x2048 -> 768x1536 -> 2x3
    assert image_tokens(png(100, 100), detail="low") == 85


def test_prompt_tokens_count_messages_tools_and_images():
    plain = count_prompt_tokens("gpt-4o", [user_message("hello world")])
    with_system = count_prompt_tokens("gpt-4o", [user_message("hello world")], system_prompt="be brief")
    with_tools = count_prompt_tokens("gpt-4o", [user_message("hello world")], tools=schemas(["python_execute"]))
    with_image = count_prompt_tokens("gpt-4o", [user_message("hello world", base64_image=png(512, 512))])
    assert 4 < plain < 20
    assert with_system > plain and with_tools > plain + 20
    assert with_image == plain + 255
    assert count_prompt_tokens("some-unknown-model", [user_message("hello world")]) == plain


async def test_tool_choice_required_is_passed_on(fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("terminate", {"status": "success"})])]
    await think(think_with(fake_llm), request(tools=schemas(["terminate"]), tool_choice=ToolChoice.REQUIRED))
    assert fake_llm.requests[0].body["tool_choice"] == "required"


# ---- a reply that could not be kept as it came: repaired, never a retry ----------------


def as_payload(response) -> None:
    """Raises as the worker would when it reports the think's result to Temporal."""
    pydantic_data_converter.payload_converter.to_payloads([response])


async def test_a_lone_surrogate_anywhere_in_the_reply_is_replaced_once_paid_for(fake_llm):
    fake_llm.turns = [
        Reply(content="a\ud800b", tool_calls=[call("ba\udc00sh", {"command": "echo \ud800"}, id="id\ud800")])
    ]
    response = await think(think_with(fake_llm), request())
    as_payload(response)
    assert response.message.content == "a\ufffdb"
    (reply_call,) = response.message.tool_calls
    assert (reply_call.id, reply_call.function.name) == ("id\ufffd", "ba\ufffdsh")
    assert json.loads(reply_call.function.arguments) == {"command": "echo \ufffd"}
    assert len(fake_llm.requests) == 1


async def test_repeated_empty_and_window_tool_call_ids_are_renamed(fake_llm):
    earlier = [
        user_message("task"),
        assistant_message(None, [ToolCall(id="old", function=Function(name="bash", arguments="{}"))]),
        tool_message("done", "old", "bash"),
    ]
    body = completion({
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "dup", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            {"id": "dup", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            {"id": "", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
            {"id": "old", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
        ],
    })
    fake_llm.turns = [None, Raw(body=body)]  # turn 1: the window has one reply already
    response = await think(think_with(fake_llm), ThinkRequest(messages=earlier))
    assert [c.id for c in response.message.tool_calls] == ["dup", "dup-2", "call_3", "old-2"]


def completion(message: dict, **fields) -> dict:
    return {"id": "x", "object": "chat.completion", "model": "gpt-4o", "choices": [
        {"index": 0, "message": message, "finish_reason": "tool_calls"}
    ], **fields}


async def test_fields_of_the_wrong_type_are_read_as_text_and_numbers(fake_llm):
    body = completion(
        {"content": 5, "tool_calls": [{"id": None, "function": {"name": 3, "arguments": {"a": 1}}}, "junk"]},
        usage={"prompt_tokens": "many", "completion_tokens": -1},
    )
    body["choices"][0]["finish_reason"] = 7
    body["model"] = ["not", "a", "name"]
    fake_llm.turns = [Raw(body=body)]
    response = await think(think_with(fake_llm), request())
    as_payload(response)
    assert response.message.content == "5"
    (reply_call,) = response.message.tool_calls
    assert (reply_call.id, reply_call.function.name, reply_call.function.arguments) == ("call_1", "3", '{"a": 1}')
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (0, 0)
    assert (response.finish_reason, response.model, response.note) == (None, "gpt-4o", None)
    assert len(fake_llm.requests) == 1


async def test_a_reply_that_cannot_be_read_is_a_note_not_a_failed_attempt(fake_llm, monkeypatch):
    """Whatever still goes wrong once the call is paid for: the think returns
    the failure as a note and a call of no tool, which the run answers."""
    from activities.reply_reading import UNREADABLE_REPLY_TOOL

    def unreadable(*_):
        raise KeyError("something unforeseen")

    monkeypatch.setattr(llm_activity, "response_of", unreadable)
    fake_llm.turns = [Reply(content="fine", usage=(7, 3))]
    response = await think(think_with(fake_llm), request())
    as_payload(response)
    assert "could not be read" in response.note and "KeyError" in response.note
    (stand_in,) = response.message.tool_calls
    assert stand_in.function.name == UNREADABLE_REPLY_TOOL
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (7, 3)
    assert len(fake_llm.requests) == 1
