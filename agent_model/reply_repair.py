"""A model's reply made fit to keep: valid UTF-8 text, and tool-call ids the
next request can use.

The reply goes into the run's history and, as the assistant message, into
every later request. A lone surrogate (JSON "\\ud800" is valid JSON, but no
UTF-8 can carry it) makes the reply impossible to serialize; an id that is
empty or repeats another makes the next request one the API refuses (400).
Either would end the run, so both are repaired before the reply leaves the
think activity. Deterministic: the same reply and window give the same ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent_model.messages import Function, Message, ToolCall

MAX_CALL_ID_CHARS = 40
"""OpenAI refuses a tool_call id longer than this; a renamed id stays within it."""
NUMBERED_ID = "call_{n}"
"""The id given to a call that came without one; n is its place in the reply, from 1."""


def valid_utf8(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (a pair written as
    two escapes becomes the character it encodes)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_JSON_ESCAPE = re.compile(
    r"\\(u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[dD][89a-fA-F][0-9a-fA-F]{2}|.)", re.DOTALL
)
"""One backslash escape of JSON text, read left to right (so an escaped
backslash is never taken for the start of the next escape): a surrogate
pair, a lone surrogate, or any other."""


def valid_json_escapes(text: str) -> str:
    """JSON text whose strings decode without lone surrogates: each escape
    of one (\\ud800) becomes \\ufffd; pairs and other escapes stay."""
    if "\\u" not in text:
        return text

    def repaired(escape: re.Match[str]) -> str:
        body = escape.group(1)
        return "\\ufffd" if len(body) == 5 and body[0] == "u" else escape.group()

    return _JSON_ESCAPE.sub(repaired, text)


def ids_in(messages: Iterable[Message]) -> set[str]:
    """The tool-call ids the window uses: its calls' and its tool replies'."""
    ids: set[str] = set()
    for message in messages:
        ids.update(call.id for call in message.tool_calls or [])
        if message.tool_call_id is not None:
            ids.add(message.tool_call_id)
    return ids


def unique_id(wanted: str, used: set[str], tried: dict[str, int]) -> str:
    """`wanted` (cut to MAX_CALL_ID_CHARS), or `wanted-2`, `wanted-3`, ...: the
    first not in `used`. `tried` remembers the last suffix per id, so a reply
    that repeats one id a thousand times costs a thousand steps, not a million."""
    n = tried.get(wanted, 1)
    candidate = wanted[:MAX_CALL_ID_CHARS]
    while candidate in used:
        n += 1
        suffix = f"-{n}"
        candidate = wanted[: MAX_CALL_ID_CHARS - len(suffix)] + suffix
    tried[wanted] = n
    return candidate


def unique_call_ids(calls: list[ToolCall], taken: set[str]) -> list[ToolCall]:
    """The calls, each with an id of its own that the API takes: an empty id
    becomes call_<n>, a longer one than MAX_CALL_ID_CHARS is cut, one that
    repeats an earlier call's (in this reply or in `taken`, the window's)
    gets a suffix."""
    used = set(taken)
    tried: dict[str, int] = {}
    renamed: list[ToolCall] = []
    for n, call in enumerate(calls, 1):
        wanted = call.id if call.id.strip() else NUMBERED_ID.format(n=n)
        new_id = unique_id(wanted, used, tried)
        used.add(new_id)
        renamed.append(call if new_id == call.id else call.model_copy(update={"id": new_id}))
    return renamed


def valid_call(call: ToolCall) -> ToolCall:
    return ToolCall(
        id=valid_utf8(call.id),
        type=valid_utf8(call.type),
        function=Function(
            name=valid_utf8(call.function.name), arguments=valid_json_escapes(valid_utf8(call.function.arguments))
        ),
    )


def repaired_reply(reply: Message, window: Iterable[Message] = ()) -> Message:
    """The assistant reply with valid UTF-8 everywhere and tool-call ids that
    are neither empty nor used twice, nor used already in `window`."""
    calls = [valid_call(call) for call in reply.tool_calls or []]
    content = valid_utf8(reply.content) if reply.content is not None else None
    return reply.model_copy(
        update={"content": content, "tool_calls": unique_call_ids(calls, ids_in(window)) or None}
    )
