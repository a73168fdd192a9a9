"""Approval gates: which tool calls wait for a person's decision before they run.

A policy is data the starter resolves from config ([approval], per agent) and
the command line (--approve) into the run's input; the workflow only asks
`gate_reason` here. Pure and deterministic: patterns are plain `re`, short,
free of nested repetition (check_pattern, at config load), and they are run
on bounded text; a call whose text is over the bound is gated unchecked.

Modes: none gates nothing; risky gates the built-in set below plus the
policy's own rules; all gates every call but the tools that only touch the
run's own state (ask_human, planning, the profile's special tools).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

MAX_PATTERN_CHARS = 200
"""Longest pattern a rule may hold: a gate is a short list of words, not a parser."""
MATCH_TEXT_LIMIT = 20_000
"""Characters of a call's argument text that patterns are run on; a longer
text is gated without a match (it could hide a risky command past the bound)."""
MATCH_LINE_LIMIT = 1_000
"""Characters of one line: patterns are searched line by line, so even a
pattern like `a.*b` costs at most this many steps per character."""
DEFAULT_TIMEOUT_SECONDS = 3600.0


class ApprovalMode(str, Enum):
    NONE = "none"
    RISKY = "risky"
    ALL = "all"


class TimeoutAction(str, Enum):
    REJECT = "reject"
    APPROVE = "approve"


class ApprovalRule(BaseModel):
    """One gate: a call matches when every condition given holds."""

    tool: str
    """Pattern that the whole function name must match: "bash", "mcp_github_.*"."""
    arguments: str | None = None
    """Pattern searched in each line of the call's string values (the command, the code)."""
    hosts: list[str] = Field(default_factory=list)
    """browser_use: the host the action goes to (its url, else the open page's)
    is one of these or under one of them."""
    why: str = ""
    """What the person deciding is told; default: the rule itself."""

    def describe(self) -> str:
        if self.why:
            return self.why
        parts = [f"tool {self.tool}"]
        if self.arguments:
            parts.append(f"arguments match {self.arguments}")
        if self.hosts:
            parts.append(f"host in {', '.join(self.hosts)}")
        return "rule: " + ", ".join(parts)


class ApprovalPolicy(BaseModel):
    """The run's gates, resolved by the starter; None in older inputs: no gates."""

    mode: ApprovalMode = ApprovalMode.NONE
    rules: list[ApprovalRule] = Field(default_factory=list)
    """Gates besides the built-in set (risky mode)."""
    safe_hosts: list[str] = Field(default_factory=list)
    """Risky mode: hosts (and their subdomains) where browser actions that
    change a page run without asking."""
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    """How long a gated call waits for a decision."""
    on_timeout: TimeoutAction = TimeoutAction.REJECT
    """What happens to a gated call nobody decided in time."""

    def summary(self) -> str:
        """One line for the starter to print: what the run will ask about."""
        if self.mode == ApprovalMode.NONE:
            return "approval: none (no call waits for a decision)"
        what = "every tool call" if self.mode == ApprovalMode.ALL else "risky calls (" + BUILTIN_SUMMARY + ")"
        extra = f" and {len(self.rules)} configured rule(s)" if self.rules and self.mode == ApprovalMode.RISKY else ""
        return (
            f"approval: {self.mode.value}: {what}{extra} wait for a decision, "
            f"{self.on_timeout.value}ed after {self.timeout_seconds:g} s"
        )


@dataclass(frozen=True)
class GateFacts:
    """What a tool's state knows about one of its calls (ToolState.gate_facts)."""

    page_url: str | None = None
    """browser_use: the page the action applies to."""
    read_only: bool = False
    """An MCP tool its server marks read-only (readOnlyHint)."""


# ---- the built-in set (risky) ------------------------------------------------------------

RISKY_SHELL = (
    r"\b(rm|rmdir|mv|dd|mkfs|shred|chmod|chown|sudo|kill|pkill|curl|wget|ssh|scp|rsync"
    r"|git\s+push|git\s+reset|pip\s+install|npm\s+install)\b"
)
"""bash commands that delete, move, reach the network or escalate."""
RISKY_PYTHON = (
    r"\b(os\.(remove|unlink|rmdir|removedirs|system|kill)|shutil\.(rmtree|move)"
    r"|subprocess|socket|urllib|requests|httpx|http\.client)\b"
)
"""python_execute code that deletes, spawns or reaches the network."""
PAGE_CHANGING_ACTIONS = frozenset({"click_element", "input_text", "select_dropdown_option", "send_keys"})
"""browser_use actions that can submit or change something on the page's site."""
MCP_PREFIX = "mcp_"
RUN_STATE_TOOLS = frozenset({"ask_human", "planning"})
"""Tools that only touch the run's own state: never gated."""

BUILTIN_RULES = (
    ApprovalRule(tool="bash", arguments=RISKY_SHELL, why="a shell command that deletes, moves or reaches the network"),
    ApprovalRule(
        tool="python_execute", arguments=RISKY_PYTHON, why="Python code that deletes, spawns or reaches the network"
    ),
)
BUILTIN_SUMMARY = (
    "bash/python_execute deleting, spawning or reaching the network; MCP tools not marked read-only; "
    "browser clicks and typing outside the safe hosts"
)


# ---- matching ------------------------------------------------------------------------------


