"""A scripted, in-process fake of the OpenAI Chat Completions HTTP API.

The fake is a real HTTP/1.1 server (standard library only) listening on
127.0.0.1 on a random free port.  It runs on its own daemon threads, so it
can be used from synchronous tests, from async tests (it never touches the
test's event loop) and from other processes such as a Temporal worker
subprocess -- they only need ``fake.base_url``.

Quick start::

    with FakeOpenAI(turns=[
        Reply(tool_calls=[call("read_file", {"path": "a.txt"})]),   # turn 0
        [ErrorReply(429, retry_after=1), Reply(content="done")],     # turn 1
    ]) as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="test-key", max_retries=0)
        ...

Scripting
---------
* The *turn* of a request is the number of messages with role ``"assistant"``
  in its ``messages`` list: turn 0 is the first LLM call of a run, turn 1 the
  call after one assistant reply, and so on.  A retried request therefore gets
  the same part of the script again.
* ``turns[k]`` is either a single response object (used for every attempt of
  turn k) or a list of response objects, one per attempt; the last element is
  reused for any further attempts.  The *attempt* index in ``turns`` mode is
  the number of earlier scripted requests with the same turn number.
* ``responder(request_json, attempt)`` replaces ``turns`` entirely.  In this
  mode ``attempt`` is the number of earlier scripted requests that have the
  same turn number AND the same content in their first message (normally the
  system prompt), so several runs/agents sharing one server keep independent
  attempt counts.  ``turn_of(request_json)`` gives the turn number.  If the
  responder raises, the fake answers HTTP 500 and appends the exception to
  ``fake.errors``.
* A turn beyond the script is answered with HTTP 400 and the message
  ``fake server: script exhausted at turn N``.

Requests that are rejected before reaching the script (wrong API key,
unparsable JSON, unknown path) are recorded too, but do not count as
attempts; their ``attempt`` is -1.

Streaming
---------
A request with ``"stream": true`` gets a :class:`Reply` (and
:class:`EmptyChoices`) as server-sent events, as OpenAI sends them: a first
chunk with the role, the content in pieces of ``chunk_chars`` characters
(longer for a text of more than MAX_PIECES pieces),
each tool call's id and name and then its arguments in pieces, a chunk with
the finish reason, a chunk with the usage when the request asked for it
(``stream_options.include_usage``) and ``stream_usage`` is on, then
``data: [DONE]``. The assembled reply is exactly the non-streamed one.
``chunk_delay`` seconds pass before each piece (on a schedule: n pieces
take n times as long); ``chunk_gate`` (a
threading.Event), when set up, holds every stream after its first piece
until it is set. Each piece's send time (time.time()) and text are in
``RecordedRequest.chunks_sent``. Every other response object answers a
stream request as it answers any other.

Response objects: :class:`Reply`, :class:`ErrorReply`, :class:`Hang`,
:class:`Reset`, :class:`EmptyChoices` and, for anything unusual, :class:`Raw`.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import socketserver
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Sequence, Union
from urllib.parse import urlsplit

__all__ = [
    "FakeOpenAI",
    "RecordedRequest",
    "Reply",
    "ErrorReply",
    "Hang",
    "Reset",
    "EmptyChoices",
    "Raw",
    "ToolCall",
    "call",
    "python",
    "terminate",
    "turn_of",
]

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MODELS_PATHS = ("/v1/models", "/models")

# Granularity of interruptible waits (delay / Hang) and of the accept loop.
_TICK = 0.02


# --------------------------------------------------------------------------
# Response objects
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One tool call inside a :class:`Reply`; build it with :func:`call`."""

    name: str
    arguments: Any = None
    raw_arguments: str | None = None
    id: str | None = None

    def arguments_json(self) -> str:
        if self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps({} if self.arguments is None else self.arguments)


def call(
    name: str,
    arguments: Any = None,
    raw_arguments: str | None = None,
    id: str | None = None,
) -> ToolCall:
    """Build a tool call.

    ``arguments`` is JSON-encoded by the server (``None`` means ``{}``);
    ``raw_arguments`` is sent verbatim (use it for malformed JSON).  ``id``
    defaults to ``call_<turn>_<index>``.
    """
    if arguments is not None and raw_arguments is not None:
        raise ValueError("give either arguments or raw_arguments, not both")
    return ToolCall(name=name, arguments=arguments, raw_arguments=raw_arguments, id=id)


