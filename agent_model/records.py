"""What a run records of each step: the thought, every tool call, its usage."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_model.approval_desk import ApprovalRecord
from agent_model.usage import TokenUsage


class ToolCallRecord(BaseModel):
    id: str
    name: str
    arguments: str
    observation: str = ""
    error: bool = False
    approval: ApprovalRecord | None = None
    """Set for a call that waited at an approval gate: the decision, by whom, when."""


class StepRecord(BaseModel):
    step: int
    turn: int = Field(default=1, exclude_if=lambda value: value == 1)
    """The session turn the step belongs to (agent_model/session.py); 1 for a run that is no session."""
    thought: str | None = None
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    cost: float | None = Field(default=None, exclude_if=lambda value: value is None)
    """USD of the step's think at the run's prices (agent_model/budget.py); None: no prices."""
    note: str | None = None
