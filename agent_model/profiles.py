"""Agent profiles: what distinguishes one kind of agent from another."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent_model.memory import DEFAULT_MAX_MESSAGES, DEFAULT_MAX_TOKENS
from agent_model.messages import ToolChoice
from agent_model.stuck import DEFAULT_DUPLICATE_THRESHOLD
from agent_model.tool_terms import ActivityTerms, ToolTerms
from prompts import browser, data_analysis, manus, mcp, planning, swe, toolcall


class AgentProfile(BaseModel):
    name: str
    description: str = ""
    system_prompt: str = ""
    """Sent with every LLM call, never stored in memory. May use `{directory}`."""
    next_step_prompt: str = ""
    """Appended to memory as a user message before every think; empty = none."""
    tools: list[str] = Field(default_factory=lambda: ["terminate"])
    special_tools: list[str] = Field(default_factory=lambda: ["terminate"])
    """Tools whose call ends the run."""
    max_steps: int = 30
    max_observe: int | None = None
    """Characters of a tool's output kept in memory; None = OBSERVATION_LIMIT
    (agent_model/run.py), which also caps every larger value. Every built-in
    profile sets it, so that one step's observations stay a small part of the
    memory window's budgets."""
    tool_choice: ToolChoice = ToolChoice.AUTO
    finish_on_answer: bool = True
    """In AUTO mode, a reply without a tool call is the final answer."""
    duplicate_threshold: int = DEFAULT_DUPLICATE_THRESHOLD
    max_tool_calls_per_step: int | None = None
    """Tool calls executed per reply; extra ones are answered with an error."""
    human_timeout_seconds: float = 3600.0
    """How long ask_human waits for an answer (default 1 h)."""
    llm: str = "default"
    """LLM profile name in the worker's config."""
    max_memory_messages: int = DEFAULT_MAX_MESSAGES
    max_window_tokens: int = DEFAULT_MAX_TOKENS
    """Estimated tokens of the memory window (agent_model/memory.py): the
    oldest tool-call groups are dropped beyond it, the task never is."""
    mcp_servers: list[str] = Field(default_factory=list)
    """MCP servers (ids in the worker's mcp.json) whose tools the agent gets
    besides `tools`; ["*"]: every server the worker has."""
    tool_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Options of the profile's tools, by tool name, as each tool takes them
    (ToolSpec.options: python_execute's keep_state)."""
    tool_terms: dict[str, ToolTerms] = Field(default_factory=dict)
    """Each of `tools` as the run started with it (definition, activity
    options), written by the starter (tools/__init__.py with_tool_terms);
    empty in the built-in profiles and older inputs: the worker's tool files."""
    think_terms: ActivityTerms | None = None
    """How the run's thinks are scheduled, written by the starter with the tool
    terms; among them how often a think whose worker went silent is scheduled
    again. None in the built-in profiles and older inputs: the worker's
    THINK_CONFIG, and a lost worker's think fails as it did."""


TOOLCALL = AgentProfile(
    name="toolcall",
    description="A plain tool-calling agent.",
    system_prompt=toolcall.SYSTEM_PROMPT,
    next_step_prompt=toolcall.NEXT_STEP_PROMPT,
    tools=["create_chat_completion", "terminate"],
    max_steps=30,
    max_observe=20000,
)

MANUS = AgentProfile(
    name="manus",
    description="General-purpose agent: Python, files, web search and pages, questions to the user.",
    system_prompt=manus.SYSTEM_PROMPT,
    next_step_prompt=manus.NEXT_STEP_PROMPT,
    tools=["python_execute", "str_replace_editor", "web_search", "web_fetch", "browser_use", "ask_human", "terminate"],
    max_steps=20,
    max_observe=10000,
)

SWE = AgentProfile(
    name="swe",
    description="Software engineer: shell and editor, one command at a time.",
    system_prompt=swe.SYSTEM_PROMPT,
    next_step_prompt=swe.NEXT_STEP_PROMPT,
    tools=["bash", "str_replace_editor", "terminate"],
    max_steps=20,
    max_observe=20000,
    max_tool_calls_per_step=1,
)

DATA_ANALYSIS = AgentProfile(
    name="data_analysis",
    description="Data analyst: Python (pandas, numpy, matplotlib) for analysis, a chart tool, reports.",
    system_prompt=data_analysis.SYSTEM_PROMPT,
    next_step_prompt=data_analysis.NEXT_STEP_PROMPT,
    tools=["python_execute", "chart", "str_replace_editor", "terminate"],
    max_steps=20,
    max_observe=15000,
    max_tool_calls_per_step=1,
    tool_options={"python_execute": {"keep_state": True}},
)

PLANNING = AgentProfile(
    name="planning",
    description="Planner: makes a plan with the planning tool and tracks it to the end.",
    system_prompt=planning.SYSTEM_PROMPT,
    next_step_prompt=planning.NEXT_STEP_PROMPT,
    tools=["planning", "terminate"],
    max_steps=20,
    max_observe=20000,
)

BROWSER = AgentProfile(
    name="browser",
    description="Web agent: drives a real browser, searches, reads and fills in pages.",
    system_prompt=browser.SYSTEM_PROMPT,
    next_step_prompt=browser.NEXT_STEP_PROMPT,
    tools=["browser_use", "web_search", "ask_human", "terminate"],
    max_steps=20,
    max_observe=10000,
    # One action at a time: each result lists the element indices the next
    # action refers to, so a second action in the same reply would guess.
    max_tool_calls_per_step=1,
)

MCP = AgentProfile(
    name="mcp",
    description="Works through the tools of the MCP servers the worker connects to (mcp.json).",
    system_prompt=mcp.SYSTEM_PROMPT,
    next_step_prompt=mcp.NEXT_STEP_PROMPT,
    tools=["ask_human", "terminate"],
    mcp_servers=["*"],
    max_steps=20,
    max_observe=10000,
)

BUILTIN_PROFILES: dict[str, AgentProfile] = {
    p.name: p for p in (TOOLCALL, MANUS, SWE, DATA_ANALYSIS, PLANNING, BROWSER, MCP)
}


class UnknownAgent(ValueError):
    pass


def get_profile(name: str) -> AgentProfile:
    try:
        return BUILTIN_PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_PROFILES))
        raise UnknownAgent(f"unknown agent {name!r}; known agents: {known}") from None
