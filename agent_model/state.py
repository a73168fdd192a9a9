"""Lifecycle of an agent run."""

from enum import Enum


class AgentState(str, Enum):
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    ERROR = "ERROR"
    CANCELLED = "CANCELLED"


class StopReason(str, Enum):
    """Why a run stopped; kept in the result so callers can tell outcomes apart."""

    TERMINATED = "terminated"  # the model called terminate(status=success)
    GAVE_UP = "gave_up"  # the model called terminate(status=failure)
    ANSWERED = "answered"  # the model answered without a tool call (AUTO mode)
    MAX_STEPS = "max_steps"
    BUDGET = "budget"  # the run's token or cost budget was spent before a think
    TOKEN_LIMIT = "token_limit"
    REPLY_TOO_LARGE = "reply_too_large"  # the model's reply was over the think activity's size limit
    CONTENT_FILTERED = "content_filtered"  # the provider withheld the model's reply
    EMPTY_REPLY = "empty_reply"  # the model replied with neither text nor a tool call, again after a reminder
    ERROR = "error"
    CANCELLED = "cancelled"

    @property
    def succeeded(self) -> bool:
        return self in (StopReason.TERMINATED, StopReason.ANSWERED)
