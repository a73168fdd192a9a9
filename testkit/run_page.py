"""The run page served in this process, and a raw HTTP client for it: tests
and the docs' screenshot script talk to the real server (guard, routes,
events) over a socket, with whatever headers they choose."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode

from temporalio.client import Client

from config.settings import Settings
from runtime.run_page.app import RunPageApp
from runtime.run_page.guard import Guard
from runtime.run_page.http_server import HttpServer


async def no_worker_needed(run_id: str) -> None:
    """The tests run their own worker."""


@dataclass
class Page:
    guard: Guard
    app: RunPageApp

    @property
    def port(self) -> int:
        return self.guard.port

    @property
    def origin(self) -> str:
        return self.guard.origin

    @property
    def cookie(self) -> str:
        return f"{self.guard.cookie_name}={self.guard.token}"

    def link(self) -> str:
        return self.guard.token_link()


@contextlib.asynccontextmanager
async def serving_page(
    client: Client, settings: Settings, ensure_worker: Callable[[str], Awaitable[None]] = no_worker_needed
) -> AsyncIterator[Page]:
    """The page on 127.0.0.1 at a free port, until the block ends."""
    guard = Guard("127.0.0.1", 0)
    app = RunPageApp(client, settings, guard, ensure_worker)
    server = HttpServer(app.handle, app.finish)
    await server.listen("127.0.0.1", 0)
    guard.port = server.port
    try:
        yield Page(guard, app)
    finally:
        await server.close()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    cookies: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


async def request(
    page: Page, method: str, path: str, *, headers: dict[str, str] | None = None, form: dict[str, str] | None = None,
    body: bytes | None = None, cookie: bool = True, same_origin: bool = True, host: str | None = None,
) -> Answer:
    """One request to the page; by default it carries the cookie, the page's
    Host and, for a POST, its Origin, as the page's own browser would."""
    sent = {"Host": host or f"127.0.0.1:{page.port}"}
    if cookie:
        sent["Cookie"] = page.cookie
    if method == "POST" and same_origin:
        sent["Origin"] = page.origin
    if form is not None:
        body = urlencode(form).encode()
        sent["Content-Type"] = "application/x-www-form-urlencoded"
    if body is not None:
        sent["Content-Length"] = str(len(body))
    sent.update(headers or {})
    reader, writer = await asyncio.open_connection("127.0.0.1", page.port)
    try:
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent.items()) + "\r\n"
        writer.write(head.encode("latin-1") + (body or b""))
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()
    return parse_answer(raw)


def parse_answer(raw: bytes) -> Answer:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers: dict[str, str] = {}
    cookies = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "set-cookie":
            cookies.append(value.strip())
        headers[name.strip().lower()] = value.strip()
    return Answer(status, headers, body, cookies)


async def events(page: Page, run_id_path: str, until: Callable[[list[tuple[str, str]]], bool], timeout: float = 60,
                 headers: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(event name, data) of the run's event stream as they come, until `until` holds for them (or it ends)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", page.port)
    sent = {"Host": f"127.0.0.1:{page.port}", "Cookie": page.cookie, "Accept": "text/event-stream", **(headers or {})}
    writer.write((f"GET {run_id_path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent.items()) + "\r\n").encode())
    await writer.drain()
    seen: list[tuple[str, str]] = []
    try:
        async with asyncio.timeout(timeout):
            head = await reader.readuntil(b"\r\n\r\n")
            assert b" 200 " in head.split(b"\r\n")[0], head
            while not until(seen):
                block = await reader.readuntil(b"\n\n")
                name, data = "message", []
                for line in block.decode().split("\n"):
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        data.append(line[6:])
                if data or name != "message":
                    seen.append((name, "\n".join(data)))
                if name == "end":
                    break
    finally:
        writer.close()
    return seen


def run_path(run_id: str, *rest: str) -> str:
    from runtime.run_page.html_text import run_url

    return run_url(run_id, *rest)


def text_of(markup: str) -> str:
    """The page's text without tags (entities left as they are)."""
    return re.sub(r"<[^>]+>", " ", markup)
