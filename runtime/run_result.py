"""An ended run's result, also when Temporal says it FAILED because its task
was not done (workflows/run_failure.py carries the result in the failure)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel
from temporalio.client import WorkflowFailureError, WorkflowHandle

from workflows.run_failure import result_in

Result = TypeVar("Result", bound=BaseModel)


async def ended_result(handle: WorkflowHandle, kind: type[Result]) -> Result:
    """Wait for the run's result; raises WorkflowFailureError when it ended
    with none (terminated, timed out, cancelled, a bug)."""
    try:
        result = await handle.result()
    except WorkflowFailureError as e:
        carried = result_in(e, kind)
        if carried is None:
            raise
        return carried
    assert isinstance(result, kind), f"run {handle.id} ended with a {type(result).__name__}, not a {kind.__name__}"
    return result
