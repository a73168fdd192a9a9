"""A run that did not do its task ends FAILED in Temporal, its result kept.

Temporal knows two good endings, a result (COMPLETED, green in the Web UI) and
a failure (FAILED, red, counted by the Failures filter). A run that gave up,
errored or hit a limit has a result worth reading, but its task is not done,
so it fails: with an ApplicationError of type TASK_NOT_DONE_ERROR whose
message is the outcome in a user's words (agent_model/outcome_words.py) and
whose details are the whole result. Readers of a run's ending (the CLI, the
MCP server, a flow whose step failed so) take the result back from the
details with `result_in`.

Runs that began before the patch TASK_NOT_DONE_PATCH complete as they did.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from agent_model.errors import TASK_NOT_DONE_ERROR
from agent_model.flow import PlanningFlowResult
from agent_model.outcome_words import StateClass, outcome_of
from agent_model.payload import clip
from agent_model.run import AgentRunResult

TASK_NOT_DONE_PATCH = "task-not-done-fails"
"""Asked first in AgentWorkflow.run and PlanningFlowWorkflow.run (docs/deploying.md)."""
REASON_LIMIT = 400
"""Characters of the failure's message: one line in the Web UI's list."""

Result = TypeVar("Result", bound=BaseModel)


def reason_line(result: AgentRunResult | PlanningFlowResult) -> str:
    """The outcome sentence and the run's note, as one line."""
    outcome = outcome_of(result)
    note = " ".join((result.note or "").split())
    return clip(f"{outcome.sentence()}: {note}" if note else outcome.sentence(), REASON_LIMIT)


def not_done_failure(result: AgentRunResult | PlanningFlowResult) -> ApplicationError | None:
    """The failure a run with this result ends with; None when its task was
    done (it completes) or it was cancelled (it ends CANCELED elsewhere)."""
    if outcome_of(result).state_class != StateClass.FAILED:
        return None
    return ApplicationError(reason_line(result), result, type=TASK_NOT_DONE_ERROR, non_retryable=True)


def result_in(error: BaseException | None, kind: type[Result]) -> Result | None:
    """The result a TASK_NOT_DONE_ERROR failure in `error`'s cause chain
    carries (a WorkflowFailureError's, a ChildWorkflowError's); None when the
    run failed for another reason."""
    while error is not None:
        if isinstance(error, ApplicationError) and error.type == TASK_NOT_DONE_ERROR and error.details:
            carried = error.details[0]
            return carried if isinstance(carried, kind) else kind.model_validate(carried)
        error = error.__cause__
    return None
