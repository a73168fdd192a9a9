"""What one MCP server may send the worker: how large one message may be, and
how fast it may send what the worker did not ask for (notifications, its own
requests, answers to no request, lines that are not JSON-RPC)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""One JSON-RPC message (a stdio line, an HTTP body, one event of an event
stream): a result with images fits; a larger one means a broken or hostile
server, and reading stops there."""
MAX_SSE_TRANSPORT_EVENT_BYTES = 1024 * 1024
"""One event on the (legacy) SSE transport: the SDK's sse_client stops there
and has no setting for it, so the worker's own bound is the same."""

UNASKED_PER_SECOND = 100
"""Messages a server sends unasked, sustained: logging and progress fit; past
it the worker reads that server more slowly (its pipe or socket fills, and
the server waits), so a flood costs the worker little, never a core."""
UNASKED_BURST = 200
EVENTS_PER_SECOND = 10 * UNASKED_PER_SECOND
"""Events of an HTTP event stream, answers included, before the SDK parses
them: a flood of empty events or comments never reaches the messages' meter."""

RefuseReply = Callable[[str], None]
"""Told why a transport stopped reading from the server (e.g. "a reply larger
than 32 MiB"), before the read fails."""


def larger_than(limit: int) -> str:
    return f"a reply larger than {limit / 2**20:g} MiB"


class Throttle:
    """A token bucket for what one connection reads: take() returns at once
    within the rate and burst, and past them waits until the debt is paid."""

    def __init__(
        self, server: str, what: str = "messages unasked", rate: float = UNASKED_PER_SECOND, burst: int = UNASKED_BURST
    ) -> None:
        self.server, self.what, self.rate, self.burst = server, what, rate, burst
        self._tokens = float(burst)
        self._at = time.monotonic()
        self.slowed = False
        """Whether the server went past the rate at least once (said once in the log)."""

    async def take(self, count: int = 1) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate) - count
        self._at = now
        if self._tokens >= 0:
            return
        if not self.slowed:
            self.slowed = True
            log.warning("MCP server %s sends more than %g %s a second; it is read at that rate", self.server, self.rate, self.what)
        await anyio.sleep(-self._tokens / self.rate)


@dataclass
class Guard:
    """One connection's bounds, as its transport and session reader hold them."""

    refuse: RefuseReply
    unasked: Throttle
    events: Throttle

    @classmethod
    def for_server(cls, server: str, refuse: RefuseReply) -> Guard:
        return cls(refuse, Throttle(server), Throttle(server, "events", EVENTS_PER_SECOND, 2 * EVENTS_PER_SECOND))