def terminate(answer: str = "done", status: str = "success") -> Reply:
    """A reply calling the terminate tool with that answer and status."""
    return Reply(tool_calls=[call("terminate", {"status": status, "answer": answer})])


def python(code: str, content: str | None = None) -> Reply:
    """A reply calling python_execute with that code (and optional content)."""
    return Reply(content=content, tool_calls=[call("python_execute", {"code": code})])


@dataclass(frozen=True)
class Reply:
    """A successful chat completion.

    ``finish_reason`` defaults to ``"tool_calls"`` when there are tool calls,
    else ``"stop"``.  ``usage`` is ``(prompt_tokens, completion_tokens)``;
    by default prompt tokens ~ characters of the request messages // 4 and
    completion tokens = len(content) // 4 + 10 per tool call.
    """

    content: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    finish_reason: str | None = None
    delay: float = 0.0
    usage: tuple[int, int] | None = None


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with an OpenAI-style JSON error body.

    ``retry_after`` (seconds) sets the ``Retry-After`` header.  ``type`` and
    ``code`` default to values resembling what OpenAI sends for the status.
    """

    status: int
    message: str = ""
    retry_after: float | None = None
    delay: float = 0.0
    type: str | None = None
    code: str | None = None
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class Hang:
    """Never answer: block until ``stop()`` or until the client disconnects."""


@dataclass(frozen=True)
class Reset:
    """Drop the connection abruptly (TCP RST) without any HTTP response."""

    delay: float = 0.0


@dataclass(frozen=True)
class EmptyChoices:
    """HTTP 200 with a well-formed completion object whose ``choices`` is []."""

    delay: float = 0.0


@dataclass(frozen=True)
class Raw:
    """Anything else: status, body (dict -> JSON, str/bytes as is), headers."""

    status: int = 200
    body: Any = b""
    headers: dict[str, str] | None = None
    delay: float = 0.0


Response = Union[Reply, ErrorReply, Hang, Reset, EmptyChoices, Raw]
Responder = Callable[[dict, int], Response]


# --------------------------------------------------------------------------
# Recorded requests
# --------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One HTTP request received by the fake.

    ``headers`` has lower-cased names.  ``turn`` is -1 when the body had no
    usable ``messages`` (or for non chat-completions paths); ``attempt`` is -1
    when the request never reached the script.  ``completed`` is True only
    when the whole response was handed to the socket without error (never for
    Hang/Reset, nor when the client disconnected during a delay or the write
    failed).  It is set just before the single write of the response, so a
    client that received the response always sees it True; a client that
    vanished without the fake noticing may still leave it True (TCP cannot
    tell).  ``status`` is the HTTP
    status that was (or was about to be) sent, None for Hang/Reset.
    """

    body: dict
    headers: dict
    turn: int
    attempt: int
    completed: bool = False
    received_at: float = 0.0
    method: str = "POST"
    path: str = "/v1/chat/completions"
    status: int | None = None
    index: int = 0
    query: str = ""
    """The request target's query string, e.g. ``api-version=2024-08-01-preview``."""
    peer: str = ""
    """The client's IP address (which host sent it, on a test network)."""
    chunks_sent: list = field(default_factory=list)
    """Of a streamed reply: (time.time() when handed to the socket, the text piece)
    for each piece of content or of a tool call's name and arguments."""

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def messages(self) -> list:
        return self.body["messages"]

    @property
    def tools(self) -> list | None:
        return self.body.get("tools")

    @property
    def last_message(self) -> dict:
        return self.body["messages"][-1]

    @property
    def model(self) -> str | None:
        return self.body.get("model")


