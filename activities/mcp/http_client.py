"""The HTTP client of the SSE and streamable-HTTP transports, bounded.

Requests go only to the server's own origin, so the headers of mcp.json
(Authorization...) never reach another one whatever a redirect says: the
SDK follows no redirect across origins, and this holds even if it did.
Replies are asked for uncompressed and a compressed one is refused (its size
is unknown until it is decoded). Reading a reply stops at its bound: a whole
body, or one event of an event stream (a stream may stay open for hours and
carry many replies). Both are event hooks, so they hold behind a proxy too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from activities.mcp.limits import Guard, larger_than

EVENT_ENDS = (b"\n\n", b"\n\r", b"\r\r")
"""Every blank line (the end of an event) holds one of these, whatever mix of
CR, LF and CRLF the server ends its lines with."""


class RefusedRequest(httpx2.TransportError):
    """A request to another origin than the server's: it was not sent."""


class RefusedReply(httpx2.TransportError):
    """Reading a reply stopped at a bound."""


def bounded_client(
    url: str, *, headers: dict[str, str] | None, timeout: httpx2.Timeout, limit: int, guard: Guard
) -> httpx2.AsyncClient:
    """A client for the MCP server at `url`: to its origin only, each reply
    read up to `limit` bytes (guard.refuse is told when one is refused), the
    events of event streams no faster than guard.events lets."""
    server = httpx2.URL(url)
    sent = httpx2.Headers(headers or {})
    sent["Accept-Encoding"] = "identity"

    async def only_to_the_server(request: httpx2.Request) -> None:
        if not same_origin(server, request.url):
            where = request.url.copy_with(userinfo=b"", query=None, fragment=None)
            raise RefusedRequest(f"refused to send an MCP request to {where}: not the server's origin", request=request)

    async def bounded_reply(response: httpx2.Response) -> None:
        assert isinstance(response.stream, httpx2.AsyncByteStream)  # an AsyncClient's replies always are
        response.stream = _BoundedBody(response.stream, response.headers, limit, guard)

    return httpx2.AsyncClient(
        headers=sent,
        timeout=timeout,
        follow_redirects=False,
        event_hooks={"request": [only_to_the_server], "response": [bounded_reply]},
    )


def same_origin(server: httpx2.URL, url: httpx2.URL) -> bool:
    """`url` is on the server's origin, or is its https upgrade on the default
    ports (a redirect the SDK follows, and safer than the server's own)."""
    if (url.scheme, url.host, url.port) == (server.scheme, server.host, server.port):
        return True
    upgrade = server.scheme == "http" and url.scheme == "https"
    return upgrade and url.host == server.host and server.port is None and url.port is None


class _BoundedBody(httpx2.AsyncByteStream):
    """A reply's body, read up to its bound: the whole body, or each event of an event stream."""

    def __init__(self, inner: httpx2.AsyncByteStream, headers: httpx2.Headers, limit: int, guard: Guard) -> None:
        self._inner = inner
        self._limit, self._guard = limit, guard
        self._events = headers.get("content-type", "").partition(";")[0].strip().lower() == "text/event-stream"
        encoding = headers.get("content-encoding", "").strip().lower()
        declared = headers.get("content-length", "")
        self._problem = ""
        if encoding not in ("", "identity"):
            self._problem = f"a compressed reply (Content-Encoding: {encoding[:40]}) although it was asked for none"
        elif not self._events and declared.isdigit() and int(declared) > limit:
            self._problem = larger_than(limit)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._problem:
            self._stop(self._problem)
        size, last = 0, b""
        async for chunk in self._inner:
            if self._events:
                joined = last + chunk
                end = max(joined.rfind(mark) for mark in EVENT_ENDS)
                size = len(joined) - end - 2 if end >= 0 else size + len(chunk)
                last = joined[-1:]
                if end >= 0:
                    await self._guard.events.take(sum(joined.count(mark) for mark in EVENT_ENDS))
            else:
                size += len(chunk)
            if size > self._limit:
                self._stop(larger_than(self._limit))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _stop(self, reason: str) -> None:
        self._guard.refuse(reason)
        raise RefusedReply(f"the MCP server sent {reason}; reading stopped")
