"""Inputs, results and live status of an agent run."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_model.approval import ApprovalPolicy
from agent_model.approval_desk import ApprovalDecision, PendingApproval
from agent_model.budget import Budget
from agent_model.continuation_limits import ContinuationLimits
from agent_model.fork import ForkOrigin
from agent_model.human import HumanAnswer, HumanQuestion
from agent_model.payload import PAYLOAD_LIMIT, clip, first_within, fit, json_size
from agent_model.profiles import AgentProfile, get_profile
from agent_model.records import StepRecord, ToolCallRecord
from agent_model.run_state import RunState
from agent_model.session import SessionTerms, TurnRecord
from agent_model.state import AgentState, StopReason
from agent_model.usage import TokenUsage

__all__ = [  # defined elsewhere, named here for the run's callers
    "ApprovalDecision", "HumanAnswer", "HumanQuestion", "RunState", "StepRecord", "ToolCallRecord",
]


class AgentRunInput(BaseModel):
    task: str
    agent: str = "manus"
    """A built-in profile name; ignored when `profile` is given."""
    profile: AgentProfile | None = None
    """The agent's profile, resolved by the starter (or the flow) so that the
    run keeps it whatever code later workers have; None (inputs of older
    starters): the built-in profile `agent` of the worker's code."""
    max_steps: int | None = None
    """Overrides the profile's max_steps."""
    llm: str | None = None
    """Overrides the profile's LLM (an `[llm.<name>]` of the worker's config)."""
    mcp_servers: list[str] | None = None
    """Overrides the profile's MCP servers (ids in the worker's mcp.json)."""
    workspace: str | None = None
    """Directory name under the workspace root; default: derived from the run id."""
    steps_per_run: int | None = None
    """Steps after which the run goes on in a new execution (continue-as-new);
    None: only when the history grows large (agent_model/continuation.py)."""
    continuation: ContinuationLimits | None = None
    """When to continue as new and what to carry, resolved by the starter and
    kept by every continued execution; None (older inputs): the worker's code's."""
    approval: ApprovalPolicy | None = None
    """Which calls wait for a person's decision, resolved by the starter from
    config and --approve (a flow's children get the flow's); None: none do."""
    carried: RunState | None = None
    """Set when an earlier execution of this run continued as new: its whole state."""
    budget: Budget | None = None
    """Ceilings of tokens and cost and the LLMs' prices, resolved by the starter
    (a flow's child: what is left of the flow's); None: no ceiling, no cost."""
    forked_from: ForkOrigin | None = None
    """Set for a fork (runtime/fork.py): the run and step it starts from; its
    first execution restores the directory before anything else."""
    session: SessionTerms | None = Field(default=None, exclude_if=lambda value: value is None)
    """Set for a session (`chat`): after a turn the run waits for the next
    message instead of ending (agent_model/session.py); None: it ends."""


def resolved_profile(run: AgentRunInput) -> AgentProfile:
    """The run's profile with the input's overrides applied (raises UnknownAgent)."""
    profile = run.profile or get_profile(run.agent)
    updates: dict = {}
    if run.max_steps is not None:
        updates["max_steps"] = run.max_steps
    if run.llm is not None:
        updates["llm"] = run.llm
    if run.mcp_servers is not None:
        updates["mcp_servers"] = run.mcp_servers
    return profile.model_copy(update=updates) if updates else profile


class AgentStatus(BaseModel):
    agent: str
    state: AgentState
    step: int
    max_steps: int
    steps_recorded: int
    usage: TokenUsage
    cost: float | None = None
    """USD spent, at the run's prices; None: no prices."""
    pending_question: HumanQuestion | None = None
    pending_approval: PendingApproval | None = None
    note: str | None = None
    """Why the run ended, once it has; the only account of a cancelled run,
    which ends without a result."""


