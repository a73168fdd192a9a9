"""The thresholds of continue-as-new, as a run carries them.

Resolved when a run starts (agent_model/continuation.py current_limits) and
carried by every continued execution, so that a change to the code's values
reaches new runs only: an open run keeps deciding as it began.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel


class ContinuationLimits(BaseModel):
    history_events: int
    """Events after which a run continues as new even if the server has not suggested it."""
    history_bytes: int
    """History bytes after which a run continues as new."""
    records_bytes: int
    """JSON bytes of step records carried into the next execution."""
    records_text: int
    """Characters of thoughts, arguments and observations in the carried records."""
    plans_bytes: int
    """JSON bytes of the plans carried into the next execution."""
    task_shown: int
    """Characters of the task repeated in a continued execution's input."""
    earlier_runs_kept: int
    """Run ids of earlier executions carried, newest last."""
    workflow_task_seconds: float | None = None
    """The workflow task timeout of the run's executions and of a flow's step
    runs; None (inputs written before it): the server's default, 10 s."""

    def workflow_task_timeout(self) -> timedelta | None:
        """For start_workflow / execute_child_workflow's task_timeout."""
        return timedelta(seconds=self.workflow_task_seconds) if self.workflow_task_seconds else None
