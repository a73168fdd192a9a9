"""The egress proxy: the only way out for tool code when `[tools] network = "internet"`.

Tool processes live in a network namespace that has nothing but its own
loopback. The worker runs this proxy on a UNIX socket that is bind-mounted into
the sandbox, where egress_forwarder.py exposes it as an HTTP proxy on
127.0.0.1. Every destination is checked here, in the worker, before any packet
leaves (egress_rules.py): tool code may reach public internet addresses on a
few ports and nothing else -- not the agent's control plane (the Temporal
frontend, the LLM endpoints, ...), not any address of the worker's own host,
not the LAN or the cluster's private ranges, not the link-local cloud
metadata service -- unless an operator's allow entry opens an origin.

Two request forms are understood:

- `CONNECT host:port` (HTTPS and anything else over TLS): answered with
  `200 Connection established`, then bytes flow both ways untouched.
- `METHOD http://host[:port]/path HTTP/1.x` (plain HTTP): the request is sent
  in origin form with `Connection: close`, so each proxy connection carries
  one request.

A host name is resolved once, every address it resolves to must be allowed,
and the connection goes to one of those checked addresses -- never to the name
again, so a second DNS answer (rebinding) cannot point somewhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import stat
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from activities.tools.addresses import normalize_host
from activities.tools.control_plane import ControlPlane, Endpoint, Resolver
from activities.tools.egress_rules import EgressPolicy, system_resolver

__all__ = [  # the rules, for the modules that import them from here
    "DestinationCheck", "DestinationRefused", "EgressPolicy", "EgressProxy", "Resolver", "normalize_host",
    "open_tcp", "system_resolver",
]

log = logging.getLogger(__name__)

Connector = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
"""(checked address, port) -> an open connection to it."""
DestinationCheck = Callable[[str, int], Awaitable[str]]
"""(normalized host, port) -> the address to connect to; raises DestinationRefused
to refuse. Replaces the proxy's own policy, ports and resolution."""

DEFAULT_PORTS = frozenset({80, 443})
MAX_HEADER_BYTES = 16 * 1024
HEADER_TIMEOUT = 10.0
"""Seconds a client has to send its whole request head."""
CONNECT_TIMEOUT = 10.0
"""Seconds for resolving the destination and connecting to it."""
IDLE_TIMEOUT = 120.0
"""Seconds a proxied connection may pass no bytes in either direction."""
MAX_CONNECTIONS = 64
CLOSE_GRACE = 10.0
"""Seconds a finished connection has to take its last buffered bytes."""
MAX_RESPONSE_HEAD_BYTES = 64 * 1024
CHUNK = 64 * 1024

HOP_BY_HOP = frozenset({
    "connection", "proxy-connection", "keep-alive", "proxy-authorization",
    "proxy-authenticate", "te", "upgrade",
})
TOKEN_CHARACTERS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
STATUS_TEXT = {
    200: "OK", 400: "Bad Request", 403: "Forbidden", 408: "Request Timeout",
    431: "Request Header Fields Too Large", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}


