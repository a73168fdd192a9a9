"""Tests for testkit/fake_openai.py, driven through the real openai SDK."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from testkit.fake_openai import (
    EmptyChoices,
    ErrorReply,
    FakeOpenAI,
    Hang,
    Raw,
    Reply,
    Reset,
    call,
    turn_of,
)

MODEL = "fake-model-x"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def aclient(fake: FakeOpenAI, **kw) -> openai.AsyncOpenAI:
    kw.setdefault("api_key", "test-key")
    return openai.AsyncOpenAI(base_url=fake.base_url, max_retries=0, **kw)


def sclient(fake: FakeOpenAI, **kw) -> openai.OpenAI:
    kw.setdefault("api_key", "test-key")
    return openai.OpenAI(base_url=fake.base_url, max_retries=0, **kw)


def msgs(*pairs: tuple[str, str]) -> list[dict]:
    return [{"role": r, "content": c} for r, c in pairs]


SYSTEM = ("system", "You are a test agent.")
USER = ("user", "Do the thing.")


@pytest.mark.asyncio
async def test_plain_reply_and_recording():
    with FakeOpenAI(turns=[Reply(content="hello there")]) as fake:
        assert fake.base_url.startswith("http://127.0.0.1:") and fake.base_url.endswith("/v1")
        async with aclient(fake) as client:
            resp = await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
        choice = resp.choices[0]
        assert choice.message.role == "assistant"
        assert choice.message.content == "hello there"
        assert choice.message.tool_calls is None
        assert choice.finish_reason == "stop"
        assert resp.model == MODEL
        assert resp.id == "chatcmpl-fake-0"
        assert resp.object == "chat.completion"
        # Default usage: prompt chars // 4, completion len(content) // 4.
        prompt_chars = len(SYSTEM[1]) + len(USER[1])
        assert resp.usage.prompt_tokens == prompt_chars // 4
        assert resp.usage.completion_tokens == len("hello there") // 4
        assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens

        [rec] = fake.requests
        assert rec.turn == 0 and rec.attempt == 0 and rec.completed and rec.status == 200
        assert rec.messages == msgs(SYSTEM, USER)
        assert rec.last_message == {"role": "user", "content": USER[1]}
        assert rec.tools is None
        assert rec.body["model"] == MODEL
        assert rec.headers["authorization"] == "Bearer test-key"
        assert fake.completed() == [rec]


@pytest.mark.asyncio
async def test_tool_call_arguments_round_trip():
    script = [
        Reply(
            content=None,
            tool_calls=[call("read_file", {"path": "a.txt", "n": 1}), call("noop"), call("x", id="custom")],
            usage=(100, 7),
        )
    ]
    with FakeOpenAI(turns=script) as fake:
        async with aclient(fake) as client:
            resp = await client.chat.completions.create(
                model=MODEL, messages=msgs(SYSTEM, USER), tools=TOOLS, tool_choice="auto"
            )
        choice = resp.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        tcs = choice.message.tool_calls
        assert [tc.id for tc in tcs] == ["call_0_0", "call_0_1", "custom"]
        assert tcs[0].type == "function"
        assert tcs[0].function.name == "read_file"
        assert json.loads(tcs[0].function.arguments) == {"path": "a.txt", "n": 1}
        assert tcs[1].function.arguments == "{}"
        assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.usage.total_tokens) == (100, 7, 107)
        assert fake.requests[0].tools == TOOLS
        assert fake.requests[0].body["tool_choice"] == "auto"


def test_raw_bad_json_arguments_pass_through_sync_client():
    bad = '{"path": "a.txt", oops'
    with FakeOpenAI(turns=[Reply(tool_calls=[call("read_file", raw_arguments=bad)])]) as fake:
        with sclient(fake) as client:
            resp = client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER), tools=TOOLS)
        assert resp.choices[0].message.tool_calls[0].function.arguments == bad
        # Default completion tokens: 10 per tool call.
        assert resp.usage.completion_tokens == 10


def test_call_helper_rejects_both_argument_kinds():
    with pytest.raises(ValueError):
        call("x", {"a": 1}, raw_arguments="{}")


@pytest.mark.asyncio
async def test_turn_selection_and_attempt_lists():
    script = [
        Reply(tool_calls=[call("read_file", {"path": "a"})]),
        [ErrorReply(429, retry_after=1), Reply(content="second turn ok")],
        [ErrorReply(500), ErrorReply(503), Reply(content="third")],
    ]
    with FakeOpenAI(turns=script) as fake:
        async with aclient(fake) as client:
            r0 = await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
            assert r0.choices[0].message.tool_calls[0].id == "call_0_0"
            # Retrying turn 0 replays turn 0's (single) response.
            r0b = await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
            assert r0b.choices[0].message.tool_calls[0].function.name == "read_file"

            history = msgs(SYSTEM, USER) + [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_0_0", "type": "function",
                         "function": {"name": "read_file", "arguments": '{"path": "a"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "call_0_0", "content": "file body"},
            ]
            with pytest.raises(openai.RateLimitError) as info:
                await client.chat.completions.create(model=MODEL, messages=history)
            err = info.value
            assert err.status_code == 429
            assert err.response.headers["Retry-After"] == "1"
            assert "retry-after-ms" not in err.response.headers
            assert err.code == "rate_limit_exceeded"
            assert isinstance(err.body, dict) and "rate limit" in err.body["message"]

            r1 = await client.chat.completions.create(model=MODEL, messages=history)
            assert r1.choices[0].message.content == "second turn ok"

            history2 = history + [{"role": "assistant", "content": "second turn ok"}, {"role": "user", "content": "more"}]
            with pytest.raises(openai.InternalServerError) as e500:
                await client.chat.completions.create(model=MODEL, messages=history2)
            assert e500.value.status_code == 500
            with pytest.raises(openai.InternalServerError) as e503:
                await client.chat.completions.create(model=MODEL, messages=history2)
            assert e503.value.status_code == 503
            for _ in range(2):  # last element is reused
                r2 = await client.chat.completions.create(model=MODEL, messages=history2)
                assert r2.choices[0].message.content == "third"

        assert [(r.turn, r.attempt) for r in fake.requests] == [
            (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (2, 3)
        ]
        assert [r.status for r in fake.requests] == [200, 200, 429, 200, 500, 503, 200, 200]
        assert all(r.completed for r in fake.requests)


@pytest.mark.asyncio
async def test_wrong_api_key_gives_401():
    with FakeOpenAI(turns=[Reply(content="never")]) as fake:
        async with aclient(fake, api_key="wrong-key") as client:
            with pytest.raises(openai.AuthenticationError) as info:
                await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
        assert info.value.status_code == 401
        assert info.value.code == "invalid_api_key"
        assert info.value.type == "invalid_request_error"
        [rec] = fake.requests
        assert rec.attempt == -1 and rec.completed and rec.status == 401

        # The rejected request did not consume an attempt of the script.
        async with aclient(fake) as client:
            resp = await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
        assert resp.choices[0].message.content == "never"
        assert fake.requests[-1].attempt == 0


@pytest.mark.asyncio
async def test_api_key_none_accepts_anything():
    with FakeOpenAI(turns=[Reply(content="ok")], api_key=None) as fake:
        async with aclient(fake, api_key="whatever") as client:
            resp = await client.chat.completions.create(model=MODEL, messages=msgs(USER))
        assert resp.choices[0].message.content == "ok"


@pytest.mark.asyncio
async def test_script_exhausted_is_bad_request():
    with FakeOpenAI(turns=[Reply(content="only one")]) as fake:
        history = msgs(SYSTEM, USER, ("assistant", "only one"), ("user", "again"))
        async with aclient(fake) as client:
            with pytest.raises(openai.BadRequestError) as info:
                await client.chat.completions.create(model=MODEL, messages=history)
        assert info.value.status_code == 400
        assert "fake server: script exhausted at turn 1" in str(info.value)
        assert info.value.body["message"] == "fake server: script exhausted at turn 1"
        assert fake.requests[0].turn == 1 and fake.requests[0].completed


STREAMED = Reply(
    content="Reading it now, then I will tell you.",
    tool_calls=[call("read_file", {"path": "a.txt"}), call("read_file", {"path": "b.txt"})],
    usage=(30, 9),
)


async def sdk_assembled(client, **kw):
    """The SDK's own assembly of a streamed reply (openai.lib.streaming), and the chunks."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state = ChatCompletionStreamState()
    chunks = []
    async for chunk in await client.chat.completions.create(model=MODEL, messages=msgs(USER), stream=True, **kw):
        chunks.append(chunk)
        state.handle_chunk(chunk)
    return state.get_final_completion(), chunks


