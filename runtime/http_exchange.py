"""One HTTP/1.1 request and its response over asyncio streams, bounded: the
head to a few KiB, the body to what the caller allows, each read to a time.
Enough for a small local server (runtime/codec_server.py); one request per
connection, no keep-alive, no chunked bodies."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from http import HTTPStatus

HEAD_BYTES = 16 * 1024
"""Request line and headers; a browser's are well under 8 KiB."""
HEAD_SECONDS = 10.0
"""A client that has not sent its head by then is not one we wait for."""
BODY_SECONDS = 30.0
"""Megabytes over loopback take milliseconds; a stalled sender is dropped."""


class BadRequest(Exception):
    """A request refused before it is handled: its status and one line why."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Request:
    method: str
    path: str
    """The target without its query."""
    headers: dict[str, str]
    """Lower-case names; a header given twice is refused, not merged."""
    reader: asyncio.StreamReader = field(repr=False)

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    async def body(self, limit: int) -> bytes:
        """The body (Content-Length's bytes), refused over `limit` without reading it."""
        if self.header("transfer-encoding") is not None:
            raise BadRequest(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length, not chunked")
        length_text = self.header("content-length")
        if length_text is None:
            return b""
        if not length_text.isdigit():
            raise BadRequest(HTTPStatus.BAD_REQUEST, "Content-Length is not a number")
        length = int(length_text)
        if length > limit:
            raise BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is over {limit // 1024} KiB")
        try:
            return await asyncio.wait_for(self.reader.readexactly(length), BODY_SECONDS)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError):
            raise BadRequest(HTTPStatus.BAD_REQUEST, "the body ended before its Content-Length") from None


async def read_request(reader: asyncio.StreamReader) -> Request:
    """The next request's head. The reader's limit must be at least HEAD_BYTES."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
    except asyncio.LimitOverrunError:
        raise BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "the request's head is too large") from None
    except (asyncio.IncompleteReadError, asyncio.TimeoutError):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "no complete request head") from None
    if len(head) > HEAD_BYTES:
        raise BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "the request's head is too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "not an HTTP/1.x request line")
    method, target, _ = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        name = name.strip().lower()
        if not colon or not name or name != name.strip() or " " in name:
            raise BadRequest(HTTPStatus.BAD_REQUEST, "a malformed header line")
        if name in headers:
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"the header {name} is given twice")
        headers[name] = value.strip()
    return Request(method=method, path=target.split("?", 1)[0], headers=headers, reader=reader)


DISCARD_SECONDS = 5.0
"""How long a refused body is read and dropped, so its sender can read the refusal."""


async def discard_body(reader: asyncio.StreamReader, limit: int) -> None:
    """Read and drop what the client still sends, up to `limit` bytes or
    DISCARD_SECONDS: a body refused unread (413) would otherwise meet a closed
    socket, and the sender see a reset instead of the answer."""
    left = limit
    try:
        async with asyncio.timeout(DISCARD_SECONDS):
            while left > 0 and (chunk := await reader.read(min(left, 1 << 16))):
                left -= len(chunk)
    except (TimeoutError, ConnectionError):
        pass


async def write_response(
    writer: asyncio.StreamWriter,
    status: HTTPStatus,
    body: bytes = b"",
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    lines = [f"HTTP/1.1 {status.value} {status.phrase}", f"Content-Length: {len(body)}", "Connection: close"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()
