"""What an MCP server sends the worker is bounded (activities/mcp/limits.py),
against servers that misbehave on purpose (testkit/hostile_mcp.py): a reply
over the size bound fails its call with an observation and is not read
whole, over stdio, SSE and streamable HTTP; a server that floods the worker
is read at a bounded rate; headers never reach another origin."""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import pytest

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -r requirements.txt)")
from activities.mcp.http_client import RefusedRequest, bounded_client
from activities.mcp.limits import MAX_MESSAGE_BYTES, UNASKED_BURST, UNASKED_PER_SECOND, Guard
from activities.mcp.link import HTTP_TIMEOUT, Link, McpUnavailable
from activities.mcp.pool import McpPool
from config.mcp_config import McpServerSettings
from testkit.e2e import wait_until
from testkit.fake_web import Answer, FakeWeb
from testkit.hostile_mcp import CHUNK, ENDLESS, HOSTILE_STDIO_ARGS, STDERR_LINE, HostileHttpMcp
from testkit.mcp_servers import HttpMcpServer
from tests.test_mcp_client import call

HOSTILE_STDIO = McpServerSettings(kind="stdio", command=sys.executable, args=tuple(HOSTILE_STDIO_ARGS))
SLACK = 16 * CHUNK
"""What the kernel's socket buffers hold besides what the client read."""
FLOOD_WINDOW_SECONDS = 2.0
SECRET = "Bearer s3cr3t"


@pytest.fixture(scope="module")
def hostile_http():
    with HostileHttpMcp() as server:
        yield server


# --- one reply over the bound ------------------------------------------------


@pytest.mark.parametrize("tool", ["huge_json", "huge_event", "huge_declared"])
async def test_an_endless_http_reply_fails_its_call_and_is_not_read_whole(hostile_http, tool):
    pool = McpPool({"web": McpServerSettings(kind="http", url=hostile_http.url)})
    try:
        failed = await call(pool, "web", tool)
        await wait_until(lambda: tool in hostile_http.ended, 30, f"the server to stop writing {tool}")
        assert tool not in hostile_http.finished
        assert hostile_http.written[tool] < MAX_MESSAGE_BYTES + SLACK < ENDLESS
        assert failed.error and "sent a reply larger than 32 MiB" in failed.output and tool in failed.output
        assert (await call(pool, "web", "add", a=2, b=3)).output == "5"  # on a new connection
    finally:
        await pool.close_all()


async def test_a_compressed_reply_is_refused(hostile_http):
    pool = McpPool({"web": McpServerSettings(kind="http", url=hostile_http.url)})
    try:
        failed = await call(pool, "web", "gzipped")
        assert failed.error and "compressed reply (Content-Encoding: gzip)" in failed.output
    finally:
        await pool.close_all()


async def test_an_sse_event_over_its_bound_fails_its_call():
    with HttpMcpServer("sse") as server:
        pool = McpPool({"old": McpServerSettings(kind="sse", url=server.url)})
        try:
            failed = await call(pool, "old", "flood", chars=2 * 1024 * 1024)
            assert failed.error and "sent a reply larger than 1 MiB" in failed.output
            assert (await call(pool, "old", "add", a=1, b=1)).output == "2"
        finally:
            await pool.close_all()


async def test_a_stdio_line_over_the_bound_fails_its_call():
    pool = McpPool({"local": HOSTILE_STDIO})
    try:
        failed = await call(pool, "local", "long_line", size=MAX_MESSAGE_BYTES + 4 * CHUNK)
        assert failed.error and "sent a reply larger than 32 MiB" in failed.output
        assert (await call(pool, "local", "add", a=1, b=1)).output == "2"  # a restarted server
    finally:
        await pool.close_all()


async def test_a_stdio_servers_stderr_reaches_the_log_quoted_and_never_the_terminal(caplog, capfd):
    """What a server writes to stderr (escape sequences, then a megabyte with
    no newline) is log lines that quote it, each cut; nothing of it is
    written to the worker's own stderr, the operator's terminal."""
    pool = McpPool({"loud": HOSTILE_STDIO})
    try:
        with caplog.at_level(logging.INFO, logger="activities.mcp.stdio"):
            assert (await call(pool, "loud", "shout", count=3, size=CHUNK)).output == "shout done"
            said = lambda: [r.getMessage() for r in caplog.records if "said" in r.getMessage()]  # noqa: E731
            await wait_until(lambda: len(said()) >= 4, 20, "the server's stderr in the log")
    finally:
        await pool.close_all()
    assert said()[0] == f"MCP server loud said: {STDERR_LINE!r}"
    assert all("\x1b" not in line and "\x9b" not in line and len(line) < 400 for line in said())
    assert "\x1b" not in capfd.readouterr().err


