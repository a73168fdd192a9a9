"""Approval gates as pure logic: which calls a policy gates, which patterns
config accepts, the desk's refusals, and the command line's forms."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from agent_model.approval import (
    MATCH_LINE_LIMIT,
    ApprovalMode,
    ApprovalPolicy,
    ApprovalRule,
    GateFacts,
    check_pattern,
    gate_reason,
)
from agent_model.approval_desk import ApprovalAction, ApprovalDecision, ApprovalDesk, PendingApproval
from config.settings import ConfigError, load_settings
from runtime.command_line import Approve, Reject, parse_command
from runtime.user_errors import UsageError

RISKY = ApprovalPolicy(mode=ApprovalMode.RISKY)
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "tool, arguments, gated",
    [
        ("bash", {"command": "ls -la && cat notes.txt"}, False),
        ("bash", {"command": "cd /tmp\nrm -rf build"}, True),
        ("bash", {"command": "git push origin main"}, True),
        ("bash", {"command": "echo firmware"}, False),  # words, not substrings
        ("python_execute", {"code": "import shutil\nshutil.rmtree('x')"}, True),
        ("python_execute", {"code": "import requests"}, True),
        ("python_execute", {"code": "print(sum(range(10)))"}, False),
        ("str_replace_editor", {"command": "create", "path": "rm.txt"}, False),
        ("mcp_github_create_issue", {"title": "x"}, True),
        ("browser_use", {"action": "go_to_url", "url": "https://shop.example/"}, False),
        ("browser_use", {"action": "scroll_down"}, False),
        ("ask_human", {"inquire": "rm -rf?"}, False),
    ],
)
def test_the_built_in_risky_set(tool, arguments, gated):
    assert (gate_reason(RISKY, tool, arguments) is not None) == gated


def test_browser_actions_that_change_a_page_are_gated_outside_the_safe_hosts():
    policy = RISKY.model_copy(update={"safe_hosts": ["docs.example"]})
    click = {"action": "click_element", "index": 3}
    assert "shop.example" in gate_reason(policy, "browser_use", click, GateFacts(page_url="https://shop.example/cart"))
    assert gate_reason(policy, "browser_use", click, GateFacts(page_url="https://api.docs.example/x")) is None
    assert gate_reason(policy, "browser_use", click, GateFacts(page_url="https://docs.example.evil/x")) is not None


def test_mcp_tools_marked_read_only_run_unless_a_rule_names_them():
    assert gate_reason(RISKY, "mcp_fs_read", {}, GateFacts(read_only=True)) is None
    ruled = RISKY.model_copy(update={"rules": [ApprovalRule(tool="mcp_fs_.*")]})
    assert gate_reason(ruled, "mcp_fs_read", {}, GateFacts(read_only=True)) == "rule: tool mcp_fs_.*"
    assert gate_reason(ruled, "mcp_fsx", {}, GateFacts(read_only=True)) is None  # the whole name must match


def test_configured_rules_by_arguments_and_by_host():
    policy = RISKY.model_copy(
        update={
            "rules": [
                ApprovalRule(tool="python_execute", arguments=r"\bopen\(", why="writes files"),
                ApprovalRule(tool="browser_use", hosts=["bank.example"]),
            ]
        }
    )
    assert gate_reason(policy, "python_execute", {"code": "open('x', 'w')"}) == "writes files"
    go = {"action": "go_to_url", "url": "https://www.bank.example/login"}
    assert gate_reason(policy, "browser_use", go) is not None
    assert gate_reason(policy, "browser_use", {"action": "go_to_url", "url": "https://news.example/"}) is None


def test_modes_none_and_all():
    none = ApprovalPolicy(mode=ApprovalMode.NONE, rules=[ApprovalRule(tool=".*")])
    assert gate_reason(none, "bash", {"command": "rm -rf /"}) is None
    assert gate_reason(None, "bash", {"command": "rm -rf /"}) is None
    every = ApprovalPolicy(mode=ApprovalMode.ALL)
    assert gate_reason(every, "str_replace_editor", {"command": "view"}) is not None
    assert gate_reason(every, "terminate", {}, exempt=["terminate"]) is None
    assert gate_reason(every, "planning", {"command": "create"}) is None


def test_arguments_too_long_to_check_are_gated_unchecked():
    long_line = "x" * (MATCH_LINE_LIMIT + 1)
    reason = gate_reason(RISKY, "bash", {"command": f"echo {long_line}"})
    assert reason is not None and "too long to check" in reason


@pytest.mark.parametrize(
    "pattern, problem",
    [
        (r"\b(rm|curl|git\s+push)\b", None),
        ("mcp_github_.*", None),
        (r"rm\s+-rf", None),
        ("(a+)+", "repeats a group"),
        ("(a|aa)*", "repeats a group"),
        ("a.*b.*c", "without bound more than once"),
        ("a?b?", "more than one optional"),
        ("x{0,50}", "at most 8 times"),
        (r"(a)\1", "refers back"),
        ("(", "not a valid regular expression"),
        ("x" * 201, "longer than 200"),
        ("", "empty"),
    ],
)
def test_patterns_that_could_backtrack_for_long_are_refused(pattern, problem):
    found = check_pattern(pattern)
    assert found is None if problem is None else problem in found


def test_the_approval_table_loads_and_bad_patterns_are_one_line(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(
        '[approval]\nmode = "risky"\ntimeout_seconds = 120\non_timeout = "approve"\n'
        'rules = [{ tool = "bash", arguments = \'\\bmake\\b\' }]\n'
        '[approval.agent.swe]\nmode = "all"\nrules = [{ tool = "str_replace_editor" }]\n'
    )
    approval = load_settings(good, env={}).approval
    manus, swe = approval.policy_for("manus"), approval.policy_for("swe")
    assert (manus.mode, manus.timeout_seconds, manus.on_timeout.value) == (ApprovalMode.RISKY, 120, "approve")
    assert [r.tool for r in manus.rules] == ["bash"]
    assert swe.mode == ApprovalMode.ALL and [r.tool for r in swe.rules] == ["bash", "str_replace_editor"]
    assert approval.policy_for("swe", ApprovalMode.NONE).mode == ApprovalMode.NONE  # --approve wins
    assert load_settings(None, env={}).approval.policy_for("manus").mode == ApprovalMode.NONE  # the default

    bad = tmp_path / "bad.toml"
    bad.write_text('[approval]\nrules = [{ tool = "bash", arguments = "(a+)+" }]\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(bad, env={})
    assert "\n" not in str(refused.value) and "[approval]" in str(refused.value) and "(a+)+" in str(refused.value)


def test_the_desk_refuses_what_it_cannot_take():
    desk = ApprovalDesk()
    assert desk.refusal(ApprovalDecision(call_id="1.1", action=ApprovalAction.APPROVE)) == "no call is waiting for approval"
    desk.open(PendingApproval(id="2.1", tool="bash", arguments="{}", reason="r", since=NOW, timeout_seconds=60))
    edit = ApprovalDecision(call_id="2.1", action=ApprovalAction.EDIT, arguments="[1]")
    assert "not a JSON object" in desk.refusal(edit)
    said = desk.accept(
        ApprovalDecision(call_id="2.1", action=ApprovalAction.REJECT, reason="no\x1b[31m!", decided_by="a\nb"), "r", NOW
    )
    assert said == "call 2.1: reject received"
    assert desk.decision.reason == "no [31m!" and desk.decision.decided_by == "a b"
    assert "closed" in desk.refusal(ApprovalDecision(call_id="2.1", action=ApprovalAction.APPROVE))


def test_the_command_line_forms():
    assert parse_command(["run", "--approve", "all", "task"]).approve == ApprovalMode.ALL
    assert parse_command(["task"]).approve is None
    assert parse_command(["approve", "r1"]) == Approve(run_id="r1")
    assert parse_command(["approve", "r1", "3.2", "--edit", "{}"]) == Approve(run_id="r1", call="3.2", edit="{}")
    assert parse_command(["reject", "r1", "too risky"]) == Reject(run_id="r1", reason="too risky")
    assert parse_command(["reject", "r1", "3.2", "too risky"]) == Reject(run_id="r1", call="3.2", reason="too risky")
    assert parse_command(["reject", "r1", "3.2"]) == Reject(run_id="r1", call="3.2")
    with pytest.raises(UsageError, match="in quotes"):
        parse_command(["reject", "r1", "3.2", "too", "risky"])
    with pytest.raises(UsageError):
        parse_command(["run", "--approve", "sometimes", "task"])
