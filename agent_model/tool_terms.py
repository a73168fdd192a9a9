"""A tool as a run started with it: the definition the model is shown and the
options its activity is scheduled with.

The starter writes these into the run's profile, so a later worker whose tool
file says otherwise (a reworded description, another timeout) changes new runs
only. What the tool does stays the worker's code, deployed like any activity.
"""

from __future__ import annotations

from datetime import timedelta
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType


class BadToolTerms(ValueError):
    """Terms no activity can be scheduled with (a run input made by hand): the
    SDK or the server would refuse the command on every workflow task."""


def _seconds(delta: timedelta | None) -> float | None:
    return None if delta is None else delta.total_seconds()


def _delta(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


LOST_WORKER_RESCHEDULES = 3
"""A call whose workers are lost this many times more in a row is reported to
the model: by then the cause is more likely the call (it wedges or kills its
worker) than bad luck."""
MAX_LOST_WORKER_RESCHEDULES = 20
"""Of a run input made by hand: more would keep a run on one call for hours."""


class ActivityTerms(BaseModel):
    """workflow.ActivityConfig as plain data that survives the run's input."""

    start_to_close_seconds: float
    heartbeat_seconds: float | None = None
    schedule_to_start_seconds: float | None = None
    maximum_attempts: int = 0
    initial_seconds: float = 1.0
    backoff: float = 2.0
    maximum_interval_seconds: float | None = None
    non_retryable: list[str] = []
    wait_for_cancellation: bool = True
    lost_worker_reschedules: int = 0
    """Times a call is scheduled again, its attempts counted afresh, when its
    last attempt ended because its worker went silent (a heartbeat or
    schedule-to-start timeout): a lost worker is not the tool's failure. 0 in
    inputs written before it: those calls fail as they did."""

    @classmethod
    def of(cls, config: workflow.ActivityConfig) -> ActivityTerms:
        start_to_close = _seconds(config.get("start_to_close_timeout"))
        if start_to_close is None:
            raise ValueError("a tool's activity config must bound start_to_close")
        retry = config.get("retry_policy") or RetryPolicy()
        return cls(
            start_to_close_seconds=start_to_close,
            heartbeat_seconds=_seconds(config.get("heartbeat_timeout")),
            schedule_to_start_seconds=_seconds(config.get("schedule_to_start_timeout")),
            maximum_attempts=retry.maximum_attempts,
            initial_seconds=retry.initial_interval.total_seconds(),
            backoff=retry.backoff_coefficient,
            maximum_interval_seconds=_seconds(retry.maximum_interval),
            non_retryable=list(retry.non_retryable_error_types or ()),
            wait_for_cancellation=config.get("cancellation_type") == ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            lost_worker_reschedules=LOST_WORKER_RESCHEDULES if config.get("heartbeat_timeout") is not None else 0,
        )

    def problem(self) -> str | None:
        """What makes these terms unschedulable, or None."""
        if not self.start_to_close_seconds > 0:
            return "start_to_close_seconds must be more than 0"
        for name in ("heartbeat_seconds", "schedule_to_start_seconds", "maximum_interval_seconds"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                return f"{name} must be more than 0"
        if not 0 <= self.lost_worker_reschedules <= MAX_LOST_WORKER_RESCHEDULES:
            return f"lost_worker_reschedules must be from 0 to {MAX_LOST_WORKER_RESCHEDULES}"
        if self.maximum_attempts < 0:
            return "maximum_attempts must not be negative (0: no limit)"
        if not self.initial_seconds >= 0:
            return "initial_seconds must not be negative"
        if not self.backoff >= 1:
            return "backoff must be at least 1"
        if self.maximum_interval_seconds is not None and self.maximum_interval_seconds < self.initial_seconds:
            return "maximum_interval_seconds must not be less than initial_seconds"
        return None

    def config(self) -> workflow.ActivityConfig:
        """The SDK's config; raises BadToolTerms for terms no activity can be scheduled with."""
        problem = self.problem()
        if problem is not None:
            raise BadToolTerms(problem)
        config = workflow.ActivityConfig(
            start_to_close_timeout=timedelta(seconds=self.start_to_close_seconds),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=self.initial_seconds),
                backoff_coefficient=self.backoff,
                maximum_interval=_delta(self.maximum_interval_seconds),
                maximum_attempts=self.maximum_attempts,
                non_retryable_error_types=self.non_retryable or None,
            ),
            cancellation_type=(
                ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                if self.wait_for_cancellation
                else ActivityCancellationType.TRY_CANCEL
            ),
        )
        if self.heartbeat_seconds is not None:
            config["heartbeat_timeout"] = timedelta(seconds=self.heartbeat_seconds)
        if self.schedule_to_start_seconds is not None:
            config["schedule_to_start_timeout"] = timedelta(seconds=self.schedule_to_start_seconds)
        return config

    def local_config(self) -> workflow.LocalActivityConfig:
        """The SDK's config for a call run as a local activity: the same bound
        and retries; a local activity has no heartbeat or queue timeout (it runs
        in the workflow task's worker, which keeps the task alive meanwhile)."""
        config = self.config()
        return workflow.LocalActivityConfig(
            start_to_close_timeout=config.get("start_to_close_timeout"),
            retry_policy=config.get("retry_policy"),
            cancellation_type=config.get("cancellation_type", ActivityCancellationType.TRY_CANCEL),
        )


def reads_only(read_calls: Mapping[str, Sequence[str]], arguments: Mapping[str, Any]) -> bool:
    """Whether a call is one of those that only read: each argument named has
    one of its listed values (no rule: no call)."""
    return bool(read_calls) and all(arguments.get(name) in values for name, values in read_calls.items())


class ToolTerms(BaseModel):
    definition: dict[str, Any] | None = None
    """The function definition the model is shown (None: a tool that adds its own)."""
    activity: ActivityTerms | None = None
    """Set for a tool that runs as an activity."""
    own_activities: dict[str, ActivityTerms] = {}
    """A workflow tool's own activities (the browser's actions, MCP calls), by key."""
    options: dict[str, Any] = {}
    """The profile's options for the tool (ToolSpec.options), sent with each call."""
    concurrent: bool = False
    """Its calls may run beside the other such calls of their reply (ToolSpec.concurrent).
    An input written before the mark existed lacks it: its calls run one by one, as they did."""
    local_reads: dict[str, list[str]] = {}
    """The calls that only read (ToolSpec.read_calls), as argument values: they
    run as local activities, in the workflow task that got the reply, which
    saves a workflow task and a round trip per step. An input written before
    it lacks it: all its calls stay activities."""
