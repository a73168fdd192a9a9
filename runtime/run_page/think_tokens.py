"""The current think's tokens, for the run page's event stream: the one place
where live token streaming plugs in.

The worker publishes a think's tokens on a side channel while the think runs:
its live journal (activities/live_feed.py), read by
runtime/live_feed.follow_think(root, run_dir, step), which yields LiveEvents
with run_id, step, kind "think_started" | "token" | "think_ended", text,
channel, at. A page whose workspace root holds no journal (the worker is on
another machine, or `[live] stream = false`) shows no tokens; it never makes any up.

Losing the channel never touches the run: the page's steps come from the
workflow's queries, the tokens only fill the wait for the next step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.live_feed import follow_think

TOKEN_TEXT_LIMIT = 4096
"""Characters of one token event passed on (a model's token is a few)."""

TokenSource = Callable[[Path, str, int | None], AsyncIterator[Any]]
"""follow_think's shape: (workspace root, the run's directory name, the step or None for any) -> events."""

SOURCE: TokenSource | None = follow_think
"""Where the tokens come from; None: no tokens."""


@dataclass(frozen=True)
class ThinkEvent:
    """What the page is told of the current think."""

    step: int | None
    kind: str
    """think_started, token or think_ended."""
    text: str
    channel: str
    """Which part of the reply the text is (the content, or a reasoning channel)."""


KINDS = ("think_started", "token", "think_ended")


def available() -> bool:
    return SOURCE is not None


async def think_events(root: Path, run_dir: str, step: int | None = None) -> AsyncIterator[ThinkEvent]:
    """The run's think events from the source, each bounded; nothing without one."""
    if SOURCE is None:
        return
    async for event in SOURCE(root, run_dir, step):
        kind = getattr(event, "kind", None)
        if kind not in KINDS:
            continue
        event_step = getattr(event, "step", None)
        yield ThinkEvent(
            step=event_step if isinstance(event_step, int) else None,
            kind=kind,
            text=str(getattr(event, "text", "") or "")[:TOKEN_TEXT_LIMIT],
            channel=str(getattr(event, "channel", "") or "")[:40],
        )