@pytest.mark.asyncio
async def test_a_streamed_reply_assembles_to_the_plain_one():
    with FakeOpenAI(turns=[STREAMED]) as fake:
        async with aclient(fake) as client:
            plain = await client.chat.completions.create(model=MODEL, messages=msgs(USER))
            streamed, chunks = await sdk_assembled(client, stream_options={"include_usage": True})
    message, plain_message = streamed.choices[0].message, plain.choices[0].message
    assert message.content == plain_message.content
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        (c.id, c.function.name, c.function.arguments) for c in plain_message.tool_calls
    ]
    assert streamed.choices[0].finish_reason == plain.choices[0].finish_reason == "tool_calls"
    assert streamed.usage.prompt_tokens == plain.usage.prompt_tokens == 30
    assert streamed.model == plain.model == MODEL
    # In pieces of chunk_chars (4): the content alone takes several chunks.
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == len(STREAMED.content) // 4 + 1
    rec = fake.requests[1]
    assert rec.streamed and rec.completed and rec.attempt == 1
    sent = "".join(text for _, text in rec.chunks_sent)
    assert sent == STREAMED.content + 'read_file{"path": "a.txt"}read_file{"path": "b.txt"}'
    times = [at for at, _ in rec.chunks_sent]
    assert times == sorted(times)