RESULT_TEXT_BUDGET = 256_000
"""Characters of thoughts, tool arguments and observations that a run's result
carries. Temporal refuses payloads over 2 MiB (and warns from 512 KiB), so a
long run's result must not grow with every step; the full texts stay in the
run's history and in its `steps` query."""
RESULT_MIN_FIELD = 200
"""No text in a result is cut below this many characters."""
NOTE_LIMIT = 2000
"""Characters of a run's note (it may quote an error message)."""
OBSERVATION_LIMIT = 100_000
"""Characters of a tool's output kept in memory, whatever the profile's
max_observe: the memory window must fit in one think request."""
IN_HISTORY = "in the run's history"
MAX_TOOL_CALLS_PER_REPLY = 32
"""Tool calls of one reply that the run keeps and answers. Each call gets an
observation in memory, so a reply of thousands of tiny calls (it may be up to
512 KiB) would make a window no payload can carry; the rest are dropped."""


def observe_limit(profile: AgentProfile) -> int:
    """Characters of one tool output that the profile's agent sees."""
    return min(profile.max_observe or OBSERVATION_LIMIT, OBSERVATION_LIMIT)


def cut(text: str, limit: int) -> str:
    return clip(text, limit, where=IN_HISTORY)


def fit_records(records: list[StepRecord], budget: int = RESULT_TEXT_BUDGET) -> list[StepRecord]:
    """The records, with their longest texts cut so that together they stay
    near `budget` characters; unchanged when they already fit."""
    texts = [len(r.thought or "") for r in records]
    texts += [len(t) for r in records for c in r.tool_calls for t in (c.arguments, c.observation)]
    if sum(texts) <= budget:
        return records
    limit = max(RESULT_MIN_FIELD, budget // max(1, sum(1 for n in texts if n)))
    return [
        r.model_copy(
            update={
                "thought": cut(r.thought, limit) if r.thought else r.thought,
                "tool_calls": [
                    c.model_copy(update={"arguments": cut(c.arguments, limit), "observation": cut(c.observation, limit)})
                    for c in r.tool_calls
                ],
            }
        )
        for r in records
    ]


class AgentRunResult(BaseModel):
    agent: str
    state: AgentState
    stop_reason: StopReason
    final_answer: str | None = None
    note: str | None = None
    steps_taken: int = 0
    steps: list[StepRecord] = Field(default_factory=list)
    """The run's records, their texts cut to a budget (fit_result); a very long
    run's oldest records are left out."""
    usage: TokenUsage = Field(default_factory=TokenUsage)
    cost: float | None = None
    """USD spent, at the run's prices; None: no prices."""
    directory: str | None = None
    raised_budget: Budget | None = None
    """The budget the run ended with when the user raised a ceiling at it; a
    flow raises its own by as much (agent_model/budget_raise.py raised_by)."""
    turns: list[TurnRecord] = Field(default_factory=list, exclude_if=lambda value: not value)
    """A session's turns, newest last (each its message and how it ended); empty: no session."""

    @property
    def succeeded(self) -> bool:
        return self.state == AgentState.FINISHED and self.stop_reason.succeeded


def fit_result(result: AgentRunResult, limit: int = PAYLOAD_LIMIT) -> AgentRunResult:
    """The result with its records cut to fit_records' budget, and within
    `limit` bytes of JSON however long the run was: the oldest records are
    left out (they stay in the run's history) until it fits."""
    fitted = result.model_copy(update={"steps": fit_records(result.steps)})
    while len(fitted.steps) > 1 and json_size(fitted) > limit:
        fitted.steps = fitted.steps[len(fitted.steps) // 2 :]
    return fit(fitted, limit, IN_HISTORY)


def records_page(records: list[StepRecord], since: int, limit: int = PAYLOAD_LIMIT) -> list[StepRecord]:
    """The records from index `since` on that fit in one answer of `limit`
    bytes (at least one, cut to fit); callers ask again from where it ends."""
    return first_within(records[since:], limit, IN_HISTORY)