def turn_of(body: dict) -> int:
    """Number of assistant messages in a request body (the turn number)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return -1
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def _first_content_key(body: dict) -> str:
    messages = body.get("messages") or []
    if not messages or not isinstance(messages[0], dict):
        return ""
    return json.dumps(messages[0].get("content"), sort_keys=True)


def _rough_prompt_tokens(messages: Any) -> int:
    chars = 0
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    chars += len(part["text"])
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict):
                chars += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
    return chars // 4


def _error_body(message: str, type_: str, code: str | None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


_DEFAULT_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("fake server: bad request", "invalid_request_error", None),
    401: ("fake server: incorrect API key provided", "invalid_request_error", "invalid_api_key"),
    403: ("fake server: forbidden", "invalid_request_error", None),
    404: ("fake server: not found", "invalid_request_error", None),
    408: ("fake server: request timeout", "server_error", None),
    409: ("fake server: conflict", "invalid_request_error", None),
    422: ("fake server: unprocessable entity", "invalid_request_error", None),
    429: ("fake server: rate limit reached", "requests", "rate_limit_exceeded"),
    500: ("fake server: internal server error", "server_error", None),
    502: ("fake server: bad gateway", "server_error", None),
    503: ("fake server: service unavailable", "server_error", None),
}


# --------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    fake: "FakeOpenAI"

    def server_bind(self) -> None:
        # HTTPServer.server_bind() calls socket.getfqdn(), which can stall for
        # seconds on machines without DNS; we know our name already.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = port

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that disconnect abruptly are normal in these tests; stay quiet.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1.0"
    server: _Server

    # -- lifecycle ---------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.fake._register_connection(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.fake._unregister_connection(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def version_string(self) -> str:
        return self.server_version

    # -- helpers -----------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline()
                if not size_line:
                    break
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until blank line
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _pause(self, seconds: float | None) -> str:
        """Wait ``seconds`` (None = forever).  Returns "ok", "stopped" or "gone"."""
        stop_event = self.server.fake._stop_event
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            if stop_event.is_set():
                return "stopped"
            if self._client_gone():
                return "gone"
            if deadline is None:
                step = _TICK
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return "ok"
                step = min(_TICK, remaining)
            if stop_event.wait(step):
                return "stopped"

    def _send(self, rec: RecordedRequest | None, status: int, body: bytes,
              content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> bool:
        """Write one complete response with a single sendall().

        ``rec.completed`` is set *before* the bytes are handed to the kernel
        (and cleared again if that fails): a client can only have the full
        response once the last byte was sent, so a test that has received a
        response always observes ``completed=True`` -- no race with this thread.
        """
        if rec is not None:
            rec.status = status
        reason = self.responses.get(status, ("Unknown",))[0]
        head = [
            f"HTTP/1.1 {status} {reason}",
            f"Server: {self.version_string()}",
            f"Date: {self.date_time_string()}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
        ]
        if rec is not None:
            head.append(f"x-request-id: req_fake_{rec.index}")
        for key, value in (headers or {}).items():
            head.append(f"{key}: {value}")
        if self.close_connection:
            head.append("Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        if rec is not None:
            rec.completed = True
        try:
            self.connection.sendall(data)
        except OSError:
            if rec is not None:
                rec.completed = False
            self.close_connection = True
            return False
        return True

    def _send_json(self, rec: RecordedRequest | None, status: int, obj: Any,
                   headers: dict[str, str] | None = None) -> bool:
        return self._send(rec, status, json.dumps(obj).encode("utf-8"), headers=headers)

    def _send_error_json(self, rec: RecordedRequest | None, status: int, message: str,
                         type_: str = "invalid_request_error", code: str | None = None,
                         headers: dict[str, str] | None = None) -> bool:
        return self._send_json(rec, status, _error_body(message, type_, code), headers)

    def _reset(self) -> None:
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            # The descriptor is really closed (with RST, thanks to linger 0)
            # once rfile/wfile are closed in finish().
            self.connection.close()
        except OSError:
            pass

    def _auth_ok(self) -> bool:
        expected = self.server.fake.api_key
        if expected is None:
            return True
        # Azure's clients send the key in an api-key header instead.
        return (self.headers.get("Authorization") or "") == f"Bearer {expected}" or self.headers.get("api-key") == expected

    # -- verbs -------------------------------------------------------------

    def do_GET(self) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path.rstrip("/")
        rec = fake._record(self, {}, path, turn=-1, key=None)
        if not self._auth_ok():
            self._send_unauthorized(rec)
        elif path in MODELS_PATHS:
            self._send_json(rec, 200, {
                "object": "list",
                "data": [{"id": fake.model, "object": "model", "created": 0, "owned_by": "fake-openai"}],
            })
        else:
            self._send_error_json(rec, 404, f"fake server: unknown path GET {path}")

    def do_POST(self) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path.rstrip("/")
        try:
            raw = self._read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return

        body: Any = None
        parse_error = None
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            parse_error = str(exc)
        body_dict = body if isinstance(body, dict) else {}
        turn = turn_of(body_dict)

        if path not in fake.chat_paths:
            rec = fake._record(self, body_dict, path, turn=turn, key=None)
            self._send_error_json(rec, 404, f"fake server: unknown path POST {path}")
            return
        if not self._auth_ok():
            rec = fake._record(self, body_dict, path, turn=turn, key=None)
            self._send_unauthorized(rec)
            return
        if parse_error is not None or not isinstance(body, dict):
            rec = fake._record(self, body_dict, path, turn=turn, key=None)
            self._send_error_json(rec, 400, f"fake server: request body is not a JSON object ({parse_error})")
            return
        if not isinstance(body.get("messages"), list):
            rec = fake._record(self, body_dict, path, turn=turn, key=None)
            self._send_error_json(rec, 400, "fake server: 'messages' must be a list", code=None)
            return
        key = ("responder", turn, _first_content_key(body)) if fake.responder else ("turns", turn)
        rec = fake._record(self, body, path, turn=turn, key=key)
        try:
            response = fake._choose(body, rec)
        except _ScriptExhausted:
            self._send_error_json(rec, 400, f"fake server: script exhausted at turn {turn}")
            return
        except Exception as exc:  # responder bug: make it visible
            fake.errors.append(exc)
            self._send_error_json(rec, 500, f"fake server: responder raised {exc!r}", "server_error")
            return
        self._respond(rec, response)

    # -- streaming ---------------------------------------------------------

    def _send_stream(self, rec: RecordedRequest, completion: dict) -> None:
        """`completion` as server-sent events, in HTTP chunks (see the module docstring)."""
        fake = self.server.fake
        rec.status = 200
        head = [
            "HTTP/1.1 200 OK",
            f"Server: {self.version_string()}",
            f"Date: {self.date_time_string()}",
            "Content-Type: text/event-stream; charset=utf-8",
            "Cache-Control: no-cache",
            "Transfer-Encoding: chunked",
            f"x-request-id: req_fake_{rec.index}",
        ]
        try:
            self.connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            first, paced, started = True, 0, time.monotonic()
            for text, chunk in _stream_chunks(completion, fake.chunk_chars, self._wants_usage(rec)):
                if text and fake.chunk_delay > 0:
                    # Against a schedule, not one pause after another: n pieces take n * chunk_delay.
                    paced += 1
                    if self._pause(max(0.0, started + paced * fake.chunk_delay - time.monotonic())) != "ok":
                        self.close_connection = True
                        return
                if text and not first and fake.chunk_gate is not None and self._gate(fake.chunk_gate) != "ok":
                    self.close_connection = True
                    return
                self._send_event(json.dumps(chunk))
                if text:
                    first = False
                    rec.chunks_sent.append((time.time(), text))
            rec.completed = True
            self._send_event("[DONE]")
            self.connection.sendall(b"0\r\n\r\n")
        except OSError:
            rec.completed = False
            self.close_connection = True

    def _wants_usage(self, rec: RecordedRequest) -> bool:
        options = rec.body.get("stream_options")
        return self.server.fake.stream_usage and isinstance(options, dict) and bool(options.get("include_usage"))

    def _send_event(self, data: str) -> None:
        event = f"data: {data}\n\n".encode("utf-8")
        self.connection.sendall(f"{len(event):x}\r\n".encode("ascii") + event + b"\r\n")

    def _gate(self, gate: threading.Event) -> str:
        """Wait for `gate`: "ok", "stopped" or "gone"."""
        while not gate.is_set():
            outcome = self._pause(_TICK)
            if outcome != "ok":
                return outcome
        return "ok"

    def _send_unauthorized(self, rec: RecordedRequest) -> None:
        self._send_error_json(
            rec, 401,
            "fake server: Incorrect API key provided.",
            "invalid_request_error", "invalid_api_key",
        )

    # -- scripted responses ------------------------------------------------

    def _respond(self, rec: RecordedRequest, response: Any) -> None:
        fake = self.server.fake
        if isinstance(response, Hang):
            self._pause(None)
            self.close_connection = True
            return

        delay = getattr(response, "delay", 0.0) or 0.0
        if delay > 0:
            outcome = self._pause(delay)
            if outcome != "ok":
                self.close_connection = True
                return

        if isinstance(response, Reset):
            self._reset()
        elif isinstance(response, Reply):
            try:
                obj = fake._completion_body(rec, response)
            except Exception as exc:  # malformed Reply in the script
                fake.errors.append(exc)
                self._send_error_json(rec, 500, f"fake server: bad Reply {exc!r}", "server_error")
                return
            if rec.streamed:
                self._send_stream(rec, obj)
            else:
                self._send_json(rec, 200, obj)
        elif isinstance(response, EmptyChoices):
            obj = fake._completion_body(rec, Reply(content=""))
            obj["choices"] = []
            if rec.streamed:
                self._send_stream(rec, obj)
            else:
                self._send_json(rec, 200, obj)
        elif isinstance(response, ErrorReply):
            default_msg, default_type, default_code = _DEFAULT_ERRORS.get(
                response.status,
                (f"fake server: error {response.status}",
                 "server_error" if response.status >= 500 else "invalid_request_error", None),
            )
            headers = dict(response.headers or {})
            if response.retry_after is not None:
                ra = response.retry_after
                headers["Retry-After"] = str(int(ra)) if float(ra).is_integer() else str(ra)
            self._send_error_json(
                rec, response.status,
                response.message or default_msg,
                response.type or default_type,
                response.code if response.code is not None else default_code,
                headers,
            )
        elif isinstance(response, Raw):
            if isinstance(response.body, (dict, list)):
                data = json.dumps(response.body).encode("utf-8")
            elif isinstance(response.body, str):
                data = response.body.encode("utf-8")
            else:
                data = bytes(response.body)
            headers = dict(response.headers or {})
            ctype = headers.pop("Content-Type", None) or headers.pop("content-type", None) or "application/json"
            self._send(rec, response.status, data, ctype, headers)
        else:
            err = TypeError(f"fake server: unsupported response object {response!r}")
            fake.errors.append(err)
            self._send_error_json(rec, 500, str(err), "server_error")


class _ScriptExhausted(Exception):
    pass


MAX_PIECES = 2000
"""Pieces of one text at most: a huge reply streams in longer pieces, so a
test of size limits does not send a hundred thousand chunks."""


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size, -(-len(text) // MAX_PIECES))
    return [text[i:i + size] for i in range(0, len(text), size)]


def _stream_chunks(completion: dict, chunk_chars: int, usage: bool) -> list[tuple[str, dict]]:
    """The chunks of a streamed `completion`, each with the text it carries ("" for none)."""
    base = {
        "id": completion["id"], "object": "chat.completion.chunk",
        "created": completion["created"], "model": completion["model"],
    }

    def chunk(delta: dict | None, finish_reason: str | None = None, index: int = 0) -> dict:
        return {**base, "choices": [{"index": index, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}]}

    chunks: list[tuple[str, dict]] = []
    for choice in completion["choices"]:
        index = choice["index"]
        message = choice["message"]
        content = message.get("content")
        chunks.append(("", chunk({"role": "assistant", "content": "" if content is not None else None, "refusal": None}, index=index)))
        for piece in _pieces(content or "", chunk_chars):
            chunks.append((piece, chunk({"content": piece}, index=index)))
        for i, call in enumerate(message.get("tool_calls") or []):
            name = call["function"]["name"]
            chunks.append((name, chunk({"tool_calls": [{
                "index": i, "id": call["id"], "type": "function", "function": {"name": name, "arguments": ""},
            }]}, index=index)))
            for piece in _pieces(call["function"]["arguments"], chunk_chars):
                chunks.append((piece, chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}, index=index)))
        chunks.append(("", chunk(None, choice["finish_reason"], index=index)))
    if not completion["choices"]:
        chunks.append(("", {**base, "choices": []}))
    if usage:
        chunks.append(("", {**base, "choices": [], "usage": completion["usage"]}))
    return chunks


# --------------------------------------------------------------------------
# The fake itself
# --------------------------------------------------------------------------


class FakeOpenAI:
    """Scripted OpenAI-compatible Chat Completions server on 127.0.0.1.

    See the module docstring for the scripting model.  Use as a context
    manager or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        turns: list | None = None,
        responder: Responder | None = None,
        api_key: str | None = "test-key",
        model: str = "fake-model",
        chat_paths: Sequence[str] = CHAT_PATHS,
        chunk_delay: float = 0.0,
        chunk_chars: int = 4,
        stream_usage: bool = True,
        chunk_gate: threading.Event | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        """``host``: the address to listen on (a test network's own, for
        clients in other network namespaces). ``chat_paths``: the paths answered as Chat Completions (Azure's
        deployment path, for instance); any other POST gets 404. The
        ``chunk_*`` and ``stream_usage`` options shape streamed replies
        (module docstring, "Streaming"); they may be changed at any time."""
        self.host = host
        self.chunk_delay = chunk_delay
        self.chunk_chars = chunk_chars
        self.stream_usage = stream_usage
        self.chunk_gate = chunk_gate
        self.turns = list(turns) if turns is not None else []
        self.chat_paths = tuple(chat_paths)
        self.responder = responder
        self.api_key = api_key
        self.model = model
        self.requests: list[RecordedRequest] = []
        self.errors: list[BaseException] = []
        self.base_url = ""
        self.port = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._attempts: dict[tuple, int] = {}
        self._stop_event = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._conn_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> "FakeOpenAI":
        if self._server is not None:
            return self
        self._stop_event.clear()
        server = _Server((self.host, 0), _Handler)
        server.fake = self
        self._server = server
        self.port = server.server_address[1]
        self.base_url = f"http://{self.host}:{self.port}/v1"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": _TICK},
            name=f"FakeOpenAI:{self.port}", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stop_event.set()  # releases Hang and pending delays
        server.shutdown()
        server.server_close()  # frees the listening port
        if thread is not None:
            thread.join(timeout=5)
        # Close idle keep-alive connections so their handler threads end.
        with self._conn_lock:
            conns = list(self._conns.items())
        for conn, _ in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + 2
        for _, handler_thread in conns:
            if handler_thread is not threading.current_thread():
                handler_thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._server = None
        self._thread = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- inspection ------------------------------------------------------------

    def completed(self) -> list[RecordedRequest]:
        """Requests whose response was fully written (``completed`` is True)."""
        return [r for r in list(self.requests) if r.completed]

    def wait_for_requests(self, n: int, timeout: float = 30) -> None:
        """Block until at least ``n`` requests arrived, else raise TimeoutError."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"FakeOpenAI: expected {n} requests within {timeout}s, got {len(self.requests)}"
                    )
                self._cond.wait(remaining)

    async def await_requests(self, n: int, timeout: float = 30) -> None:
        """Async variant of :meth:`wait_for_requests`; polls, never blocks the loop."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < n:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"FakeOpenAI: expected {n} requests within {timeout}s, got {len(self.requests)}"
                )
            await asyncio.sleep(0.01)

    # -- internals (called from handler threads) ---------------------------------

    def _register_connection(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._conns[conn] = threading.current_thread()

    def _unregister_connection(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._conns.pop(conn, None)

    def _record(self, handler: _Handler, body: dict, path: str, turn: int, key: tuple | None) -> RecordedRequest:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._cond:
            if key is None:
                attempt = -1
            else:
                attempt = self._attempts.get(key, 0)
                self._attempts[key] = attempt + 1
            rec = RecordedRequest(
                body=body, headers=headers, turn=turn, attempt=attempt,
                received_at=time.monotonic(), method=handler.command, path=path,
                index=len(self.requests), query=urlsplit(handler.path).query,
                peer=str(handler.client_address[0]),
            )
            self.requests.append(rec)
            self._cond.notify_all()
        return rec

    def _choose(self, body: dict, rec: RecordedRequest) -> Any:
        if self.responder is not None:
            return self.responder(body, rec.attempt)
        if rec.turn < 0 or rec.turn >= len(self.turns):
            raise _ScriptExhausted
        entry = self.turns[rec.turn]
        if isinstance(entry, (list, tuple)):
            if not entry:
                raise _ScriptExhausted
            return entry[min(rec.attempt, len(entry) - 1)]
        return entry

    def _completion_body(self, rec: RecordedRequest, reply: Reply) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        tool_calls = []
        for i, tc in enumerate(reply.tool_calls):
            if not isinstance(tc, ToolCall):
                raise TypeError(f"tool_calls entries must be built with call(), got {tc!r}")
            tool_calls.append({
                "id": tc.id or f"call_{rec.turn}_{i}",
                "type": "function",
                "function": {"name": tc.name, "arguments": tc.arguments_json()},
            })
        if tool_calls:
            message["tool_calls"] = tool_calls
        finish_reason = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
        if reply.usage is not None:
            prompt_tokens, completion_tokens = reply.usage
        else:
            prompt_tokens = _rough_prompt_tokens(rec.body.get("messages"))
            completion_tokens = len(reply.content or "") // 4 + 10 * len(tool_calls)
        return {
            "id": f"chatcmpl-fake-{rec.index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": rec.body.get("model") or self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