@pytest.mark.asyncio
async def test_a_stream_without_usage_asked_or_allowed_has_none():
    with FakeOpenAI(turns=[Reply(content="hi")]) as fake:
        async with aclient(fake) as client:
            unasked, _ = await sdk_assembled(client)
            fake.stream_usage = False
            refused, _ = await sdk_assembled(client, stream_options={"include_usage": True})
    assert unasked.usage is None and refused.usage is None
    assert unasked.choices[0].message.content == refused.choices[0].message.content == "hi"


@pytest.mark.asyncio
async def test_the_chunk_gate_holds_a_stream_after_its_first_piece():
    gate = threading.Event()
    with FakeOpenAI(turns=[Reply(content="abcdefgh")], chunk_chars=2, chunk_gate=gate) as fake:
        async with aclient(fake) as client:
            stream = await client.chat.completions.create(model=MODEL, messages=msgs(USER), stream=True)
            pieces = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                    if len(pieces) == 1:
                        await asyncio.sleep(0.2)
                        # Held: nothing more was sent while the gate was closed.
                        assert [text for _, text in fake.requests[0].chunks_sent] == ["ab"]
                        gate.set()
    assert pieces == ["ab", "cd", "ef", "gh"]


@pytest.mark.asyncio
async def test_other_answers_to_a_stream_request_are_as_without_stream():
    with FakeOpenAI(turns=[[ErrorReply(429, retry_after=1), Raw(body={"plain": True}), EmptyChoices()]]) as fake:
        async with aclient(fake) as client:
            with pytest.raises(openai.RateLimitError):
                await client.chat.completions.create(model=MODEL, messages=msgs(USER), stream=True)
            request = urllib.request.Request(
                f"{fake.base_url}/chat/completions",
                data=json.dumps({"model": MODEL, "messages": msgs(USER), "stream": True}).encode(),
                headers={"Authorization": "Bearer test-key", "Content-Type": "application/json"},
            )
            with await asyncio.to_thread(urllib.request.urlopen, request) as answer:
                assert json.loads(answer.read()) == {"plain": True}
            empty, _ = await sdk_assembled(client)
    assert empty.choices == []


