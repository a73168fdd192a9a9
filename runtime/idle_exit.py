"""When a worker started with --idle-exit has no run to serve any more.

The worker a starter starts for its runs (runtime/detached_worker.py) must
outlive the starter but not the runs: it asks the server's visibility, every
few seconds, how many runs are open on its task queue, and stops once none has
been for the idle time. A run that waits for an answer is open, so its worker
stays; a server that does not answer has no run for it either.
"""

from __future__ import annotations

import asyncio
import logging
import time

from temporalio.client import Client
from temporalio.service import RPCError

CHECK_EVERY = 5.0
"""Longest pause between two counts of the open runs."""


def open_runs_query(task_queue: str) -> str:
    """The visibility query for the runs open on `task_queue`."""
    quoted = task_queue.replace("\\", "\\\\").replace('"', '\\"')
    return f'TaskQueue = "{quoted}" AND ExecutionStatus = "Running"'


async def open_runs(client: Client, task_queue: str) -> int:
    try:
        return (await client.count_workflows(open_runs_query(task_queue))).count
    except RPCError as e:
        logging.info("idle check: cannot count the open runs (%s); counting none", e.message)
        return 0


async def wait_until_idle(client: Client, task_queue: str, idle_seconds: float) -> None:
    """Return once no run has been open on `task_queue` for `idle_seconds`."""
    pause = min(CHECK_EVERY, max(0.2, idle_seconds / 4))
    quiet_since = time.monotonic()
    while True:
        await asyncio.sleep(pause)
        if await open_runs(client, task_queue):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= idle_seconds:
            logging.info("no run open on task queue %s for %g s: exiting (--idle-exit)", task_queue, idle_seconds)
            return
