"""Pure logic: messages, memory window, stuck detection, prompt filling, profiles."""

from __future__ import annotations

import re
import string

import pytest

from agent_model.memory import Memory
from agent_model.messages import (
    Function,
    Role,
    ToolCall,
    assistant_message,
    system_message,
    tool_message,
    user_message,
)
from agent_model.profiles import BUILTIN_PROFILES, UnknownAgent, get_profile
from agent_model.prompting import fill
from agent_model.run import AgentRunResult, StepRecord, ToolCallRecord, fit_records
from agent_model.state import AgentState, StopReason
from agent_model.stuck import is_stuck
from tools import TOOLS
from prompts import data_analysis, manus, planning, swe, toolcall


def tool_call(i: int, name: str = "python_execute", args: str = "{}") -> ToolCall:
    return ToolCall(id=f"call_{i}", function=Function(name=name, arguments=args))


def test_user_message_with_image_becomes_content_parts():
    wire = user_message("look", base64_image="QUJD").to_openai()
    assert wire["role"] == "user"
    assert wire["content"][0] == {"type": "text", "text": "look"}
    assert wire["content"][1]["image_url"]["url"] == "data:image/png;base64,QUJD"


def test_assistant_and_tool_messages_in_wire_shape():
    a = assistant_message(None, [tool_call(1)]).to_openai()
    assert a == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "python_execute", "arguments": "{}"}}],
    }
    t = tool_message("out", "call_1", "python_execute").to_openai()
    assert t == {"role": "tool", "content": "out", "name": "python_execute", "tool_call_id": "call_1"}
    assert system_message("s").to_openai() == {"role": "system", "content": "s"}


def turn(t: int, calls_per_turn: int) -> list:
    calls = [tool_call(t * 10 + c) for c in range(calls_per_turn)]
    return [
        user_message(f"next step {t}"),
        assistant_message(f"thought {t}", calls),
        *[tool_message(f"result {c.id}", c.id, "python_execute") for c in calls],
    ]


def conversation(turns: int, calls_per_turn: int) -> list:
    messages = [user_message("the original request")]
    for t in range(turns):
        messages += turn(t, calls_per_turn)
    return messages


def assert_valid_for_the_api(messages: list, turn_complete: bool = True) -> None:
    """Every tool reply follows its assistant message; every call is answered."""
    open_calls: set[str] = set()
    for m in messages:
        if m.role == Role.TOOL:
            assert m.tool_call_id in open_calls, "tool reply without its assistant message"
            open_calls.discard(m.tool_call_id)
        else:
            assert not open_calls, "assistant tool_calls left unanswered"
            if m.role == Role.ASSISTANT and m.tool_calls:
                open_calls = {c.id for c in m.tool_calls}
    if turn_complete:
        assert not open_calls


@pytest.mark.parametrize("max_messages", [1, 2, 3, 5, 7, 10, 25])
@pytest.mark.parametrize("calls_per_turn", [0, 1, 3])
def test_memory_window_stays_valid_and_keeps_the_request(max_messages, calls_per_turn):
    memory = Memory(max_messages=max_messages)
    memory.add(user_message("the original request"))
    for t in range(12):
        messages = turn(t, calls_per_turn)
        for i, message in enumerate(messages, start=1):
            memory.add(message)
            window = memory.window()
            assert window[0].content == "the original request"
            assert len(window) <= 1 + max_messages + 1 + calls_per_turn
            assert_valid_for_the_api(window, turn_complete=i == len(messages))
        # the latest observation is never dropped
        assert window[-1] == messages[-1]


def test_memory_keeps_everything_under_the_limit():
    memory = Memory(max_messages=100)
    messages = conversation(turns=5, calls_per_turn=2)
    memory.extend(messages)
    assert memory.window() == messages


def test_memory_drops_the_oldest_first():
    memory = Memory(max_messages=4)
    memory.extend(conversation(turns=6, calls_per_turn=1))
    contents = [m.content for m in memory.window()]
    assert contents[0] == "the original request"
    assert contents[-1] == "result call_50"
    assert "thought 0" not in contents


def replies(*texts, calls=None):
    out = [user_message("task")]
    for text in texts:
        out.append(assistant_message(text, calls))
        out.append(user_message("next"))
    return out


def test_stuck_after_threshold_identical_replies():
    assert not is_stuck(replies("a", "a"), threshold=2)
    assert is_stuck(replies("a", "a", "a"), threshold=2)
    assert not is_stuck(replies("a", "b", "a"), threshold=2)
    assert is_stuck(replies("a", "b", "a", "a"), threshold=2)