@pytest.mark.asyncio
async def test_reset_gives_connection_error():
    with FakeOpenAI(turns=[[Reset(), Reply(content="after reset")]]) as fake:
        async with aclient(fake) as client:
            with pytest.raises(openai.APIConnectionError) as info:
                await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
            assert not isinstance(info.value, openai.APITimeoutError)
            resp = await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
        assert resp.choices[0].message.content == "after reset"
        assert [r.completed for r in fake.requests] == [False, True]
        assert fake.requests[0].status is None


@pytest.mark.asyncio
async def test_hang_times_out_and_is_not_completed():
    with FakeOpenAI(turns=[[Hang(), Reply(content="late")]]) as fake:
        async with aclient(fake, timeout=0.5) as client:
            t0 = time.monotonic()
            with pytest.raises(openai.APITimeoutError):
                await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
            assert time.monotonic() - t0 < 3
            resp = await client.chat.completions.create(model=MODEL, messages=msgs(SYSTEM, USER))
        assert resp.choices[0].message.content == "late"
        assert fake.requests[0].completed is False
        assert fake.completed() == [fake.requests[1]]


def test_stop_releases_hanging_request_quickly():
    fake = FakeOpenAI(turns=[Hang()]).start()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with sclient(fake, timeout=20) as client:
                client.chat.completions.create(model=MODEL, messages=msgs(USER))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    fake.wait_for_requests(1, timeout=5)
    t0 = time.monotonic()
    fake.stop()
    assert time.monotonic() - t0 < 2
    t.join(timeout=5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], openai.APIConnectionError)
    assert fake.completed() == []


@pytest.mark.asyncio
async def test_delay_is_applied_and_interruptible():
    with FakeOpenAI(turns=[Reply(content="slow", delay=0.3)]) as fake:
        async with aclient(fake) as client:
            t0 = time.monotonic()
            resp = await client.chat.completions.create(model=MODEL, messages=msgs(USER))
            assert time.monotonic() - t0 >= 0.3
        assert resp.choices[0].message.content == "slow"

    fake = FakeOpenAI(turns=[Reply(content="very slow", delay=60)]).start()
    result: list = []
    t = threading.Thread(
        target=lambda: result.append(_swallow(lambda: sclient(fake).chat.completions.create(
            model=MODEL, messages=msgs(USER)))),
        daemon=True,
    )
    t.start()
    fake.wait_for_requests(1, timeout=5)
    t0 = time.monotonic()
    fake.stop()
    t.join(timeout=5)
    assert time.monotonic() - t0 < 3
    assert isinstance(result[0], openai.APIConnectionError)
    assert not fake.requests[0].completed


def _swallow(fn):
    try:
        return fn()
    except BaseException as exc:  # noqa: BLE001
        return exc


@pytest.mark.asyncio
async def test_empty_choices():
    with FakeOpenAI(turns=[EmptyChoices()]) as fake:
        async with aclient(fake) as client:
            resp = await client.chat.completions.create(model=MODEL, messages=msgs(USER))
        assert resp.choices == []
        assert resp.usage is not None
        assert fake.requests[0].completed