def check_pattern(pattern: str) -> str | None:
    """Why `pattern` cannot be a gate's pattern, or None. Beyond a valid
    regular expression of at most MAX_PATTERN_CHARS, a gate's pattern may
    repeat without bound once (`*`, `+`, `{n,}`) and besides that hold one
    short optional or bounded part (`?`, `{m,n}` with n <= MAX_BOUNDED_REPEAT),
    never repeat a group holding a repetition or alternatives, and never refer
    back: the shapes whose backtracking explodes are refused up front."""
    if not pattern:
        return "the pattern is empty"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"the pattern is longer than {MAX_PATTERN_CHARS} characters"
    try:
        re.compile(pattern)
    except re.error as e:
        return f"the pattern is not a valid regular expression ({e})"
    if re.search(r"\\[1-9]|\(\?P=", pattern):
        return "the pattern refers back to a group"
    return _shape_problem(pattern)


MAX_BOUNDED_REPEAT = 8
"""Largest n of a bounded repetition {m,n} in a gate's pattern."""
_BOUND = re.compile(r"\{(\d*)(,?)(\d*)\}")


def _shape_problem(pattern: str) -> str | None:
    groups: list[bool] = []  # per open group: holds a repetition or alternatives
    unbounded = bounded = 0
    closed_risky = after_atom = False
    i, in_class = 0, False
    while i < len(pattern):
        char, quantifier = pattern[i], None
        if char == "\\":
            i, closed_risky, after_atom = i + 2, False, True
            continue
        if in_class:
            in_class = char != "]"
            after_atom = not in_class
        elif char == "[":
            in_class, closed_risky = True, False
        elif char == "(":
            groups.append(False)
            if pattern.startswith("(?", i):
                i += 1  # (?:, (?i): not a quantifier
            closed_risky = after_atom = False
        elif char == ")":
            closed_risky = groups.pop() if groups else False
            if closed_risky and groups:
                groups[-1] = True
            after_atom = True
        elif char in "*+?" and after_atom:
            quantifier = "unbounded" if char != "?" else "bounded"
        elif char == "{" and after_atom and (bound := _BOUND.match(pattern, i)) is not None:
            low, comma, high = bound.groups()
            if comma and not high:
                quantifier = "unbounded"
            elif int(high or low or 0) > MAX_BOUNDED_REPEAT:
                return f"a bounded repetition may repeat at most {MAX_BOUNDED_REPEAT} times"
            else:
                quantifier = "bounded"
            i = bound.end() - 1
        else:
            if char == "|" and groups:
                groups[-1] = True
            closed_risky, after_atom = False, char not in "|^$"
        if quantifier is not None:
            if closed_risky and quantifier == "unbounded" or closed_risky and char == "{":
                return "the pattern repeats a group that holds a repetition or alternatives"
            if groups:
                groups[-1] = True
            unbounded += quantifier == "unbounded"
            bounded += quantifier == "bounded"
            if unbounded > 1:
                return "the pattern repeats without bound more than once (write {m,n} for the others)"
            if bounded > 1:
                return "the pattern has more than one optional or bounded part"
            if pattern.startswith("?", i + 1):
                i += 1  # a lazy quantifier's mark
            closed_risky = after_atom = False
        i += 1
    return None


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def argument_lines(arguments: dict[str, Any]) -> list[str] | None:
    """The lines of the call's string values; None when they are over
    MATCH_TEXT_LIMIT or a line is over MATCH_LINE_LIMIT. (Arguments are
    depth-bounded already: agent_model/tool_arguments.py.)"""
    text = "\n".join(_strings(arguments))
    if len(text) > MATCH_TEXT_LIMIT:
        return None
    lines = text.splitlines()
    return None if any(len(line) > MATCH_LINE_LIMIT for line in lines) else lines


def host_of(url: str | None) -> str | None:
    if not url:
        return None
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return None
    return host.lower().rstrip(".") if host else None


def host_in(host: str | None, hosts: Collection[str]) -> bool:
    if host is None:
        return False
    return any(host == h or host.endswith("." + h) for h in (h.lower().strip(".") for h in hosts) if h)


def _target_host(arguments: dict[str, Any], facts: GateFacts) -> str | None:
    url = arguments.get("url")
    return host_of(url if isinstance(url, str) and url else facts.page_url)


def _rule_matches(rule: ApprovalRule, tool: str, arguments: dict[str, Any], facts: GateFacts) -> str | None:
    if not _compiled(rule.tool).fullmatch(tool):
        return None
    if rule.hosts and not host_in(_target_host(arguments, facts), rule.hosts):
        return None
    if rule.arguments:
        lines = argument_lines(arguments)
        if lines is None:
            return f"{rule.describe()} (the arguments are too long to check)"
        pattern = _compiled(rule.arguments)
        if not any(pattern.search(line) for line in lines):
            return None
    return rule.describe()


def gate_reason(
    policy: ApprovalPolicy | None,
    tool: str,
    arguments: dict[str, Any],
    facts: GateFacts = GateFacts(),
    exempt: Collection[str] = (),
) -> str | None:
    """Why the call must wait for a decision, or None when it runs at once."""
    if policy is None or policy.mode == ApprovalMode.NONE or tool in RUN_STATE_TOOLS or tool in exempt:
        return None
    if policy.mode == ApprovalMode.ALL:
        return "approval mode all: every tool call is decided by a person"
    for rule in (*BUILTIN_RULES, *policy.rules):
        reason = _rule_matches(rule, tool, arguments, facts)
        if reason is not None:
            return reason
    if tool.startswith(MCP_PREFIX) and not facts.read_only:
        return "an MCP tool its server does not mark read-only"
    if tool == "browser_use" and arguments.get("action") in PAGE_CHANGING_ACTIONS:
        host = _target_host(arguments, facts)
        if not host_in(host, policy.safe_hosts):
            return f"a browser {arguments.get('action')} on {host or 'a page'} (not a safe host)"
    return None
