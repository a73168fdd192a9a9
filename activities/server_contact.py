"""Whether this worker can reach the Temporal server, watched for its tool calls.

A worker cut off from the server (its link dark: no error, no answer) can
finish nothing it runs: neither heartbeats nor results arrive, and after the
heartbeat timeout the server gives the call to another worker, which waits
on the run's tool lock until this worker's attempt is gone. Left alone, that
attempt would run until the SDK gives up on its heartbeats (~9 s measured).
So the worker asks the server a trivial question every PING_INTERVAL; once
nothing has answered for LOST_AFTER seconds, the tool calls stop renewing
their leases and their guards kill them (activities/tools/process.py), so
the call is gone by the time the server retries it elsewhere. One log line
when contact is lost, one when it is back; nothing else changes: a poll
cannot bring work without the server, and work that arrives after contact
is back is valid.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextvars import ContextVar
from datetime import timedelta

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

log = logging.getLogger(__name__)

PING_INTERVAL = 1.0
"""Seconds between questions: one cheap RPC a second per worker process."""
LOST_AFTER = 2.0
"""Seconds without any answer after which the server counts as unreachable:
past the slowest answer of a loaded dev server (~0.3 s), and with the guard's
3 s lease the call ends about when the 4 s heartbeat timeout retries it."""


class ServerContact:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.last_answer = time.monotonic()
        self.lost = False

    def in_contact(self) -> bool:
        return time.monotonic() - self.last_answer < LOST_AFTER

    async def watch(self) -> None:
        """Runs for as long as the worker does."""
        while True:
            asked = time.monotonic()
            try:
                await self.client.workflow_service.get_system_info(
                    GetSystemInfoRequest(), timeout=timedelta(seconds=LOST_AFTER)
                )
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - any failure is "no answer"
                pass
            else:
                self.last_answer = time.monotonic()
            self._say_when_it_changed()
            await asyncio.sleep(max(0.0, PING_INTERVAL - (time.monotonic() - asked)))

    def _say_when_it_changed(self) -> None:
        address = self.client.service_client.config.target_host
        if not self.in_contact() and not self.lost:
            self.lost = True
            log.warning(
                "worker: no answer from the Temporal server at %s for %.0f s: its tool calls are stopped "
                "(they could not report back; the server retries them elsewhere)", address, LOST_AFTER,
            )
        elif self.in_contact() and self.lost:
            self.lost = False
            log.warning("worker: the Temporal server at %s answers again", address)


_current: ContextVar[ServerContact | None] = ContextVar("server_contact", default=None)
"""The contact of the worker whose tasks run in this context (runtime/worker_set.py
sets it before the worker starts, so its activities inherit it)."""


def watch_in_this_context(contact: ServerContact) -> None:
    _current.set(contact)


def server_in_contact() -> bool:
    """False once this worker's server has not answered for LOST_AFTER
    seconds; True where nothing watches (a tool called outside a worker)."""
    contact = _current.get()
    return contact is None or contact.in_contact()
