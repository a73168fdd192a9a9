"""agent_model/trace_attributes.py without a server: names the model writes
are made safe, ids are stable, outcomes and replies are said as the GenAI
conventions say them, and no content leaks into the plain attributes."""

from __future__ import annotations

import json

from agent_model import trace_attributes as ta
from agent_model.llm_io import ThinkResponse
from agent_model.messages import Function, Message, Role, ToolCall
from agent_model.usage import TokenUsage


def reply(content: str | None, calls: list[tuple[str, str]] = (), finish: str | None = "tool_calls") -> ThinkResponse:
    message = Message(
        role=Role.ASSISTANT,
        content=content,
        tool_calls=[ToolCall(id=f"call_{i}", function=Function(name=n, arguments=a)) for i, (n, a) in enumerate(calls)] or None,
    )
    return ThinkResponse(message=message, usage=TokenUsage(prompt_tokens=7, completion_tokens=3, cached_prompt_tokens=2), finish_reason=finish, model="gpt-4o-2024")


def test_a_name_the_model_wrote_is_bounded_and_plain():
    assert ta.tool_span_name("python_execute") == "execute_tool python_execute"
    assert ta.plain_name("\x1b[31mrm -rf /\x1b[0m") == "__31mrm_-rf_/__0m"
    assert len(ta.plain_name("x" * 500)) == ta.NAME_CHARS
    assert ta.plain_name("") == "_"


def test_span_ids_are_stable_and_distinct():
    a = ta.span_id_of("run-1", "r1", "step/1")
    assert a == ta.span_id_of("run-1", "r1", "step/1") and 0 < a < 2**64
    assert len({a, ta.span_id_of("run-1", "r1", "step/2"), ta.span_id_of("run-1", "r2", "step/1")}) == 3
    assert ta.trace_id_of("run-1", "r1") != ta.trace_id_of("run-1", "r2") and ta.trace_id_of("run-1", "r1") < 2**128


def test_tool_outcomes():
    assert ta.tool_end_attributes(error=False, ran=True) == {ta.TOOL_OUTCOME: "ok"}
    assert ta.tool_end_attributes(error=True, ran=True) == {ta.TOOL_OUTCOME: "error", ta.ERROR_TYPE: "tool_error"}
    assert ta.tool_end_attributes(error=True, ran=False, approval="reject") == {
        ta.TOOL_OUTCOME: "not_run", ta.ERROR_TYPE: "tool_not_run", ta.APPROVAL: "reject",
    }


def test_a_chat_says_tokens_model_and_finish_reason_but_no_content():
    ended = ta.chat_end_attributes(reply("the secret plan", [("bash", '{"command": "ls"}')]))
    assert ended == {
        ta.INPUT_TOKENS: 7, ta.OUTPUT_TOKENS: 3, ta.CACHED_INPUT_TOKENS: 2,
        ta.RESPONSE_MODEL: "gpt-4o-2024", ta.FINISH_REASONS: ["tool_calls"],
    }
    asked = ta.chat_attributes("default", "gpt-4o", "azure", 4096, 0.0, "example.openai.azure.com", 443)
    assert asked[ta.PROVIDER] == asked[ta.SYSTEM] == "azure.ai.openai"
    assert ta.chat_attributes("local", "qwen", "ollama", 1, 0.0, None, None)[ta.PROVIDER] == "ollama"


def test_output_messages_are_json_within_the_limit():
    long = "y" * 50_000
    text = ta.output_messages(reply(long, [("python_execute", long)] * 3), limit=4000)
    (message,) = json.loads(text)
    assert message["role"] == "assistant" and message["finish_reason"] == "tool_calls"
    assert [part["type"] for part in message["parts"]] == ["text", "tool_call", "tool_call", "tool_call"]
    assert len(text) < 4000 + 500


def test_printable_keeps_lines_and_drops_terminal_escapes():
    assert ta.printable("a\nb\tc\x1b[2Jd\x07") == "a\nb\tc [2Jd "
