"""The think's model call with streaming: the same Chat Completions call as
activities/llm_client.py `complete`, asked with `stream=True`, whose chunks
are handed to the live feed as they arrive and assembled into the very
ChatCompletion the plain call returns (agent_model/stream_assembly.py). The
workflow and its history see only that completion.

Every failure is classified as llm_client.py classifies it (statuses,
Retry-After, connection errors, timeouts). Bounds: MAX_STREAM_BYTES of
events in all, each line within MAX_LINE_BYTES, and the stream ends as soon
as what it says is over MAX_REPLY_BYTES; the reply's own limit is checked on
the result too, as for a plain call. A stream that trickles is read at most
READ_INTERVAL apart, so tokens arrive in batches: each wake-up of the HTTP
stack costs more CPU than a token (BENCHMARKS.md, P12), and the journal is
written no more often. A server that answers the stream request with a plain
JSON body is read as a plain reply; one that refuses to stream (a 4xx that
says so) raises StreamingRefused, and the think asks again without streaming.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
from openai._constants import RAW_RESPONSE_HEADER
from openai.types.chat import ChatCompletion
from temporalio.exceptions import ApplicationError

from activities.llm_client import (
    CHAT_COMPLETIONS_PATH, MAX_BODY_BYTES, MAX_REPLY_BYTES, RETRYABLE_STATUS, as_sdk_error, classify, completion_from, read_body,
    reply_too_large,
)
from agent_model.errors import LLM_INVALID_RESPONSE_ERROR, LLM_UNAVAILABLE_ERROR
from agent_model.live_events import Channel
from agent_model.stream_assembly import ChunkAssembler

MAX_STREAM_BYTES = 64 * 1024 * 1024
"""Of all the events of one reply. Each chunk repeats the reply's id and model
around a token or so (~200 bytes for ~4 characters), so a reply near
MAX_REPLY_BYTES streams in some 30 MiB; what it says is bounded sooner (below)."""
MAX_LINE_BYTES = MAX_BODY_BYTES
"""Of one line of the event stream (one chunk's JSON)."""
READ_INTERVAL = 0.05
"""Seconds between reads of a stream that trickles: at most 20 wake-ups a second."""
SOCKET_WAIT = 0.001
"""A piece that took longer than this came from the socket, not from what was read already."""
DONE = b"[DONE]"
EVENT_STREAM = "text/event-stream"

OnText = Callable[[Channel, str], None]
"""(channel, text): what a chunk added to the reply, for the live feed."""


class StreamingRefused(Exception):
    """The endpoint answered the stream request with a 4xx about streaming."""

    def __init__(self, error: openai.APIStatusError) -> None:
        super().__init__(f"{error.status_code}: {error.message}")


@dataclass
class Streamed:
    completion: ChatCompletion
    streamed: bool
    """False: the server answered with a plain body."""
    usage_reported: bool
    """The stream carried the usage (stream_options include_usage)."""


def stream_body(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def refuses_streaming(error: openai.APIStatusError) -> bool:
    """A client error that names streaming: the endpoint (or its model) does not stream."""
    status = error.status_code
    return 400 <= status < 500 and status not in RETRYABLE_STATUS and "stream" in str(error.message).lower()


class _Events:
    """Server-sent events from bytes as they come: each event's data, joined."""

    def __init__(self) -> None:
        self.partial = b""
        self.data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        if len(self.partial) > MAX_LINE_BYTES:
            raise reply_too_large(f"the reply streamed a line over the limit of {MAX_LINE_BYTES} bytes")
        return self._lines(lines)

    def end(self) -> list[bytes]:
        lines, self.partial = [self.partial, b""], b""
        return self._lines(lines)

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        events = []
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if self.data:
                    events.append(b"\n".join(self.data))
                    self.data = []
            elif line.startswith(b"data:"):
                self.data.append(line[5:].lstrip(b" "))
            # Comments (":" keep-alives), event: and id: lines carry nothing here.
        return events


def _chunk(data: bytes, where: str) -> Any:
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        raise ApplicationError(
            "the LLM streamed an event that is not JSON", type=LLM_INVALID_RESPONSE_ERROR
        ) from None
    if isinstance(chunk, dict) and chunk.get("error") is not None:
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        # Mid-stream errors are the server's (overload, a dropped upstream): ask again.
        raise ApplicationError(
            f"LLM endpoint {where} reported an error while streaming: {str(message)[:500]}", type=LLM_UNAVAILABLE_ERROR
        )
    return chunk


async def _read_stream(response: httpx2.Response, on_text: OnText, where: str) -> Streamed:
    assembler, events, size = ChunkAssembler(), _Events(), 0
    asked = slept = time.monotonic()
    async for piece in response.aiter_bytes():
        waited = time.monotonic() - asked > SOCKET_WAIT
        size += len(piece)
        if size > MAX_STREAM_BYTES:
            raise reply_too_large(f"the reply streamed over the limit of {MAX_STREAM_BYTES} bytes")
        for data in events.feed(piece):
            if data.strip() == DONE:
                return _assembled(assembler)
            for channel, text in assembler.add(_chunk(data, where)):
                on_text(channel, text)
        if assembler.characters > MAX_REPLY_BYTES:
            # Each character is a byte at least: the reply is too large already.
            raise reply_too_large(
                f"the reply streamed over {MAX_REPLY_BYTES} characters of content and tool calls, "
                f"over the limit of {MAX_REPLY_BYTES} bytes"
            )
        if waited and not assembler.finished:
            # This piece was waited for. A wake-up per token costs more CPU than
            # the token (the HTTP stack's read machinery): let the next tokens
            # gather in the socket; the journal is written this often anyway.
            rest = READ_INTERVAL - (time.monotonic() - slept)
            if rest > 0:
                await asyncio.sleep(rest)
            slept = time.monotonic()
        asked = time.monotonic()
    for data in events.end():
        if data.strip() != DONE:
            for channel, text in assembler.add(_chunk(data, where)):
                on_text(channel, text)
    return _assembled(assembler)


def _assembled(assembler: ChunkAssembler) -> Streamed:
    return Streamed(
        ChatCompletion.construct(**assembler.completion()), streamed=True, usage_reported=assembler.usage is not None
    )


async def _read_plain_or_stream(response: httpx2.Response, on_text: OnText, where: str) -> Streamed:
    """A body without the event-stream type: plain JSON, or events sent under another type."""
    body = await read_body(response)
    if body.lstrip().startswith(b"data:"):
        events = _Events()
        assembler = ChunkAssembler()
        for data in [*events.feed(body), *events.end()]:
            if data.strip() == DONE:
                break
            for channel, text in assembler.add(_chunk(data, where)):
                on_text(channel, text)
        return _assembled(assembler)
    return Streamed(completion_from(body), streamed=False, usage_reported=True)


async def complete_streaming(
    client: openai.AsyncOpenAI, body: dict[str, Any], model: str, where: str, on_text: OnText
) -> Streamed:
    """One Chat Completions call with stream=True; `on_text` hears each piece
    of the reply as it arrives. A failure is raised as its ApplicationError
    (llm_client.classify), a refusal to stream as StreamingRefused."""
    try:
        response: Any = await client.post(
            CHAT_COMPLETIONS_PATH,
            body=stream_body(body),
            cast_to=ChatCompletion,
            options={"headers": {RAW_RESPONSE_HEADER: "stream"}},  # the raw response, its body unread
        )
        try:
            http: httpx2.Response = response.http_response
            if http.headers.get("content-type", "").split(";")[0].strip().lower() == EVENT_STREAM:
                return await _read_stream(http, on_text, where)
            return await _read_plain_or_stream(http, on_text, where)
        finally:
            await response.close()
    except openai.APIStatusError as e:
        if refuses_streaming(e):
            raise StreamingRefused(e) from None
        raise classify(e, model, where) from None
    except openai.OpenAIError as e:
        raise classify(e, model, where) from None
    except httpx2.TransportError as e:  # while reading the stream, outside the SDK
        raise classify(as_sdk_error(e), model, where) from None
