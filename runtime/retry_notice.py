"""A think that is being retried, told while following: the LLM endpoint that
cannot be reached, or that answers 5xx, is named with the attempt
(activities/llm_client.py words the failure) instead of a silent progress
counter."""

from __future__ import annotations

from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse

THINK = "think"
"""The think activity's type name (activities/llm.py)."""
FAILURE_CHARACTERS = 300
"""Of the last failure's message, quoted."""


def retrying_think(description: DescribeWorkflowExecutionResponse) -> tuple[int, str] | None:
    """(attempt, one line) for the run's think when it is being retried after a
    failure; None otherwise."""
    for activity in description.pending_activities:
        if activity.activity_type.name != THINK or activity.attempt <= 1 or not activity.HasField("last_failure"):
            continue
        failure = " ".join(activity.last_failure.message.split())[:FAILURE_CHARACTERS]
        if failure:
            return activity.attempt, f"think is being retried (attempt {activity.attempt}): {failure}"
    return None


class RetryNotices:
    """Says each retried attempt of a run's think once."""

    def __init__(self) -> None:
        self.told: dict[str, int] = {}
        """Run id -> the attempt last told."""

    def line(self, run_id: str, description: DescribeWorkflowExecutionResponse) -> str | None:
        found = retrying_think(description)
        if found is None or self.told.get(run_id) == found[0]:
            return None
        self.told[run_id] = found[0]
        return found[1]