# --- floods ------------------------------------------------------------------


async def flooded(tool: str, count: int = 20_000) -> tuple[int, float, bool]:
    """Changes heard, seconds watched, and whether the server could write its
    whole flood, while the hostile server runs `tool` for FLOOD_WINDOW_SECONDS
    (or until the changes heard break the throttle's bound)."""
    changes = 0

    def changed() -> None:
        nonlocal changes
        changes += 1

    link = Link("flood", HOSTILE_STDIO, changed)
    try:
        client = await link.client()
        began = time.monotonic()
        flood = asyncio.create_task(client.call_tool(tool, {"count": count}))
        while time.monotonic() - began < FLOOD_WINDOW_SECONDS and not flood.done():
            if changes > UNASKED_BURST + UNASKED_PER_SECOND * (time.monotonic() - began) + 1:
                break
            await asyncio.sleep(0.05)
        watched, done = time.monotonic() - began, flood.done()
        flood.cancel()
        return changes, watched, done
    finally:
        link.close()
        await link.ended.wait()


async def test_a_flood_of_tools_changed_is_read_at_a_bounded_rate(caplog):
    with caplog.at_level(logging.WARNING, logger="activities.mcp.limits"):
        changes, watched, done = await flooded("storm")
    assert 0 < changes <= UNASKED_BURST + UNASKED_PER_SECOND * watched + 1
    assert not done  # the server waits on its pipe
    slowed = [r for r in caplog.records if "sends more than" in r.getMessage()]
    assert len(slowed) == 1 and "flood" in slowed[0].getMessage()


@pytest.mark.parametrize("tool", ["babble", "echoes"])  # lines that are not JSON-RPC; answers to no request
async def test_a_flood_of_other_lines_is_read_at_a_bounded_rate(caplog, tool):
    with caplog.at_level(logging.WARNING, logger="activities.mcp.limits"):
        _, _, done = await flooded(tool)
    assert not done
    assert len([r for r in caplog.records if "sends more than" in r.getMessage()]) == 1


# --- headers and origins ------------------------------------------------------


@pytest.fixture
def redirected():
    """A server that answers every request with a 307 to another local port,
    and that other server."""
    elsewhere, first = FakeWeb().start(), FakeWeb().start()
    for path in ("/mcp", "/sse"):
        elsewhere.route(path, Answer(200, "{}", "application/json"))
        first.route(path, Answer(307, "", headers={"Location": elsewhere.url(path)}))
    yield first, elsewhere
    first.stop()
    elsewhere.stop()


@pytest.mark.parametrize("kind", ["http", "sse"])
async def test_mcp_headers_never_follow_a_redirect_to_another_origin(redirected, kind):
    first, elsewhere = redirected
    url = first.url("/sse" if kind == "sse" else "/mcp")
    pool = McpPool({"r": McpServerSettings(kind=kind, url=url, headers={"Authorization": SECRET})})
    try:
        with pytest.raises(McpUnavailable):
            await pool.list_tools("r")
    finally:
        await pool.close_all()
    assert first.seen and all(seen.headers.get("authorization") == SECRET for seen in first.seen)
    assert elsewhere.seen == []


async def test_the_client_sends_nothing_to_another_origin(redirected):
    first, elsewhere = redirected
    guard = Guard.for_server("r", lambda reason: None)
    async with bounded_client(first.url("/mcp"), headers={"Authorization": SECRET}, timeout=HTTP_TIMEOUT,
                              limit=MAX_MESSAGE_BYTES, guard=guard) as client:
        with pytest.raises(RefusedRequest, match="not the server's origin"):
            await client.post(first.url("/mcp"), json={}, follow_redirects=True)
        with pytest.raises(RefusedRequest):
            await client.get(elsewhere.url("/mcp"))
        assert (await client.get(first.url("/mcp"))).status_code == 307  # its own origin: sent
    assert elsewhere.seen == []
