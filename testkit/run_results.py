"""A test's way to the result of a run that ended, whatever Temporal's status:
a run whose task was not done FAILED with its result in the failure
(workflows/run_failure.py)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio.client import WorkflowFailureError, WorkflowHandle

from agent_model.flow import PlanningFlowResult
from agent_model.run import AgentRunResult
from workflows.run_failure import result_in


def carried_result(error: BaseException) -> AgentRunResult | PlanningFlowResult | None:
    """The result a TaskNotDone failure carries, an agent run's or a flow's."""
    try:
        return result_in(error, AgentRunResult)
    except ValidationError:
        return result_in(error, PlanningFlowResult)


async def final_result(handle: WorkflowHandle) -> Any:
    """The run's result, also when it FAILED because its task was not done;
    any other failure is raised."""
    try:
        return await handle.result()
    except WorkflowFailureError as e:
        carried = carried_result(e)
        if carried is None:
            raise
        return carried
