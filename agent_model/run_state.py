"""Everything an agent run changes as it goes, in one model.

The workflow keeps no other mutable state: queries read this object, and
continue-as-new hands it whole to the next execution (agent_model/
continuation.py carried_state), so a field added here cannot be left behind.

A tool that keeps state across calls (the browser's tabs, the MCP servers'
tools, bash's directory) owns a slot in `tool_state`: JSON under the tool's
name, parsed by the tool's own model (ToolSpec.state). JSON because the
payload converter decodes a field by its declared type: a slot typed as any
model would come back as a bare BaseModel, and a model generated from the tool
registry would make this pure module depend on tools/.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, Field, JsonValue, PrivateAttr

from agent_model.approval_desk import ApprovalDesk
from agent_model.budget import Budget
from agent_model.human import QuestionDesk
from agent_model.memory import Memory
from agent_model.plan import PlanBook
from agent_model.profiles import AgentProfile
from agent_model.records import StepRecord
from agent_model.session import SessionState
from agent_model.state import AgentState
from agent_model.think_context import ContextSync
from agent_model.usage import TokenUsage

Slot = TypeVar("Slot", bound=BaseModel)


class RunState(BaseModel):
    context: ContextSync
    """What the workers already hold of the window: the next think sends only what is new."""
    profile: AgentProfile | None = None
    """The profile as resolved when the run began (overrides applied)."""
    agent_state: AgentState = AgentState.IDLE
    directory: str = ""
    """The run directory's path on the workers."""
    step: int = 0
    steps_before: int = 0
    """Steps taken by the earlier executions of this run (continue-as-new)."""
    memory: Memory = Field(default_factory=Memory)
    plans: PlanBook = Field(default_factory=PlanBook)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    hinted: list[str] = Field(default_factory=list)
    """Signatures of replies that got a stuck hint already (once each)."""
    empty_replies: int = 0
    """Empty replies in a row."""
    records: list[StepRecord] = Field(default_factory=list)
    """The step records; a continued execution carries the newest few, texts cut."""
    earlier_runs: list[str] = Field(default_factory=list)
    """Run ids of the earlier executions, oldest first (the newest few)."""
    desk: QuestionDesk = Field(default_factory=QuestionDesk)
    """The question to the user, if one waits, and why earlier ones closed."""
    approvals: ApprovalDesk = Field(default_factory=ApprovalDesk)
    """The gated call waiting for a decision, if one waits, and why earlier ones closed."""
    budget: Budget | None = None
    """The budget once the user raised a ceiling (agent_model/budget_raise.py); None: the input's."""
    final_answer: str | None = None
    note: str | None = None
    """Why the run ended, once it has."""
    session: SessionState | None = Field(default=None, exclude_if=lambda value: value is None)
    """A session's turns and inbox (agent_model/session.py); None: the run is no session."""
    tool_state: dict[str, JsonValue] = Field(default_factory=dict)
    """Each stateful tool's slot, by tool name (see the module docstring)."""
    _slots: dict[str, BaseModel] = PrivateAttr(default_factory=dict)
    """Parsed slots, so that a think does not parse the MCP tools again."""

    def slot(self, tool: str, model: type[Slot]) -> Slot:
        """The tool's state (its model's defaults before the tool first kept one)."""
        held = self._slots.get(tool)
        if not isinstance(held, model):
            held = model.model_validate(self.tool_state.get(tool) or {})
            self._slots[tool] = held
        return held

    def keep(self, tool: str, value: BaseModel) -> None:
        """Replaces the tool's state; a slot is a value, changed only through here."""
        self.tool_state[tool] = value.model_dump(mode="json")
        self._slots[tool] = value
