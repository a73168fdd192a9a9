"""Inputs, results and live status of an agent run."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_model.messages import ToolChoice
from agent_model.profiles import AgentProfile
from agent_model.state import AgentState, StopReason
from agent_model.usage import TokenUsage


class AgentRunInput(BaseModel):
    task: str
    agent: str = "manus"
    """A built-in profile name; ignored when `profile` is given."""
    profile: AgentProfile | None = None
    max_steps: int | None = None
    """Overrides the profile's max_steps."""
    workspace: str | None = None
    """Directory name under the workspace root; default: derived from the run id."""
    tool_choice: ToolChoice | None = None


class ToolCallRecord(BaseModel):
    id: str
    name: str
    arguments: str
    observation: str = ""
    error: bool = False


class StepRecord(BaseModel):
    step: int
    thought: str | None = None
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    note: str | None = None


class HumanQuestion(BaseModel):
    id: str
    text: str


class HumanAnswer(BaseModel):
    question_id: str
    text: str


class AgentStatus(BaseModel):
    agent: str
    state: AgentState
    step: int
    max_steps: int
    steps_recorded: int
    usage: TokenUsage
    pending_question: HumanQuestion | None = None


class AgentRunResult(BaseModel):
    agent: str
    state: AgentState
    stop_reason: StopReason
    final_answer: str | None = None
    note: str | None = None
    steps_taken: int = 0
    steps: list[StepRecord] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    directory: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.state == AgentState.FINISHED and self.stop_reason.succeeded
