"""The streamed think against the fake OpenAI server, through the real SDK:
the same result as the plain call, the same failures, its bounds, and what
goes to the live journal."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import llm_stream
from activities.live_feed import LiveFeed
from activities.llm import LLMActivities
from activities.llm_client import complete, make_client
from activities.llm_stream import complete_streaming
from activities.redaction import Redactor
from agent_model.errors import (
    LLM_CONNECTION_ERROR, LLM_INVALID_RESPONSE_ERROR, LLM_REQUEST_REJECTED_ERROR, LLM_UNAVAILABLE_ERROR,
    REPLY_TOO_LARGE_ERROR,
)
from agent_model.live_events import LIVE_DIR_NAME, journal_dir_name, journal_path
from agent_model.llm_io import ThinkRequest
from agent_model.messages import user_message
from config.settings import LLMSettings
from testkit.fake_openai import EmptyChoices, ErrorReply, Raw, Reply, Reset, call
from tools import schemas

SECRET = "sk-test-stream-SECRET-42"
SCRIPT = Reply(
    content=f"I will run it. (the key {SECRET} stays here)",
    tool_calls=[call("python_execute", {"code": "print(17 * 23)"}), call("terminate", {"status": "success"})],
    usage=(120, 33),
)
RUN = "test"
"""The workflow id ActivityEnvironment gives its activities."""


def llm_settings(fake) -> dict[str, LLMSettings]:
    return {"default": LLMSettings(model="gpt-4o", base_url=fake.base_url, api_key="test-key")}


def streaming(fake, root: Path) -> LLMActivities:
    return LLMActivities(llm_settings(fake), live=LiveFeed(root, Redactor([SECRET])))


def plain(fake) -> LLMActivities:
    return LLMActivities(llm_settings(fake))


def request(step: int | None = 2, workspace: str | None = None) -> ThinkRequest:
    return ThinkRequest(
        system_prompt="be brief", messages=[user_message("compute")], tools=schemas(["python_execute", "terminate"]),
        step=step, workspace=workspace,
    )


async def think(activities: LLMActivities, req: ThinkRequest | None = None, env: ActivityEnvironment | None = None):
    return await (env or ActivityEnvironment()).run(activities.think, req or request())


def journal(root: Path) -> list[dict]:
    return [json.loads(line) for line in journal_path(root, journal_dir_name(RUN)).read_text().splitlines()]


async def test_a_streamed_think_returns_what_the_plain_one_does(fake_llm, tmp_path):
    fake_llm.turns = [SCRIPT]
    fake_llm.chunk_chars = 3
    streamed = await think(streaming(fake_llm, tmp_path))
    unstreamed = await think(plain(fake_llm))
    assert streamed == unstreamed
    assert streamed.message.content == SCRIPT.content
    assert [c.function.arguments for c in streamed.message.tool_calls] == ['{"code": "print(17 * 23)"}', '{"status": "success"}']
    assert (streamed.usage.prompt_tokens, streamed.usage.completion_tokens) == (120, 33)
    asked, again = fake_llm.requests
    assert asked.body["stream"] is True and asked.body["stream_options"] == {"include_usage": True}
    assert len(asked.chunks_sent) > 10  # it really streamed, in small pieces
    assert not again.body["stream"]
    assert {k: v for k, v in asked.body.items() if not k.startswith("stream")} == {
        k: v for k, v in again.body.items() if k != "stream"
    }


async def test_the_assembled_completion_is_the_plain_completion(fake_llm):
    fake_llm.turns = [SCRIPT]
    client = make_client(llm_settings(fake_llm)["default"])
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "go"}], "stream": False}
    pieces: list[tuple[str, str]] = []
    streamed = await complete_streaming(client, body, "gpt-4o", "", lambda channel, text: pieces.append((channel, text)))
    unstreamed = await complete(client, body, "gpt-4o")
    assert streamed.streamed and streamed.usage_reported
    one, other = streamed.completion.model_dump(), unstreamed.model_dump()
    assert one.pop("id") == "chatcmpl-fake-0" and other.pop("id") == "chatcmpl-fake-1"
    assert one.pop("created") and other.pop("created")
    assert one == other
    assert "".join(text for channel, text in pieces if channel == "content") == SCRIPT.content
    assert "".join(text for channel, text in pieces if channel == "tool_call") == (
        '\npython_execute {"code": "print(17 * 23)"}\nterminate {"status": "success"}'  # a line for each call
    )


async def test_the_journal_gets_the_tokens_redacted_and_the_step(fake_llm, tmp_path):
    fake_llm.turns = [SCRIPT]
    fake_llm.chunk_chars = 2  # the secret arrives in a dozen pieces
    await think(streaming(fake_llm, tmp_path), request(step=5))
    events = journal(tmp_path)
    assert [e["kind"] for e in (events[0], events[-1])] == ["think_started", "think_ended"]
    assert {e["step"] for e in events} == {5} and {e["run_id"] for e in events} == {RUN}
    content = "".join(e["text"] for e in events if e["kind"] == "token" and e["channel"] == "content")
    assert content == SCRIPT.content.replace(SECRET, "[REDACTED]")
    assert "SECRET" not in journal_path(tmp_path, journal_dir_name(RUN)).read_text()
    calls = "".join(e["text"] for e in events if e["channel"] == "tool_call")
    assert calls.startswith("\npython_execute ") and "terminate" in calls


async def test_a_stream_over_the_bound_is_refused_for_good(fake_llm, tmp_path, monkeypatch):
    monkeypatch.setattr(llm_stream, "MAX_STREAM_BYTES", 64 * 1024)
    fake_llm.turns = [Reply(content="z" * 40_000)]  # ~100 KiB of events in 4-character chunks
    with pytest.raises(ApplicationError) as err:
        await think(streaming(fake_llm, tmp_path))
    assert err.value.type == REPLY_TOO_LARGE_ERROR and err.value.non_retryable
    assert "streamed over the limit" in err.value.message


async def test_the_reply_limit_still_applies_to_a_streamed_reply(fake_llm, tmp_path):
    fake_llm.turns = [Reply(content="w" * 600_000)]
    fake_llm.chunk_chars = 50_000
    with pytest.raises(ApplicationError) as err:
        await think(streaming(fake_llm, tmp_path))
    assert err.value.type == REPLY_TOO_LARGE_ERROR and "over the limit of 524288" in err.value.message


async def test_a_plain_json_answer_to_a_stream_request_is_accepted(fake_llm, tmp_path):
    fake_llm.turns = [SCRIPT]
    expected = await think(plain(fake_llm))
    completion = {
        "id": "x", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": SCRIPT.content,
            "tool_calls": [
                {"id": "call_0_0", "type": "function", "function": {"name": "python_execute", "arguments": '{"code": "print(17 * 23)"}'}},
                {"id": "call_0_1", "type": "function", "function": {"name": "terminate", "arguments": '{"status": "success"}'}},
            ],
        }}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 33},
    }
    fake_llm.turns = [Raw(body=completion)]
    activities = streaming(fake_llm, tmp_path)
    assert await think(activities) == expected
    assert fake_llm.requests[-1].body["stream"] is True and len(fake_llm.requests) == 2
    assert activities.plain == set()  # the next think asks for a stream again


async def test_events_sent_without_the_event_stream_type_are_read(fake_llm, tmp_path):
    events = "".join(
        f"data: {json.dumps(chunk)}\n\n"
        for chunk in [
            {"id": "c", "model": "gpt-4o", "choices": [{"index": 0, "delta": {"content": "hel"}}]},
            {"id": "c", "model": "gpt-4o", "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
            {"id": "c", "model": "gpt-4o", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
        ]
    ) + "data: [DONE]\n\n"
    fake_llm.turns = [Raw(body=events, headers={"Content-Type": "text/plain"})]
    response = await think(streaming(fake_llm, tmp_path))
    assert response.message.content == "hello" and response.usage.prompt_tokens == 3


async def test_an_endpoint_that_refuses_to_stream_is_asked_again_without(fake_llm, tmp_path):
    fake_llm.turns = [[ErrorReply(400, "Streaming is not supported for this model"), SCRIPT]]
    activities = streaming(fake_llm, tmp_path)
    response = await think(activities)
    assert response.message.content == SCRIPT.content and response.usage.prompt_tokens == 120
    assert [bool(r.body.get("stream")) for r in fake_llm.requests] == [True, False]
    assert activities.plain == {"default"}
    await think(activities)
    assert not fake_llm.requests[-1].body.get("stream")  # from then on, plain calls


async def test_a_stream_without_usage_is_counted_and_the_profile_goes_plain(fake_llm, tmp_path):
    fake_llm.turns = [SCRIPT]
    fake_llm.stream_usage = False
    activities = streaming(fake_llm, tmp_path)
    response = await think(activities)
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0  # tiktoken's count
    assert response.message.content == SCRIPT.content
    assert activities.plain == {"default"}
    second = await think(activities)
    assert not fake_llm.requests[-1].body.get("stream") and second.usage.prompt_tokens == 120


@pytest.mark.parametrize(
    "answer, kind, retryable, delay",
    [
        (ErrorReply(429, retry_after=7), LLM_UNAVAILABLE_ERROR, True, timedelta(seconds=7)),
        (ErrorReply(503), LLM_UNAVAILABLE_ERROR, True, None),
        (ErrorReply(401), LLM_REQUEST_REJECTED_ERROR, False, None),
        (ErrorReply(400, "tools are not supported"), LLM_REQUEST_REJECTED_ERROR, False, None),
        (ErrorReply(400, "bad stream of thought", headers={"x-should-retry": "true"}), LLM_UNAVAILABLE_ERROR, True, None),
        (Reset(), LLM_CONNECTION_ERROR, True, None),
        (Raw(body="not json at all"), LLM_INVALID_RESPONSE_ERROR, True, None),
    ],
)
async def test_failures_are_what_they_are_without_streaming(fake_llm, tmp_path, answer, kind, retryable, delay):
    fake_llm.turns = [answer]
    failures = []
    for activities in (plain(fake_llm), streaming(fake_llm, tmp_path)):
        with pytest.raises(ApplicationError) as err:
            await think(activities)
        failures.append((err.value.type, err.value.non_retryable, err.value.next_retry_delay))
    assert failures[0] == failures[1] == (kind, not retryable, delay)


async def test_empty_choices_streamed_are_empty_choices(fake_llm, tmp_path):
    fake_llm.turns = [EmptyChoices()]
    with pytest.raises(ApplicationError, match="no choices"):
        await think(streaming(fake_llm, tmp_path))


async def test_an_error_in_the_middle_of_the_stream_is_retried(fake_llm, tmp_path):
    body = 'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n' \
        'data: {"error": {"message": "upstream overloaded", "type": "server_error"}}\n\n'
    fake_llm.turns = [Raw(body=body, headers={"Content-Type": "text/event-stream"})]
    with pytest.raises(ApplicationError) as err:
        await think(streaming(fake_llm, tmp_path))
    assert err.value.type == LLM_UNAVAILABLE_ERROR and not err.value.non_retryable
    assert "upstream overloaded" in err.value.message


async def test_a_journal_that_cannot_be_written_leaves_the_think_as_it_was(fake_llm, tmp_path):
    fake_llm.turns = [SCRIPT]
    (tmp_path / LIVE_DIR_NAME).write_text("in the way")
    expected = await think(plain(fake_llm))
    assert await think(streaming(fake_llm, tmp_path)) == expected


async def test_a_long_stream_heartbeats(fake_llm, tmp_path):
    fake_llm.turns = [Reply(content="slow " * 6)]
    fake_llm.chunk_chars, fake_llm.chunk_delay = 5, 0.5  # ~3 s of streaming, beats every second after the first
    beats = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    response = await think(streaming(fake_llm, tmp_path), env=env)
    assert response.message.content == "slow " * 6
    assert len(beats) >= 2


async def test_the_journal_is_named_by_the_run_s_directory(fake_llm, tmp_path):
    fake_llm.turns = [SCRIPT]
    await think(streaming(fake_llm, tmp_path), request(workspace="the-flow"))
    assert journal_path(tmp_path, "the-flow").exists()
    assert not journal_path(tmp_path, journal_dir_name(RUN)).exists()