async def open_tcp(address: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(address, port, limit=MAX_RESPONSE_HEAD_BYTES)


class DestinationRefused(Exception):
    """Raised by a DestinationCheck: the proxy answers `status` with the message."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.status = status


class _Refused(Exception):
    """A request the proxy answers with an error status instead of forwarding."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _Idle(Exception):
    pass


@dataclass
class _Request:
    method: str
    host: str
    """Normalized: lower case, IPv6 without brackets."""
    port: int
    path: str
    """Origin form for plain HTTP; empty for CONNECT."""
    version: str
    headers: list[tuple[str, str]]


class EgressProxy:
    """An HTTP proxy on a UNIX socket that lets tool code reach the public
    internet and nothing else (see the module docstring)."""

    def __init__(
        self,
        *,
        allow: Iterable[str] = (),
        deny: Iterable[Endpoint | tuple[str, int]] = (),
        ports: Collection[int] = DEFAULT_PORTS,
        resolver: Resolver | None = None,
        connector: Connector | None = None,
        max_header_bytes: int = MAX_HEADER_BYTES,
        header_timeout: float = HEADER_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        check: DestinationCheck | None = None,
    ) -> None:
        """allow: allow entries (egress_rules.py); deny: the control plane's
        endpoints; ports: those public addresses may be reached on."""
        self.check = check
        self.policy = EgressPolicy(allow, ControlPlane(deny), public_ports=ports)
        self.resolver = resolver or system_resolver
        self.connector = connector or open_tcp
        self.max_header_bytes = max_header_bytes
        self.header_timeout = header_timeout
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.socket_path: str | None = None
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    @property
    def active_connections(self) -> int:
        return len(self._handlers)

    async def start(self, socket_path: str | os.PathLike, *, mode: int = 0o666) -> None:
        """Listen on `socket_path`. The default mode lets the sandbox's
        unprivileged user connect; keep the socket in a directory only the
        worker can enter and bind-mount the socket itself into the sandbox."""
        path = os.fspath(socket_path)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):  # left by a worker that died
                os.unlink(path)
        self._server = await asyncio.start_unix_server(self._serve, path, limit=self.max_header_bytes)
        os.chmod(path, mode)
        self.socket_path = path

    async def start_tcp(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on a TCP port of `host` instead of a socket file (for
        clients that run outside any sandbox); returns the port."""
        self._server = await asyncio.start_server(self._serve, host, port, limit=self.max_header_bytes)
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and cut every connection still open."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
        if self.socket_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None:  # accepted just before close()
            writer.close()
            return
        if len(self._handlers) >= self.max_connections:
            log.debug("egress: refused a connection, %d already open", len(self._handlers))
            _reply(writer, 503, "egress proxy: too many connections")
            _close_soon(writer)
            return
        # The work runs in a task of its own: close() cancels it, and asyncio
        # (3.11) logs an error when a client_connected_cb task is cancelled.
        work = asyncio.ensure_future(self._handle(reader, writer))
        self._handlers.add(work)
        try:
            await asyncio.wait({work})
        finally:
            work.cancel()
            self._handlers.discard(work)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        graceful = False
        try:
            request = await self._read_request(reader)
            upstream_reader, upstream = await self._connect(request)
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await self._splice(reader, writer, upstream_reader, upstream)
            else:
                upstream.write(_origin_form(request))
                await self._splice(reader, writer, upstream_reader, upstream, rewrite_response=True)
            graceful = True
        except _Refused as refusal:
            _reply(writer, refusal.status, refusal.reason)
            graceful = True
        except (ConnectionError, asyncio.IncompleteReadError, _Idle):
            pass
        except Exception:
            log.exception("egress: unexpected failure")
        finally:
            for end in (writer, upstream):
                if end is None:
                    continue
                if graceful:
                    _close_soon(end)
                else:  # idle, reset or cancelled: unsent bytes are moot
                    end.transport.abort()

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request:
        try:
            head = await asyncio.wait_for(_read_head(reader, self.max_header_bytes), self.header_timeout)
        except asyncio.TimeoutError:
            log.debug("egress: no request head within %g s", self.header_timeout)
            raise _Refused(408, f"egress proxy: request head not received within {self.header_timeout:g} s") from None
        except asyncio.LimitOverrunError:
            raise _Refused(431, f"egress proxy: request head larger than {self.max_header_bytes} bytes") from None
        return _parse_request(head)

    async def _connect(self, request: _Request) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = request.host, request.port
        if self.check is not None:
            return await self._connect_checked(host, port)
        try:
            refusal = self.policy.name_refusal(host, port)
            if refusal:
                raise _Refused(403, refusal)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.connect_timeout
            addresses = await self._resolve(host, deadline)
            await self.policy.prepare(self.resolver, max(0.1, deadline - loop.time()))
            refusal = self.policy.address_refusal(host, port, addresses)
            if refusal:
                raise _Refused(403, refusal)
            connection = await self._open(host, port, addresses, deadline)
        except _Refused as refused:
            log.debug("egress %s:%d refused: %s", host, port, refused.reason)
            raise
        log.debug("egress %s:%d allowed via %s", host, port, connection[1].get_extra_info("peername"))
        return connection

    async def _connect_checked(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """_connect with the caller's check deciding the destination's address."""
        assert self.check is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        try:
            try:
                address = await asyncio.wait_for(self.check(host, port), self.connect_timeout)
            except DestinationRefused as refused:
                raise _Refused(refused.status, str(refused)) from None
            except asyncio.TimeoutError:
                raise _Refused(504, f"egress proxy: checking {host} timed out") from None
            connection = await self._open(host, port, [address], deadline)
        except _Refused as refused:
            log.debug("egress %s:%d refused: %s", host, port, refused.reason)
            raise
        log.debug("egress %s:%d allowed via %s", host, port, address)
        return connection

    async def _resolve(self, host: str, deadline: float) -> list[str]:
        try:
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            pass
        loop = asyncio.get_running_loop()
        try:
            addresses = await asyncio.wait_for(self.resolver(host), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise _Refused(504, f"egress proxy: resolving {host} timed out") from None
        except (OSError, UnicodeError) as e:
            raise _Refused(502, f"egress proxy: cannot resolve {host} ({e})") from None
        if not addresses:
            raise _Refused(502, f"egress proxy: {host} resolves to no address")
        return list(addresses)

    async def _open(
        self, host: str, port: int, addresses: list[str], deadline: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        error: Exception | None = None
        for index, address in enumerate(addresses):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if index < len(addresses) - 1:
                # A black-holed first address (say IPv6 without a route) must
                # leave time for the next one.
                remaining /= 2
            try:
                return await asyncio.wait_for(self.connector(address, port), remaining)
            except (OSError, asyncio.TimeoutError) as e:
                error = e
        if error is None or isinstance(error, asyncio.TimeoutError):
            raise _Refused(504, f"egress proxy: connecting to {host} port {port} timed out")
        raise _Refused(502, f"egress proxy: cannot connect to {host} port {port} ({error})")

    async def _splice(
        self,
        client_reader: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream: asyncio.StreamWriter,
        *,
        rewrite_response: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        last_activity = loop.time()

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, response: bool) -> None:
            nonlocal last_activity
            if response:
                await _relay_response_heads(source, sink)
                last_activity = loop.time()
            while data := await source.read(CHUNK):
                last_activity = loop.time()
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof() and not sink.is_closing():
                try:
                    sink.write_eof()
                except OSError:
                    pass  # the other end went away already (ENOTCONN): nothing left to half-close

        async def watchdog() -> None:
            # Idle means neither direction moved (a stalled drain counts too):
            # one side may rightly be silent while the other streams a download.
            while (remaining := last_activity + self.idle_timeout - loop.time()) > 0:
                await asyncio.sleep(remaining)
            raise _Idle

        pumps = {
            asyncio.ensure_future(pump(client_reader, upstream, False)),
            asyncio.ensure_future(pump(upstream_reader, client, rewrite_response)),
        }
        guard = asyncio.ensure_future(watchdog())
        try:
            pending = set(pumps)
            while pending:
                done, _ = await asyncio.wait(pending | {guard}, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
                pending -= done
        finally:
            for task in (*pumps, guard):
                task.cancel()
            await asyncio.gather(*pumps, guard, return_exceptions=True)


async def _read_head(reader: asyncio.StreamReader, limit: int) -> list[bytes]:
    """The lines of a request or response head, up to the blank line; raises
    LimitOverrunError past `limit` bytes."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = await reader.readuntil(b"\n")
        size += len(line)
        if size > limit:
            raise asyncio.LimitOverrunError("head too large", size)
        if line in (b"\r\n", b"\n"):
            return lines
        lines.append(line.rstrip(b"\r\n"))


def _parse_request(head: list[bytes]) -> _Request:
    if not head:
        raise _Refused(400, "egress proxy: empty request")
    try:
        request_line = head[0].decode("ascii")
    except UnicodeDecodeError:
        raise _Refused(400, "egress proxy: malformed request line") from None
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not all(p.isprintable() and p for p in parts):
        raise _Refused(400, "egress proxy: malformed request line")
    method, target, version = parts
    headers = _parse_headers(head[1:])
    try:
        if method == "CONNECT":
            host, port = _split_authority(target, default_port=None)
            return _Request(method, host, port, "", version, headers)
        if target.startswith("/") or target == "*":
            raise _Refused(400, "egress proxy: send absolute URLs (http://host/path) or use CONNECT")
        url = urlsplit(target)
        if url.scheme.lower() != "http":
            raise _Refused(400, "egress proxy: only http:// URLs are forwarded; use CONNECT for https")
        host, port = _split_authority(url.netloc.rpartition("@")[2], default_port=80)
    except ValueError as e:
        raise _Refused(400, f"egress proxy: bad destination {target!r} ({e})") from None
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    return _Request(method, host, port, path, version, headers)


def _parse_headers(lines: list[bytes]) -> list[tuple[str, str]]:
    headers = []
    for raw in lines:
        line = raw.decode("latin-1")
        name, colon, value = line.partition(":")
        if not colon or not name or not all(c in TOKEN_CHARACTERS for c in name):
            raise _Refused(400, "egress proxy: malformed header line")
        headers.append((name, value.strip()))
    return headers


def _split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    if authority.startswith("["):
        host, bracket, rest = authority[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError("unbalanced brackets")
        port_text = rest[1:]
        if not isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            raise ValueError("brackets around a non-IPv6 address")
    else:
        host, colon, port_text = authority.rpartition(":")
        if not colon:
            host, port_text = authority, ""
    if not port_text:
        if default_port is None:
            raise ValueError("no port")
        port = default_port
    elif port_text.isdigit() and len(port_text) <= 5 and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise ValueError(f"bad port {port_text!r}")
    return normalize_host(host), port


def _origin_form(request: _Request) -> bytes:
    listed = {
        token.strip().lower()
        for name, value in request.headers if name.lower() in ("connection", "proxy-connection")
        for token in value.split(",")
    }
    host = f"[{request.host}]" if ":" in request.host else request.host
    authority = host if request.port == 80 else f"{host}:{request.port}"
    lines = [f"{request.method} {request.path} {request.version}", f"Host: {authority}"]
    lines += [
        f"{name}: {value}" for name, value in request.headers
        if name.lower() not in HOP_BY_HOP and name.lower() not in listed and name.lower() != "host"
    ]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _relay_response_heads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Interim (1xx) heads as they are -- a client waiting for 100 Continue
    must get it at once -- then the final head with Connection: close, so the
    client never sends a second request down this connection."""
    while True:
        try:
            lines = await _read_head(reader, MAX_RESPONSE_HEAD_BYTES)
        except asyncio.LimitOverrunError:
            raise _Refused(502, "egress proxy: the server's response head is too large") from None
        except asyncio.IncompleteReadError:
            raise _Refused(502, "egress proxy: the server closed the connection without answering") from None
        parts = lines[0].split(b" ", 2) if lines else []
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise _Refused(502, "egress proxy: the server did not answer with HTTP")
        if 100 <= int(parts[1]) < 200 and int(parts[1]) != 101:
            writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
            continue
        kept = [
            line for line in lines[1:]
            if line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive", b"proxy-connection")
        ]
        writer.write(b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n")
        return


def _close_soon(writer: asyncio.StreamWriter) -> None:
    """Close after the buffered bytes are sent -- but a peer that stops
    reading must not keep the transport (and a worker descriptor) forever."""
    writer.close()
    asyncio.get_running_loop().call_later(CLOSE_GRACE, writer.transport.abort)


def _reply(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = (reason + "\n").encode("utf-8", "replace")
    head = (
        f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode("ascii") + body)
