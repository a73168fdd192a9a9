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
from contextvars import ContextVar
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
DOING_CHARACTERS = 200
"""Of a line saying what the activity is doing, sent with its heartbeats."""

_doing: ContextVar[list[str] | None] = ContextVar("doing", default=None)
"""The line of the innermost `heartbeating()` block, shared with its beat task."""


def say_doing(text: str) -> None:
    """Tell whoever follows the run what this activity is doing now (one short
    line, e.g. which search engine it asks): it rides on the heartbeats, so
    the starter shows it from the server's view of the activity
    (runtime/activity_notice.py) wherever the worker runs. Outside a
    `heartbeating()` block it does nothing."""
    holder = _doing.get()
    if holder is None:
        return
    holder[0] = " ".join(text.split())[:DOING_CHARACTERS]
    if activity.in_activity():
        activity.heartbeat(holder[0])


def beat_interval(heartbeat_timeout: timedelta | None) -> float:
    """Seconds between beats for an activity with `heartbeat_timeout` (None: none set)."""
    if heartbeat_timeout is None or heartbeat_timeout <= timedelta(0):
        return MAX_INTERVAL
    return min(MAX_INTERVAL, max(MIN_INTERVAL, heartbeat_timeout.total_seconds() / BEATS_PER_TIMEOUT))


@contextlib.asynccontextmanager
async def heartbeating(*details: Any, on_beat: Callable[[], None] | None = None) -> AsyncIterator[None]:
    """Heartbeats (with `details`) while the body runs, the first after one
    interval; `on_beat` is called at once and at every beat (the process tool
    renews its guard's lease there). Outside an activity only `on_beat` runs,
    every MAX_INTERVAL."""
    # A local activity has no heartbeat: its workflow task's worker keeps it alive.
    inside = activity.in_activity() and not activity.info().is_local
    if not inside and on_beat is None:
        yield
        return
    interval = beat_interval(activity.info().heartbeat_timeout) if inside else MAX_INTERVAL
    doing = [""]
    entered = _doing.set(doing)

    async def beat() -> None:
        first = True
        while True:
            # Not at once: each beat is a write on the server, and most calls
            # (a think, an editor call) end before the first interval does.
            if inside and not first:
                activity.heartbeat(*((doing[0],) if doing[0] else details))
            if on_beat is not None:
                on_beat()
            first = False
            await asyncio.sleep(interval)

    beats = asyncio.create_task(beat())
    try:
        yield
    finally:
        beats.cancel()
        _doing.reset(entered)
        await asyncio.wait({beats})  # never raises: a cancellation of the body still propagates
