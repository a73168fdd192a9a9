"""Inputs and results of the PlanningFlow."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field

from agent_model.approval import ApprovalPolicy
from agent_model.budget import Budget
from agent_model.continuation_limits import ContinuationLimits
from agent_model.plan import Plan, StepStatus
from agent_model.profiles import AgentProfile, UnknownAgent, get_profile
from agent_model.state import AgentState
from agent_model.usage import TokenUsage

DEFAULT_FLOW_TIMEOUT_SECONDS = 3600.0
"""The whole flow's time bound (OpenManus's run_flow bound)."""
DEFAULT_MAX_REPLANS = 2
"""How many times a blocked step may trigger a revision of the remaining steps."""
FINALIZE_RESERVE_SECONDS = 60.0
"""Time kept back from the steps for the closing summary."""
MAX_PARALLEL_STEPS = 10
"""Step runs one flow may have at once: each is a child workflow with its own
thinks and tools on the same workers."""
DEFAULT_PARALLEL_STEPS = 3
"""What the starter writes into a new flow's input."""
FINISH_MARGIN_SECONDS = 5.0
"""The flow returns its result this long before its bound, so that a Temporal
execution timeout set to the same bound never cuts it off."""


class FlowOutcome(str, Enum):
    COMPLETED = "completed"  # every step completed
    BLOCKED = "blocked"  # a step blocked and no replan could get past it
    TIMED_OUT = "timed_out"  # the time bound ended the flow between steps
    BUDGET = "budget"  # the token or cost budget was spent before the plan's end
    ERROR = "error"  # the flow itself could not go on (e.g. the planner's LLM failed)
    CANCELLED = "cancelled"


class PlanningFlowInput(BaseModel):
    task: str
    agents: list[str] = Field(default_factory=lambda: ["manus"])
    """Executor agents (built-in profile names); steps pick one with a `[tag]`."""
    primary: str | None = None
    """Agent for untagged steps; default: the first of `agents`."""
    max_replans: int = DEFAULT_MAX_REPLANS
    timeout_seconds: float = DEFAULT_FLOW_TIMEOUT_SECONDS
    llm: str = "default"
    """LLM profile for planning, replanning and the summary."""
    agent_llm: str | None = None
    """LLM profile for every step's agent run (the starter's --llm); None: each
    agent profile's own."""
    max_steps_per_agent: int | None = None
    """Overrides each child agent's max_steps."""
    steps_per_run: int | None = None
    """Passed to each step's agent run (AgentRunInput.steps_per_run)."""
    profiles: dict[str, AgentProfile] | None = None
    """The profiles of `agents`, resolved by the starter: the planner's agent
    list and every step's run use these, whatever code later workers have.
    None (inputs of older starters): the built-in profiles of the worker's code."""
    continuation: ContinuationLimits | None = None
    """Continue-as-new thresholds for every step's run; None: each run's worker's."""
    budget: Budget | None = None
    """Ceilings for the planner's thinks and all step runs together, and the
    prices of every LLM they use, resolved by the starter; each step's run gets
    what is left. None: no ceiling, no cost."""
    approval: dict[str, ApprovalPolicy] | None = None
    """Each executor's approval gates (by agent), resolved by the starter; a
    step's run gets its executor's. None: no gates."""
    parallel_steps: int = Field(default=1, ge=1, le=MAX_PARALLEL_STEPS)
    """How many steps may run at once, as concurrent child runs in the shared
    workspace, when the planner declared that they do not need each other.
    1 (inputs of older starters): one after another, as flows always ran."""

    @property
    def primary_agent(self) -> str:
        return self.primary or self.agents[0]

    def profile_of(self, agent: str) -> AgentProfile:
        """The agent's profile as the flow started with it (raises UnknownAgent)."""
        if self.profiles is None:
            return get_profile(agent)
        try:
            return self.profiles[agent]
        except KeyError:
            raise UnknownAgent(f"the flow's input has no profile for agent {agent!r}") from None

    def check_agents(self) -> None:
        """Raises UnknownAgent for an agent the flow could not run; an input
        with profiles must hold the primary's too (older ones were never
        checked for it, and their replays must decide as they did)."""
        for agent in self.agents:
            self.profile_of(agent)
        if self.profiles is not None:
            self.profile_of(self.primary_agent)

    def child_profile(self, agent: str) -> AgentProfile | None:
        """The profile a step's run gets in its input; None for older inputs,
        whose children looked theirs up by name."""
        return None if self.profiles is None else self.profile_of(agent)


class StepOutcome(BaseModel):
    index: int
    text: str
    executor: str
    run_id: str
    status: StepStatus
    state: AgentState | None = None
    answer: str | None = None
    reason: str | None = None


class PlanningFlowResult(BaseModel):
    outcome: FlowOutcome
    plan: Plan
    steps: list[StepOutcome] = Field(default_factory=list)
    summary: str | None = None
    note: str | None = None
    replans: int = 0
    usage: TokenUsage = Field(default_factory=TokenUsage)
    """The planner's thinks and every step run's, together."""
    cost: float | None = None
    """USD of `usage`, at the flow's prices; None: no prices."""

    @property
    def succeeded(self) -> bool:
        return self.outcome == FlowOutcome.COMPLETED
