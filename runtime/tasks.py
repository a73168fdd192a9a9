"""Letting go of a background task whose outcome no one will read."""

from __future__ import annotations

import asyncio


def let_go(task: asyncio.Future) -> None:
    """Cancel `task` and mark its outcome as seen.

    A Temporal call that is already failing in the core can still end with its
    error instead of the cancellation; without a reader asyncio would print that
    error as a traceback ("Task exception was never retrieved")."""
    task.cancel()
    task.add_done_callback(_seen)


def _seen(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()
