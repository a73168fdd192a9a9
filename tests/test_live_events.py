"""The live feed's pure parts, without a server: journal lines, a streamed
reply put back together, and redaction of text that arrives in pieces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_model.live_events import (
    JOURNAL_NAME, LIVE_DIR_NAME, MAX_EVENT_CHARS, MAX_LINE_BYTES, LiveEvent, decode, encode, journal_dir_name,
    journal_path, split_text,
)
from agent_model.stream_assembly import ChunkAssembler
from agent_model.stream_redaction import PieceRedactor
from agent_model.workspace_names import workspace_name_for

# ---- journal lines -------------------------------------------------------------------------


def test_an_event_survives_its_line():
    event = LiveEvent(run_id="run-1", step=3, kind="token", text='say "hi"\n\x1b[2J', channel="tool_call", at=12.5)
    line = encode(event)
    assert line.endswith("\n") and line.count("\n") == 1
    assert decode(line) == event
    assert decode(line.encode()) == event


def test_a_lone_surrogate_is_written_as_valid_utf8():
    line = encode(LiveEvent(run_id="r", step=None, kind="token", text="a\ud800b"))
    line.encode("utf-8")  # would raise on a surrogate
    assert decode(line).text == "a\ufffdb"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "not json",
        "[1, 2]",
        '{"run_id": "r", "kind": "token"',
        json.dumps({"run_id": "r", "step": 1, "kind": "shout", "text": "x"}),
        json.dumps({"run_id": "r", "step": 1, "kind": "token", "channel": "radio"}),
        json.dumps({"run_id": "r", "step": -1, "kind": "token"}),
        json.dumps({"run_id": "r", "step": True, "kind": "token"}),
        json.dumps({"run_id": "r", "step": "3", "kind": "token"}),
        json.dumps({"run_id": 7, "step": 1, "kind": "token"}),
        json.dumps({"run_id": "r", "step": 1, "kind": "token", "text": 5}),
        json.dumps({"run_id": "r", "step": 1, "kind": "token", "at": "now"}),
        '{"run_id": "r", "step": 1, "kind": "token", "at": NaN}',
        json.dumps({"run_id": "r", "step": 1, "kind": "token", "text": "x" * (MAX_EVENT_CHARS + 1)}),
        json.dumps({"run_id": "r" * 400, "step": 1, "kind": "token"}),
        "[" * 100_000,
    ],
)
def test_anything_but_an_event_decodes_to_none(line):
    assert decode(line) is None


def test_a_line_over_the_cap_is_refused_unread():
    line = json.dumps({"run_id": "r", "step": 1, "kind": "token", "text": "", "pad": "x" * MAX_LINE_BYTES})
    assert decode(line) is None


def test_the_longest_event_fits_the_cap():
    worst = encode(LiveEvent(run_id="r" * 300, step=10**9, kind="token", text="\x01" * MAX_EVENT_CHARS, at=1e12))
    assert len(worst.encode()) <= MAX_LINE_BYTES and decode(worst) is not None


def test_the_journal_lies_beside_the_run_directories():
    root = Path("/w")
    assert journal_path(root, "run-1") == root / LIVE_DIR_NAME / "run-1" / JOURNAL_NAME
    assert LIVE_DIR_NAME.startswith(".")  # a run name never does (agent_model/workspace_names.py)
    assert journal_dir_name("a/b") == workspace_name_for("a/b") != "a/b"


def test_text_is_split_into_events_of_bounded_size():
    assert split_text("") == []
    assert split_text("abcdefg", 3) == ["abc", "def", "g"]
    assert "".join(split_text("x" * 5001)) == "x" * 5001
    assert max(map(len, split_text("x" * 5001))) == MAX_EVENT_CHARS


# ---- a streamed reply, assembled -------------------------------------------------------------


def chunk(delta=None, finish=None, index=0, **extra):
    choices = [] if delta is None and finish is None else [{"index": index, "delta": delta or {}, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "model": "m", "created": 5, "choices": choices, **extra}


def test_content_tool_calls_and_usage_come_together():
    assembler = ChunkAssembler()
    deltas = []
    for piece in [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Let me "}),
        chunk({"content": "look."}),
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "read", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"p":'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "write", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "a"}'}}]}),
        chunk(finish="tool_calls"),
        chunk(usage={"prompt_tokens": 9, "completion_tokens": 4}),
    ]:
        deltas += assembler.add(piece)
    body = assembler.completion()
    assert body["id"] == "chatcmpl-1" and body["model"] == "m" and body["usage"] == {"prompt_tokens": 9, "completion_tokens": 4}
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    assert choice["message"]["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": '{"p": "a"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "write", "arguments": "{}"}},
    ]
    assert "".join(text for _, text in deltas) == 'Let me look.\nread {"p":\nwrite {} "a"}'
    assert {channel for channel, _ in deltas} == {"content", "tool_call"}


def test_a_call_only_reply_has_null_content_as_a_plain_reply_has():
    assembler = ChunkAssembler()
    assembler.add(chunk({"role": "assistant", "content": ""}))
    assembler.add(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "t", "arguments": "{}"}}]}))
    assert assembler.completion()["choices"][0]["message"]["content"] is None
    empty = ChunkAssembler()
    empty.add(chunk({"role": "assistant", "content": ""}))
    empty.add(chunk(finish="stop"))
    assert empty.completion()["choices"][0]["message"]["content"] == ""


def test_a_server_that_repeats_ids_and_names_is_not_doubled():
    assembler = ChunkAssembler()
    for arguments in ['{"a"', ": 1}"]:
        call = {"index": 0, "id": "call_x", "type": "function", "function": {"name": "run", "arguments": arguments}}
        assembler.add(chunk({"tool_calls": [call]}))
    (call,) = assembler.completion()["choices"][0]["message"]["tool_calls"]
    assert call == {"id": "call_x", "type": "function", "function": {"name": "run", "arguments": '{"a": 1}'}}


def test_whatever_a_chunk_holds_nothing_breaks():
    assembler = ChunkAssembler()
    for junk in [None, 3, "x", [], {"choices": "x"}, {"choices": [None, 4]}, {"choices": [{"delta": "x"}]},
                 {"choices": [{"delta": {"content": 5, "tool_calls": [None, {"function": 3}, {"index": -4}]}}]}]:
        assert assembler.add(junk) == []
    assert assembler.completion()["choices"][0]["message"]["content"] is None


def test_no_choices_at_all_is_an_empty_reply():
    assembler = ChunkAssembler()
    assembler.add(chunk(usage={"prompt_tokens": 1, "completion_tokens": 0}))
    assert assembler.completion()["choices"] == []


def test_only_the_first_choice_feeds_the_live_text():
    assembler = ChunkAssembler()
    assert assembler.add(chunk({"content": "b"}, index=1)) == []
    assert assembler.add(chunk({"content": "a"}, index=0)) == [("content", "a")]
    assert [c["message"]["content"] for c in assembler.completion()["choices"]] == ["a", "b"]


# ---- redaction of pieces ----------------------------------------------------------------------


def redactor(*secrets: str) -> PieceRedactor:
    def redact(text: str) -> str:
        for secret in sorted(secrets, key=len, reverse=True):
            text = text.replace(secret, "[REDACTED]")
        return text

    return PieceRedactor(list(secrets), redact)


def streamed(pieces: list[str], *secrets: str) -> tuple[list[str], str]:
    """What is released after each piece, and all of it after the flush."""
    stream = redactor(*secrets)
    released = [stream.add(piece) for piece in pieces]
    return released, "".join(released) + stream.flush()


def test_a_secret_split_across_pieces_is_redacted():
    for cut in range(1, 14):
        text = "key: sk-SECRET-123 there"
        pieces = [text[i : i + cut] for i in range(0, len(text), cut)]
        _, whole = streamed(pieces, "sk-SECRET-123")
        assert whole == "key: [REDACTED] there", cut


def test_text_that_cannot_begin_a_secret_streams_at_once():
    released, _ = streamed(["hello ", "world"], "sk-SECRET-123")
    assert released == ["hello ", "world"]


def test_a_possible_beginning_waits_and_is_released_when_it_is_not_one():
    released, whole = streamed(["see sk-", "S", "ay"], "sk-SECRET-123")
    assert released == ["see ", "", "sk-Say"]
    assert whole == "see sk-Say"


def test_the_end_of_the_text_releases_what_is_held():
    stream = redactor("sk-SECRET-123")
    assert stream.add("ends with sk-SEC") == "ends with "
    assert stream.flush() == "sk-SEC"


def test_overlapping_secrets_are_both_kept_out():
    text = "x abcdefghij y"
    for cut in range(1, 6):
        pieces = [text[i : i + cut] for i in range(0, len(text), cut)]
        _, whole = streamed(pieces, "abcdefgh", "efghij12", "defghij")
        assert "abcdefgh" not in whole and "defghij" not in whole, (cut, whole)


def test_without_secrets_nothing_is_held():
    released, whole = streamed(["a", "b"])
    assert released == ["a", "b"] and whole == "ab"
