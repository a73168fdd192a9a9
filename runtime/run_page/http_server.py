"""A small HTTP/1.1 server on asyncio streams: one request per connection,
every part of a request bounded (line, headers, body) and read under a
timeout. It knows nothing of runs: a handler turns a Request into a Response,
whose body is bytes or, for Server-Sent Events, an async stream of chunks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

log = logging.getLogger(__name__)

LINE_LIMIT = 8 * 1024
"""Bytes of the request line and of each header line."""
HEADER_COUNT_LIMIT = 64
HEADER_BYTES_LIMIT = 32 * 1024
BODY_LIMIT = 1024 * 1024
"""Bytes of a request body: a form with a task of 100,000 characters, URL-encoded."""
HEAD_TIMEOUT = 10.0
"""Seconds a client has to send its request line and headers (a slow client holds a connection, no more)."""
BODY_TIMEOUT = 30.0
"""Seconds a client has to send its body once the headers are in."""
WRITE_TIMEOUT = 30.0
"""Seconds a response may take to drain to a client that reads slowly."""
CONNECTION_LIMIT = 64
"""Connections served at once; more are answered 503 at once."""

REASONS = {
    200: "OK", 303: "See Other", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    408: "Request Timeout", 411: "Length Required", 413: "Content Too Large", 415: "Unsupported Media Type",
    431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    """The raw path, still percent-encoded (a run id may hold a "/": its segment is %2F)."""
    query: dict[str, str]
    """Each query parameter's first value."""
    headers: dict[str, str]
    """Lower-cased names; a name sent twice is refused before a Request is made."""
    body: bytes = b""

    def segments(self) -> list[str]:
        """The path's segments, each decoded on its own."""
        return [unquote(part) for part in self.path.strip("/").split("/")] if self.path.strip("/") else []

    def form(self) -> dict[str, str]:
        """The URL-encoded body's fields (first value each); bad UTF-8 is replaced, not an error."""
        text = self.body.decode("utf-8", "replace")
        fields: dict[str, str] = {}
        for name, value in parse_qsl(text, keep_blank_values=True, max_num_fields=32):
            fields.setdefault(name, value)
        return fields


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    stream: AsyncIterator[bytes] | None = None
    """Sent after the headers, chunk by chunk, until it ends or the client goes."""


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


Handler = Callable[[Request], Awaitable[Response]]
Finisher = Callable[[Request | None, Response], Response]
"""Adds what every response carries (security headers) before it is sent."""


async def read_request(reader: asyncio.StreamReader) -> Request:
    """One request from the stream, within the bounds; BadRequest otherwise."""
    async with asyncio.timeout(HEAD_TIMEOUT):
        line = await _line(reader)
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise BadRequest(400, "not an HTTP/1.x request line")
        method, target, _ = parts
        headers: dict[str, str] = {}
        total = 0
        while True:
            header = await _line(reader)
            if not header:
                break
            total += len(header)
            if len(headers) >= HEADER_COUNT_LIMIT or total > HEADER_BYTES_LIMIT:
                raise BadRequest(431, "too many or too large headers")
            name, colon, value = header.partition(":")
            name = name.strip().lower()
            if not colon or not name or name != name.strip() or " " in name:
                raise BadRequest(400, "a malformed header line")
            if name in headers:
                raise BadRequest(400, f"the header {name} is sent twice")
            headers[name] = value.strip()
    if "transfer-encoding" in headers:
        raise BadRequest(501, "chunked or other transfer encodings are not taken; send Content-Length")
    body = b""
    length_text = headers.get("content-length")
    if length_text is not None:
        if not length_text.isdigit() or len(length_text) > 12:
            raise BadRequest(400, "a bad Content-Length")
        length = int(length_text)
        if length > BODY_LIMIT:
            raise BadRequest(413, f"the body is over {BODY_LIMIT} bytes")
        async with asyncio.timeout(BODY_TIMEOUT):
            body = await reader.readexactly(length)
    elif method == "POST":
        raise BadRequest(411, "a POST needs a Content-Length")
    if not target.startswith("/"):
        raise BadRequest(400, "the target must be a path")
    split = urlsplit(target)
    query: dict[str, str] = {}
    for name, value in parse_qsl(split.query, keep_blank_values=True, max_num_fields=16):
        query.setdefault(name, value)
    return Request(method=method, path=split.path, query=query, headers=headers, body=body)


