"""One way for an activity to heartbeat while it waits: `async with heartbeating():`.

A heartbeat tells the server that the worker is alive, and its response is
the only way a cancellation reaches a running activity. So the cadence comes
from the activity's own heartbeat timeout (several beats fit in it, so a
stalled event loop or a lost beat is not taken for a dead worker), and is
never slower than MAX_INTERVAL, which bounds how long a cancelled run's call
goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

from temporalio import activity

BEATS_PER_TIMEOUT = 3
"""Beats within one heartbeat timeout: two may be lost before the server gives up."""
MAX_INTERVAL = 1.0
"""Seconds between beats at most: with the worker's max_heartbeat_throttle_interval
(1 s) a cancellation reaches the activity within about two seconds."""
MIN_INTERVAL = 0.1
"""Seconds between beats at least, whatever the timeout: beats cost a little CPU each."""


def beat_interval(heartbeat_timeout: timedelta | None) -> float:
    """Seconds between beats for an activity with `heartbeat_timeout` (None: none set)."""
    if heartbeat_timeout is None or heartbeat_timeout <= timedelta(0):
        return MAX_INTERVAL
    return min(MAX_INTERVAL, max(MIN_INTERVAL, heartbeat_timeout.total_seconds() / BEATS_PER_TIMEOUT))


@contextlib.asynccontextmanager
async def heartbeating(*details: Any, on_beat: Callable[[], None] | None = None) -> AsyncIterator[None]:
    """Heartbeats (with `details`) while the body runs, the first at once;
    `on_beat` is called at every beat too (the process tool renews its guard's
    lease there). Outside an activity only `on_beat` runs, every MAX_INTERVAL."""
    inside = activity.in_activity()
    if not inside and on_beat is None:
        yield
        return
    interval = beat_interval(activity.info().heartbeat_timeout) if inside else MAX_INTERVAL

    async def beat() -> None:
        while True:
            if inside:
                activity.heartbeat(*details)
            if on_beat is not None:
                on_beat()
            await asyncio.sleep(interval)

    beats = asyncio.create_task(beat())
    try:
        yield
    finally:
        beats.cancel()
        await asyncio.wait({beats})  # never raises: a cancellation of the body still propagates