@pytest.mark.asyncio
async def test_responder_mode_separates_runs_by_first_message():
    seen: list[tuple[str, int, int]] = []

    def responder(body: dict, attempt: int):
        system = body["messages"][0]["content"]
        turn = turn_of(body)
        seen.append((system, turn, attempt))
        if system == "agent A" and attempt == 0:
            return ErrorReply(503, retry_after=0)
        if turn >= 1:
            return Reply(content=f"{system} done")
        return Reply(content=f"{system} turn {turn} attempt {attempt}")

    with FakeOpenAI(turns=[Reply(content="ignored")], responder=responder) as fake:
        async with aclient(fake) as client:
            async def ask(system: str, extra: list | None = None):
                return await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "system", "content": system}, {"role": "user", "content": "go"}] + (extra or [])
                )

            with pytest.raises(openai.InternalServerError):
                await ask("agent A")
            a, b = await asyncio.gather(ask("agent A"), ask("agent B"))
            assert a.choices[0].message.content == "agent A turn 0 attempt 1"
            assert b.choices[0].message.content == "agent B turn 0 attempt 0"
            done = await ask("agent B", [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}])
            assert done.choices[0].message.content == "agent B done"

        assert sorted(seen) == sorted([
            ("agent A", 0, 0), ("agent A", 0, 1), ("agent B", 0, 0), ("agent B", 1, 0)
        ])
        await fake.await_requests(4, timeout=1)
        assert fake.errors == []


@pytest.mark.asyncio
async def test_responder_exception_becomes_500():
    def responder(body: dict, attempt: int):
        raise RuntimeError("boom")

    with FakeOpenAI(responder=responder) as fake:
        async with aclient(fake) as client:
            with pytest.raises(openai.InternalServerError) as info:
                await client.chat.completions.create(model=MODEL, messages=msgs(USER))
        assert "boom" in str(info.value)
        assert len(fake.errors) == 1 and isinstance(fake.errors[0], RuntimeError)


@pytest.mark.asyncio
async def test_completed_bookkeeping_and_waiting():
    script = [[Reset(), Hang(), ErrorReply(429, retry_after=2), Reply(content="ok"), Raw(200, {"weird": True})]]
    with FakeOpenAI(turns=script) as fake:
        async with aclient(fake, timeout=0.4) as client:
            for expected in (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError):
                with pytest.raises(expected):
                    await client.chat.completions.create(model=MODEL, messages=msgs(USER))
            await client.chat.completions.create(model=MODEL, messages=msgs(USER))
            raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=msgs(USER))
            assert json.loads(raw.content) == {"weird": True}
        await fake.await_requests(5, timeout=1)
        fake.wait_for_requests(5, timeout=1)
        assert [r.completed for r in fake.requests] == [False, False, True, True, True]
        assert [r.attempt for r in fake.completed()] == [2, 3, 4]
        times = [r.received_at for r in fake.requests]
        assert times == sorted(times)
        with pytest.raises(TimeoutError):
            fake.wait_for_requests(6, timeout=0.1)
        with pytest.raises(TimeoutError):
            await fake.await_requests(6, timeout=0.1)


def test_models_endpoint_unknown_paths_and_port_release():
    with FakeOpenAI() as fake:
        with sclient(fake) as client:
            models = client.models.list()
            assert [m.id for m in models.data] == ["fake-model"]
            with pytest.raises(openai.NotFoundError):
                client.embeddings.create(model="e", input="x")
        # Also reachable without the /v1 prefix and via plain urllib (another "process").
        req = urllib.request.Request(
            fake.base_url.removesuffix("/v1") + "/chat/completions",
            data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            headers={"Authorization": "Bearer test-key", "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as info:  # empty script -> 400
            urllib.request.urlopen(req, timeout=5)
        assert info.value.code == 400
        assert json.loads(info.value.read())["error"]["message"] == "fake server: script exhausted at turn 0"
        port = fake.port
    # After stop() nothing listens on the port any more ...
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    # ... and it can be bound again (SO_REUSEADDR, as servers do, because the
    # server-side close leaves TIME_WAIT entries behind) ...
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
    finally:
        s.close()
    # ... and no fake thread lingers.
    assert not [t for t in threading.enumerate() if t.name.startswith("FakeOpenAI")]
