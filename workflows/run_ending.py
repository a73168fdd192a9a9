"""How an agent run's loop learns that it ends: the exceptions it raises inside
itself, and how a failure or a cancellation is read."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import CancelledError

from agent_model.state import AgentState, StopReason


class RunEnded(Exception):
    """Raised inside the loop to end the run with a reason."""

    def __init__(self, reason: StopReason, note: str | None = None, state: AgentState = AgentState.FINISHED) -> None:
        self.reason, self.note, self.state = reason, note, state


class Cancelled(Exception):
    """Raised inside the loop once a requested cancellation stops the run."""


def cancel_requested() -> bool:
    """True once the run was asked to stop; the SDK remembers it even when the
    call in flight then completed."""
    return workflow.cancellation_reason() is not None


def stop_if_cancelled() -> None:
    if cancel_requested():
        raise Cancelled()


def root_message(error: BaseException) -> str:
    while error.__cause__ is not None:
        error = error.__cause__
    return str(error) or error.__class__.__name__


def is_cancellation(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, (CancelledError, asyncio.CancelledError)):
            return True
        error = error.__cause__
    return False
