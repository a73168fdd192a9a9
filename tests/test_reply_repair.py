"""A model's reply made fit to keep (agent_model/reply_repair.py): valid
UTF-8 everywhere, tool-call ids that the next request can carry."""

from __future__ import annotations

import json

import pydantic_core

from agent_model.messages import Function, Message, ToolCall, assistant_message, tool_message, user_message
from agent_model.reply_repair import (
    MAX_CALL_ID_CHARS,
    repaired_reply,
    unique_call_ids,
    valid_json_escapes,
    valid_utf8,
)


def calls(*ids: str) -> list[ToolCall]:
    return [ToolCall(id=i, function=Function(name="bash", arguments="{}")) for i in ids]


def test_lone_surrogates_become_the_replacement_character():
    assert valid_utf8("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert valid_utf8("end\ud83d") == "end\ufffd"
    assert valid_utf8("\ud83d\ude00") == "\U0001f600"  # a pair given as two escapes is one character
    assert valid_utf8("plain é 😀") == "plain é 😀"


def test_escaped_lone_surrogates_in_json_arguments_decode_to_the_replacement_character():
    text = '{"a": "\\ud800x\\udc00", "pair": "\\ud83d\\ude00", "literal": "\\\\ud800", "other": "\\n\\u0041"}'
    assert json.loads(valid_json_escapes(text)) == {
        "a": "\ufffdx\ufffd", "pair": "\U0001f600", "literal": "\\ud800", "other": "\nA",
    }
    assert valid_json_escapes('{"a": 1}') == '{"a": 1}'


def test_repeated_and_empty_ids_are_renamed_in_order():
    renamed = unique_call_ids(calls("x", "x", "", " ", "x", "x-2"), taken=set())
    assert [c.id for c in renamed] == ["x", "x-2", "call_3", "call_4", "x-3", "x-2-2"]


def test_ids_already_used_in_the_window_are_renamed():
    window = [
        user_message("task"),
        assistant_message(None, calls("call_1", "x")),
        tool_message("ok", "call_1", "bash"),
        tool_message("ok", "x", "bash"),
    ]
    reply = repaired_reply(assistant_message(None, calls("", "x")), window)
    assert [c.id for c in reply.tool_calls] == ["call_1-2", "x-2"]


def test_a_renamed_long_id_stays_within_the_api_limit():
    long_id = "c" * MAX_CALL_ID_CHARS
    renamed = unique_call_ids(calls(long_id, long_id), taken=set())
    assert renamed[0].id == long_id
    assert len(renamed[1].id) == MAX_CALL_ID_CHARS and renamed[1].id.endswith("-2") and renamed[1].id != long_id


def test_an_id_over_the_api_limit_is_cut_and_stays_unique():
    """The API refuses (400) an id longer than MAX_CALL_ID_CHARS: a model that
    writes one (here 100,000 characters, twice, once sharing its first 40
    characters with the window) must not end the run."""
    huge = "h" * 100_000
    window = [assistant_message(None, calls(huge[:MAX_CALL_ID_CHARS]))]
    reply = repaired_reply(assistant_message(None, calls(huge, huge, "short")), window)
    ids = [c.id for c in reply.tool_calls]
    assert all(len(i) <= MAX_CALL_ID_CHARS for i in ids), [len(i) for i in ids]
    assert len(set(ids)) == 3 and huge[:MAX_CALL_ID_CHARS] not in ids and ids[2] == "short"


def test_a_repaired_reply_serializes_and_keeps_what_was_valid():
    reply = Message(
        role="assistant",
        content="think\ud800",
        tool_calls=[
            ToolCall(id="\udc00", function=Function(name="ba\ud800sh", arguments='{"cmd": "echo \\ud800"}')),
            ToolCall(id="\udc00", function=Function(name="bash", arguments='{"cmd": "ls"}')),
        ],
    )
    repaired = repaired_reply(reply)
    pydantic_core.to_json(repaired)  # raises on a lone surrogate
    assert repaired.content == "think\ufffd"
    assert [c.id for c in repaired.tool_calls] == ["\ufffd", "\ufffd-2"]
    assert repaired.tool_calls[0].function.name == "ba\ufffdsh"
    assert json.loads(repaired.tool_calls[0].function.arguments) == {"cmd": "echo \ufffd"}
    assert repaired.tool_calls[1].function.arguments == '{"cmd": "ls"}'


def test_a_clean_reply_is_unchanged():
    reply = assistant_message("hello", calls("a", "b"))
    assert repaired_reply(reply, [user_message("task")]) == reply
    assert repaired_reply(assistant_message("just text")).tool_calls is None
