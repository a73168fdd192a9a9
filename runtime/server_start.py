"""Watching the embedded Temporal server that was just started until it
answers, and saying in one line why it never will when it exits first.

The dev server that cannot start writes its reason to its log and exits
within a second (a taken port: `can't use default UI port 8233 ...: bind:
address already in use`); waiting out a connect timeout would only hide it
behind the client's transport error.
"""

from __future__ import annotations

import asyncio
import re
import time

from runtime.connection import DEFAULT_PORT, port_answers
from runtime.embedded_server import EmbeddedStart, configured_ui_port
from runtime.terminal_text import inert
from runtime.user_errors import TemporalUnreachable

POLL_SECONDS = 0.1
TAKEN_PORT = re.compile(r"listen tcp \S*?:(\d{1,5}): bind: address already in use")
UI_PORT_LINE = re.compile(r"UI port (\d{1,5})")
CAUSE_CHARACTERS = 300
"""Of the log's line quoted when no known cause matches."""


async def wait_until_answering(start: EmbeddedStart, address: str, seconds: float) -> float:
    """Return once `address` accepts connections (the seconds it took); raise
    TemporalUnreachable with the cause when the server exits, or does not
    answer within `seconds`."""
    began = time.monotonic()
    while True:
        code = start.process.poll()
        if code is not None:
            raise TemporalUnreachable(start_failure(start.log_text(), code, str(start.log_path)))
        if await asyncio.to_thread(port_answers, address, 0.2):
            return time.monotonic() - began
        waited = time.monotonic() - began
        if waited > seconds:
            raise TemporalUnreachable(
                f"the embedded Temporal server was started but does not answer at {address} after {waited:.0f} s "
                f"(it runs as pid {start.process.pid}; its log: {start.log_path})"
            )
        await asyncio.sleep(POLL_SECONDS)


def start_failure(log: str, code: int, log_path: str) -> str:
    """One line for a server that exited at start, from what it logged."""
    taken = TAKEN_PORT.search(log) or UI_PORT_LINE.search(log)
    if taken is not None:
        return taken_port_line(int(taken.group(1)))
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith(("error", "fatal", "panic"))]
    said = (errors or lines or ["(nothing in its log)"])[-1][:CAUSE_CHARACTERS]
    return f"the embedded Temporal server exited at start (exit code {code}): {inert(said)} (its log: {log_path})"


def taken_port_line(port: int) -> str:
    if port == configured_ui_port():
        return (
            f"port {port} (the embedded Temporal server's Web UI) is in use by another program; "
            "set DURABLE_MANUS_UI_PORT to a free port, or stop that program"
        )
    if port == DEFAULT_PORT:
        return (
            f"port {port} (the embedded Temporal server's frontend) is in use by another program; stop it, "
            "or set TEMPORAL_ADDRESS to a Temporal server you run"
        )
    return f"port {port}, which the embedded Temporal server needs, is in use by another program; stop it and try again"
