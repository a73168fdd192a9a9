"""A stdio MCP server as a transport: its process, and JSON-RPC lines on its pipes.

The SDK has a stdio transport, but it hands the server the worker's USER,
SHELL and more, and kills the server's process group only when the server
outlives its stdin. Here the server gets PATH, HOME and LANG plus its own
"env" from mcp.json (never the worker's keys), and its whole process group is
killed when the connection closes, so nothing it started outlives it. What
it writes to stderr goes into the worker's log quoted, a line at a time, so no
escape sequence of the server's reaches the operator's terminal.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress

import anyio
import mcp_types
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from activities.mcp.limits import MAX_MESSAGE_BYTES, Guard, larger_than
from config.mcp_config import McpServerSettings

log = logging.getLogger(__name__)

INHERITED_VARIABLES = ("PATH", "HOME", "LANG")
"""The worker's variables a server gets: enough to find programs and write caches."""
EXIT_GRACE_SECONDS = 1.0
"""After its stdin closes, how long a server may take to exit on its own."""
REAP_SECONDS = 5.0
"""After the kill: only a process stuck in the kernel takes longer."""
DRAIN_SECONDS = 1.0
"""After the kill: what is left in the server's pipe is read this long at most."""
_EXIT_POLL_SECONDS = 0.02
MAX_LOG_LINE_BYTES = 4096
"""A line of the server's stderr as one log line; a longer one is split."""
LOG_LINE_CHARS = 300
"""What the log shows of one such line."""

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
_GONE = (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)


def server_environment(extra: Mapping[str, str]) -> dict[str, str]:
    env = {name: os.environ[name] for name in INHERITED_VARIABLES if name in os.environ}
    env.update(extra)
    return env


@asynccontextmanager
async def stdio_transport(settings: McpServerSettings, guard: Guard) -> AsyncIterator[Streams]:
    """The server's pipes as streams of messages. A line over MAX_MESSAGE_BYTES
    ends them (guard.refuse is told first); blank lines and others that are
    not JSON-RPC are read no faster than guard.unasked lets (the messages
    themselves are metered by the link)."""
    assert settings.command is not None
    process = await anyio.open_process(
        [settings.command, *settings.args],
        env=server_environment(settings.env),
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, killed as one at close
    )
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        assert process.stdout is not None and process.stdin is not None and process.stderr is not None
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read_messages, process.stdout, to_session, guard)
            tasks.start_soon(_forward_log, process.stderr, guard)
            tasks.start_soon(_write_messages, process.stdin, from_session)
            try:
                yield from_server, to_server
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (from_server, to_server, to_session, from_session):
                await stream.aclose()


async def _read_messages(
    stdout: ByteReceiveStream,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    guard: Guard,
) -> None:
    lines = BufferedByteReceiveStream(stdout)
    async with sink:
        while True:
            try:
                line = await lines.receive_until(b"\n", MAX_MESSAGE_BYTES)
            except anyio.DelimiterNotFound:
                guard.refuse(larger_than(MAX_MESSAGE_BYTES))
                return
            except _GONE:
                return
            if not line.strip():
                await guard.unasked.take()
                continue
            try:
                message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValueError:
                # Some servers log to stdout; such a line is not the protocol's.
                log.debug("skipped a line that is not JSON-RPC from an MCP server: %.200r", line)
                await guard.unasked.take()
                continue
            try:
                await sink.send(SessionMessage(message))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


async def _forward_log(stderr: ByteReceiveStream, guard: Guard) -> None:
    """The server's stderr into the worker's log, each line quoted (repr) and
    cut, read no faster than guard.unasked lets: a server that writes it
    without end costs the worker little, and never prints on its terminal."""
    pending = b""
    with suppress(*_GONE):
        async for chunk in stderr:
            *lines, pending = (pending + chunk).split(b"\n")
            if len(pending) > MAX_LOG_LINE_BYTES:
                lines.append(pending)
                pending = b""
            await guard.unasked.take(1 + len(lines))
            for line in lines:
                _log_line(guard.unasked.server, line)
    _log_line(guard.unasked.server, pending)


def _log_line(server: str, line: bytes) -> None:
    text = line.decode("utf-8", "replace").rstrip()
    if text:
        log.info("MCP server %s said: %.*r", server, LOG_LINE_CHARS, text)


async def _write_messages(stdin: ByteSendStream, source: MemoryObjectReceiveStream[SessionMessage]) -> None:
    async with source:
        async for item in source:
            data = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
            try:
                await stdin.send(data.encode("utf-8"))
            except _GONE:
                return


async def _stop(process: Process) -> None:
    """Closes the server's stdin, waits a moment, then kills its process group."""
    assert process.stdin is not None and process.stdout is not None
    with suppress(*_GONE):
        await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE_SECONDS):
        while process.returncode is None:
            await anyio.sleep(_EXIT_POLL_SECONDS)
    # Even after the server exited: what it started is still in its group.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(REAP_SECONDS):
        await process.wait()
    if process.returncode is None:
        log.warning("MCP server process %d is still alive after SIGKILL", process.pid)
    # Read what is left: a pipe whose reading was paused with data in it (a
    # server that wrote faster than it was read) would never be closed.
    with suppress(*_GONE), anyio.move_on_after(DRAIN_SECONDS):
        while await process.stdout.receive():
            pass
    with suppress(*_GONE):
        await process.stdout.aclose()
    if process.stderr is not None:
        with suppress(*_GONE):
            await process.stderr.aclose()
