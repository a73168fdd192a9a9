"""The words a user reads for how a run ended, and the classes `list --state`
filters by.

A result's own fields are the program's: AgentState says FINISHED for a run
that gave up or spent its budget, and StopReason "terminated" is the model's
terminate tool, which in Temporal's Web UI is the word for a forced kill. The
terminal says instead what became of the task."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from agent_model.flow import FlowOutcome, PlanningFlowResult
from agent_model.run import AgentRunResult
from agent_model.state import AgentState, StopReason


class StateClass(str, Enum):
    """What `list --state` selects: where a run is, in a user's terms."""

    RUNNING = "running"
    """Not ended (waiting runs too)."""
    WAITING = "waiting"
    """Not ended, and waiting for a person: an answer or an approval."""
    FINISHED = "finished"
    """Ended with its task done."""
    FAILED = "failed"
    """Ended without its task done, other than by cancellation: gave up, error,
    a step, token or budget limit, blocked, terminated, timed out."""
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Outcome:
    """How a run ended, in a user's words."""

    word: str
    """A short word for a column: "finished", "gave up", "error", ..."""
    meaning: str
    """What happened, for a sentence: "the agent ended its task"."""
    state_class: StateClass

    def sentence(self) -> str:
        return f"{self.word}: {self.meaning}"


FINISHED = StateClass.FINISHED
FAILED = StateClass.FAILED

AGENT_OUTCOMES: dict[StopReason, Outcome] = {
    StopReason.TERMINATED: Outcome("finished", "the agent ended its task", FINISHED),
    StopReason.ANSWERED: Outcome("finished", "the agent answered", FINISHED),
    StopReason.GAVE_UP: Outcome("gave up", "the agent ended without doing its task", FAILED),
    StopReason.MAX_STEPS: Outcome("step limit", "the run used all its steps before the task was done", FAILED),
    StopReason.BUDGET: Outcome("budget spent", "the run's token or cost budget ran out before the task was done", FAILED),
    StopReason.TOKEN_LIMIT: Outcome("token limit", "the conversation outgrew the model's input limit", FAILED),
    StopReason.REPLY_TOO_LARGE: Outcome("error", "the model's reply was over the size limit", FAILED),
    StopReason.CONTENT_FILTERED: Outcome("error", "the provider withheld the model's reply", FAILED),
    StopReason.EMPTY_REPLY: Outcome("error", "the model replied with nothing, also after a reminder", FAILED),
    StopReason.ERROR: Outcome("error", "the run could not go on", FAILED),
    StopReason.CANCELLED: Outcome("cancelled", "the run was cancelled", StateClass.CANCELLED),
}

FLOW_OUTCOMES: dict[FlowOutcome, Outcome] = {
    FlowOutcome.COMPLETED: Outcome("finished", "every step of the plan completed", FINISHED),
    FlowOutcome.BLOCKED: Outcome("blocked", "a step blocked and no replan got past it", FAILED),
    FlowOutcome.TIMED_OUT: Outcome("timed out", "the flow's time bound ended it before the plan's end", FAILED),
    FlowOutcome.BUDGET: Outcome("budget spent", "the token or cost budget ran out before the plan's end", FAILED),
    FlowOutcome.ERROR: Outcome("error", "the flow could not go on", FAILED),
    FlowOutcome.CANCELLED: Outcome("cancelled", "the flow was cancelled", StateClass.CANCELLED),
}


def agent_outcome(result: AgentRunResult) -> Outcome:
    """How an agent run ended."""
    return ending_outcome(result.state, result.stop_reason)


def ending_outcome(state: AgentState, reason: StopReason) -> Outcome:
    """How an agent run (or a session's turn) ended; its state wins where it
    disagrees with the stop reason (a run in ERROR never reads finished)."""
    outcome = AGENT_OUTCOMES[reason]
    if state == AgentState.ERROR and outcome.state_class != FAILED:
        return AGENT_OUTCOMES[StopReason.ERROR]
    if state == AgentState.CANCELLED:
        return AGENT_OUTCOMES[StopReason.CANCELLED]
    return outcome


def flow_outcome(result: PlanningFlowResult) -> Outcome:
    return FLOW_OUTCOMES[result.outcome]


def outcome_of(result: AgentRunResult | PlanningFlowResult) -> Outcome:
    return flow_outcome(result) if isinstance(result, PlanningFlowResult) else agent_outcome(result)
