"""A think that is being retried, told while following: the LLM endpoint that
cannot be reached, or that answers 5xx, is named with the attempt
(activities/llm_client.py words the failure) instead of a silent progress
counter."""

from __future__ import annotations

from temporalio.api.failure.v1 import Failure
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.converter import DataConverter
from temporalio.exceptions import FailureError

THINK = "think"
"""The think activity's type name (activities/llm.py)."""
FAILURE_CHARACTERS = 300
"""Of the last failure's message, quoted."""


async def retrying_think(
    description: DescribeWorkflowExecutionResponse, converter: DataConverter
) -> tuple[int, str] | None:
    """(attempt, one line) for the run's think when it is being retried after a
    failure; None otherwise. `converter`: the client's, which decodes the
    failure's message (with encryption on it is in an encrypted payload)."""
    for activity in description.pending_activities:
        if activity.activity_type.name != THINK or activity.attempt <= 1 or not activity.HasField("last_failure"):
            continue
        message = await failure_message(activity.last_failure, converter)
        failure = " ".join(message.split())[:FAILURE_CHARACTERS]
        if failure:
            return activity.attempt, f"think is being retried (attempt {activity.attempt}): {failure}"
    return None


async def failure_message(failure: Failure, converter: DataConverter) -> str:
    """A failure's message as its sender wrote it, decoded with `converter`."""
    copy = Failure()
    copy.CopyFrom(failure)  # decoding works in place; the description stays as it came
    try:
        error = await converter.decode_failure(copy)
    except Exception:  # noqa: BLE001 (a key this client lacks, attributes of another shape)
        return failure.message
    return error.message if isinstance(error, FailureError) else str(error)


class RetryNotices:
    """Says each retried attempt of a run's think once."""

    def __init__(self) -> None:
        self.told: dict[str, int] = {}
        """Run id -> the attempt last told."""

    async def line(
        self, run_id: str, description: DescribeWorkflowExecutionResponse, converter: DataConverter
    ) -> str | None:
        found = await retrying_think(description, converter)
        if found is None or self.told.get(run_id) == found[0]:
            return None
        self.told[run_id] = found[0]
        return found[1]