async def _line(reader: asyncio.StreamReader) -> str:
    try:
        raw = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(431, "a line is too long") from None
    except asyncio.IncompleteReadError:
        raise BadRequest(400, "the request ended early") from None
    try:
        return raw.rstrip(b"\r\n").decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest(400, "a header that is not ASCII") from None


def head_bytes(response: Response) -> bytes:
    reason = REASONS.get(response.status, "Unknown")
    lines = [f"HTTP/1.1 {response.status} {reason}", f"Content-Type: {response.content_type}", "Connection: close"]
    if response.stream is None:
        lines.append(f"Content-Length: {len(response.body)}")
    lines += [f"{name}: {value}" for name, value in response.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def plain(status: int, text: str) -> Response:
    return Response(status=status, body=f"{text}\n".encode(), content_type="text/plain; charset=utf-8")


class HttpServer:
    """Serves `handler` on one listening socket until closed."""

    def __init__(self, handler: Handler, finish: Finisher) -> None:
        self.handler, self.finish = handler, finish
        self._slots = asyncio.Semaphore(CONNECTION_LIMIT)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def listen(self, host: str, port: int) -> None:
        """Bind now (OSError when the port is taken), serve from then on."""
        self._server = await asyncio.start_server(self._serve, host, port, limit=LINE_LIMIT)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)  # a client that never reads holds it no longer

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            if self._slots.locked():
                await self._send(writer, self.finish(None, plain(503, "too many connections; try again")))
                return
            async with self._slots:
                await self._exchange(reader, writer)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went, or was too slow: nothing to tell it
        except asyncio.CancelledError:
            # The server closes: end quietly (Python 3.11's streams log a handler that ends cancelled).
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request: Request | None = await read_request(reader)
        except BadRequest as e:
            await self._send(writer, self.finish(None, plain(e.status, str(e))))
            return
        except asyncio.TimeoutError:
            await self._send(writer, self.finish(None, plain(408, "the request took too long to arrive")))
            return
        assert request is not None
        try:
            response = await self.handler(request)
        except Exception:  # noqa: BLE001 - one bad request never stops the server
            log.exception("run page: a request failed")
            response = plain(500, "the page failed on this request; see the ui command's output")
        await self._send(writer, self.finish(request, response), reader)

    async def _send(
        self, writer: asyncio.StreamWriter, response: Response, reader: asyncio.StreamReader | None = None
    ) -> None:
        writer.write(head_bytes(response))
        if response.stream is None:
            writer.write(response.body)
            async with asyncio.timeout(WRITE_TIMEOUT):
                await writer.drain()
            return
        stream = response.stream
        # A client that closes its side ends the stream at once, not at the next write.
        gone = asyncio.ensure_future(reader.read(1) if reader is not None else asyncio.Event().wait())
        following: asyncio.Future | None = None
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                await writer.drain()
            chunks = aiter(stream)
            while True:
                following = asyncio.ensure_future(anext(chunks))
                done, _ = await asyncio.wait({following, gone}, return_when=asyncio.FIRST_COMPLETED)
                if following not in done:
                    return
                try:
                    chunk = following.result()
                except StopAsyncIteration:
                    return
                writer.write(chunk)
                async with asyncio.timeout(WRITE_TIMEOUT):
                    await writer.drain()
        finally:
            for pending in (following, gone):
                if pending is not None and not pending.done():
                    pending.cancel()
                    with contextlib.suppress(BaseException):
                        await pending
                elif pending is not None and not pending.cancelled():
                    pending.exception()  # retrieved: an ended stream's StopAsyncIteration is no error
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
