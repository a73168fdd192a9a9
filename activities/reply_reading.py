"""A Chat Completions reply read into our models, whatever the server sent.

The completion is built without validation (ChatCompletion.construct), so a
field may hold any JSON value: a number for the content, a dict for the
arguments, null for an id, a string for the token counts. Each is turned
into what our models expect here, and the text is made valid UTF-8
(agent_model/reply_repair.py), because the call is paid for already: a reply
that cannot be kept must not fail the activity into a retry.
"""

from __future__ import annotations

import json
from typing import Any

from agent_model.llm_io import ThinkResponse
from agent_model.messages import Function, Message, ToolCall, assistant_message
from agent_model.reply_repair import repaired_reply, valid_utf8
from agent_model.usage import TokenUsage

UNREADABLE_REPLY_TOOL = "reply_not_readable"
"""The call that stands for a reply that could not be read: no tool has this
name, so the model is told in the observation, and the run goes on."""
UNREADABLE_REPLY_ID = "call_reply_not_readable"


def part(value: Any, name: str) -> Any:
    """A field of an SDK object, or of the dict that stands in for one."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def as_text(value: Any) -> str | None:
    """A string as valid UTF-8; any other JSON value as its JSON text; None stays None."""
    if value is None or isinstance(value, str):
        return None if value is None else valid_utf8(value)
    try:
        return valid_utf8(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return valid_utf8(str(value))


def as_count(value: Any) -> int:
    """A token count: a non-negative integer, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_of(completion: Any) -> TokenUsage:
    usage = part(completion, "usage")
    return TokenUsage(
        prompt_tokens=as_count(part(usage, "prompt_tokens")),
        completion_tokens=as_count(part(usage, "completion_tokens")),
        cached_prompt_tokens=as_count(part(part(usage, "prompt_tokens_details"), "cached_tokens")),
    )


def tool_calls_of(message: Any) -> list[ToolCall]:
    calls = part(message, "tool_calls")
    if not isinstance(calls, list):
        return []
    read: list[ToolCall] = []
    for call in calls:
        function = part(call, "function")
        if function is None:
            continue  # not a function call (a custom tool's): nothing here runs it
        read.append(
            ToolCall(
                id=as_text(part(call, "id")) or "",
                function=Function(
                    name=as_text(part(function, "name")) or "", arguments=as_text(part(function, "arguments")) or ""
                ),
            )
        )
    return read


def reply_of(choice: Any, window: list[Message]) -> Message:
    """The assistant message of `choice`, repaired: valid text, unique tool-call ids."""
    message = part(choice, "message")
    return repaired_reply(assistant_message(as_text(part(message, "content")), tool_calls_of(message)), window)


def response_of(completion: Any, choice: Any, window: list[Message], model: str) -> ThinkResponse:
    """The think's result for a completion and its first choice."""
    finish_reason = part(choice, "finish_reason")
    answered_by = part(completion, "model")
    return ThinkResponse(
        message=reply_of(choice, window),
        usage=usage_of(completion),
        finish_reason=valid_utf8(finish_reason) if isinstance(finish_reason, str) else None,
        model=valid_utf8(answered_by) if isinstance(answered_by, str) and answered_by else model,
    )


def unreadable_reply(error: Exception, usage: TokenUsage, model: str, window: list[Message]) -> ThinkResponse:
    """What a think returns for a reply it could not read: the failure as a
    note and as a call of a tool that does not exist, which the run answers
    with an observation. Asking again would bill the call again."""
    note = f"the model's reply could not be read ({type(error).__name__}: {valid_utf8(str(error))[:300]})"
    message = repaired_reply(
        assistant_message(
            f"[{note}; it was replaced by this note]",
            [ToolCall(id=UNREADABLE_REPLY_ID, function=Function(name=UNREADABLE_REPLY_TOOL, arguments="{}"))],
        ),
        window,
    )
    return ThinkResponse(message=message, usage=usage, finish_reason=None, model=model, note=note)