def test_stuck_counts_tool_calls_and_ignores_empty_replies():
    same_call = [tool_call(1, args='{"code": "print(1)"}')]
    assert is_stuck(replies(None, None, None, calls=same_call), threshold=2)
    assert not is_stuck(replies(None, None, None), threshold=2)
    different = replies(None, None, calls=same_call) + [
        assistant_message(None, [tool_call(2, args='{"code": "print(2)"}')])
    ]
    assert not is_stuck(different, threshold=2)


def test_fill_replaces_known_and_keeps_unknown_placeholders():
    assert fill("in {directory}, {other}", directory="/w") == "in /w, {other}"
    assert fill("no placeholders") == "no placeholders"


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_prompts_have_the_roles_and_placeholders_of_openmanus():
    assert placeholders(manus.SYSTEM_PROMPT) == {"directory"}
    assert placeholders(data_analysis.SYSTEM_PROMPT) == {"directory"}
    assert swe.NEXT_STEP_PROMPT == ""
    assert placeholders(toolcall.SYSTEM_PROMPT) == set()
    assert placeholders(planning.NEXT_STEP_PROMPT) == {"plan_status"}
    assert placeholders(planning.STEP_PROMPT) == {"plan_status", "step_number", "step_text"}
    assert placeholders(planning.PLAN_REQUEST) == {"task"}
    for module in (toolcall, manus, swe, data_analysis, planning):
        assert module.SYSTEM_PROMPT.strip()


def test_builtin_profiles_use_known_tools_and_end_with_terminate():
    assert {"toolcall", "manus", "swe", "data_analysis"} <= set(BUILTIN_PROFILES)
    for profile in BUILTIN_PROFILES.values():
        assert set(profile.tools) <= set(TOOLS), profile.name
        assert "terminate" in profile.tools and "terminate" in profile.special_tools
    assert get_profile("manus").max_observe == 10000
    assert get_profile("swe").max_tool_calls_per_step == 1
    with pytest.raises(UnknownAgent, match="known agents: browser, data_analysis, manus, mcp, planning, swe, toolcall"):
        get_profile("nope")


def test_tool_schemas_are_well_formed_function_tools():
    for name, spec in TOOLS.items():
        if spec.schema is None:  # a tool that offers only functions of its state (MCP)
            assert spec.state is not None and spec.state.answers is not None and spec.state.definitions is not None
            continue
        function = spec.schema["function"]
        assert spec.schema["type"] == "function"
        assert function["name"] == name
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name)
        assert function["parameters"]["type"] == "object"
        assert set(function["parameters"].get("required", [])) <= set(function["parameters"]["properties"])


def test_result_succeeded_only_for_finished_tasks():
    def result(state, reason):
        return AgentRunResult(agent="a", state=state, stop_reason=reason)

    assert result(AgentState.FINISHED, StopReason.TERMINATED).succeeded
    assert result(AgentState.FINISHED, StopReason.ANSWERED).succeeded
    assert not result(AgentState.FINISHED, StopReason.MAX_STEPS).succeeded
    assert not result(AgentState.FINISHED, StopReason.GAVE_UP).succeeded
    assert not result(AgentState.ERROR, StopReason.ERROR).succeeded
    assert not result(AgentState.CANCELLED, StopReason.CANCELLED).succeeded


def _records(steps: int, observation_chars: int) -> list[StepRecord]:
    return [
        StepRecord(
            step=i,
            thought=f"thought {i}",
            tool_calls=[ToolCallRecord(id=f"c{i}", name="bash", arguments='{"command": "ls"}',
                                       observation=str(i % 10) * observation_chars)],
        )
        for i in range(1, steps + 1)
    ]


def test_records_that_fit_the_result_budget_are_returned_whole():
    records = _records(10, 1000)
    assert fit_records(records, budget=100_000) is records


def test_long_runs_carry_cut_texts_within_the_budget():
    records = _records(300, 10_000)  # 3 MB of observations
    fitted = fit_records(records, budget=256_000)
    carried = sum(len(c.observation) + len(c.arguments) + len(r.thought or "") for r in fitted for c in r.tool_calls)
    assert carried < 300_000
    first = fitted[0].tool_calls[0]
    assert first.observation.startswith("1" * 200) and "more characters in the run's history" in first.observation
    assert fitted[0].thought == "thought 1" and first.arguments == '{"command": "ls"}'  # short texts stay whole
    assert records[0].tool_calls[0].observation == "1" * 10_000  # the run's own records are not changed
