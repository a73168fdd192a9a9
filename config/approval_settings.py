"""`[approval]`: which tool calls wait for a person's decision (agent_model/approval.py).

    [approval]
    mode = "risky"                 # none | risky | all; --approve overrides it per run
    timeout_seconds = 3600
    on_timeout = "reject"          # or "approve"
    safe_hosts = ["docs.python.org"]
    rules = [{ tool = "bash", arguments = '\\bgit\\s+push\\b' }, { tool = "mcp_github_.*" }]

    [approval.agent.swe]           # per agent profile: its own mode, more rules
    mode = "all"

Patterns are checked here (agent_model/approval.py check_pattern), so a bad
one is a one-line ConfigError at start-up, never a surprise in a run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_model.approval import (
    DEFAULT_TIMEOUT_SECONDS,
    ApprovalMode,
    ApprovalPolicy,
    ApprovalRule,
    TimeoutAction,
    check_pattern,
)

MAX_RULES = 64
"""Rules of one table: each is tried on every call of the run."""
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600.0
"""A week: a gated call may wait over a weekend, not for ever."""


class RuleSetting(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: str | None = None
    hosts: list[str] = Field(default_factory=list, max_length=64)
    why: str = Field("", max_length=200)

    @field_validator("tool", "arguments")
    @classmethod
    def _simple_pattern(cls, pattern: str | None, info: Any) -> str | None:
        if pattern is not None:
            problem = check_pattern(pattern)
            if problem is not None:
                raise ValueError(f"rule {info.field_name} {pattern[:60]!r}: {problem}")
        return pattern


class AgentApproval(BaseModel):
    """`[approval.agent.<name>]`: one agent profile's own mode and extra rules."""

    model_config = ConfigDict(extra="forbid")

    mode: ApprovalMode | None = None
    rules: list[RuleSetting] = Field(default_factory=list, max_length=MAX_RULES)


class ApprovalSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: ApprovalMode = ApprovalMode.NONE
    """Default none: runs of this project before approval gates asked nothing,
    and a detached run nobody watches would only wait out the timeout."""
    timeout_seconds: float = Field(DEFAULT_TIMEOUT_SECONDS, gt=0, le=MAX_TIMEOUT_SECONDS, allow_inf_nan=False)
    on_timeout: TimeoutAction = TimeoutAction.REJECT
    safe_hosts: list[str] = Field(default_factory=list, max_length=256)
    rules: list[RuleSetting] = Field(default_factory=list, max_length=MAX_RULES)
    agent: dict[str, AgentApproval] = Field(default_factory=dict)

    def policy_for(self, agent: str, mode: ApprovalMode | None = None) -> ApprovalPolicy:
        """The gates of a run of `agent`: `mode` (--approve) over the agent's
        own mode over the table's; the table's rules and the agent's."""
        own = self.agent.get(agent, AgentApproval())
        rules = [ApprovalRule(**rule.model_dump()) for rule in (*self.rules, *own.rules)]
        return ApprovalPolicy(
            mode=mode or own.mode or self.mode,
            rules=rules,
            safe_hosts=list(self.safe_hosts),
            timeout_seconds=self.timeout_seconds,
            on_timeout=self.on_timeout,
        )
