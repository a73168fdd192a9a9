"""`[session]`: the terms of the runs `chat` starts (agent_model/session.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agent_model.session import MESSAGE_LIMIT, QUEUE_LIMIT, SessionTerms


class SessionSettings(BaseModel):
    """`[session]`: how long a chat session waits for the next message, and
    what a message may be. The starter puts them in each new session's input."""

    model_config = ConfigDict(extra="forbid")

    idle_minutes: float = Field(30.0, gt=0, le=7 * 24 * 60, allow_inf_nan=False)
    """Minutes a session waits after a turn for the next message before it
    ends (it can still be resumed: `chat ID "..."` goes on in a new execution)."""
    max_queued: int = Field(QUEUE_LIMIT, ge=1, le=100)
    """Messages that may wait while a turn works; more are refused."""
    message_chars: int = Field(MESSAGE_LIMIT, ge=100, le=500_000)
    """Characters of one message; a longer one is refused."""

    def terms(self) -> SessionTerms:
        return SessionTerms(
            idle_seconds=self.idle_minutes * 60, max_queued=self.max_queued, message_limit=self.message_chars
        )
