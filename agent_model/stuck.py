"""Detecting an agent that repeats itself."""

from __future__ import annotations

from agent_model.messages import Message, Role

DEFAULT_DUPLICATE_THRESHOLD = 2
"""Earlier identical replies that make the latest one 'stuck' (OpenManus: 2)."""


def reply_signature(message: Message) -> str:
    """What makes two assistant replies 'the same': text and tool calls."""
    calls = "".join(
        f"|{c.function.name}:{c.function.arguments}" for c in message.tool_calls or []
    )
    return (message.content or "").strip() + calls


def is_stuck(messages: list[Message], threshold: int = DEFAULT_DUPLICATE_THRESHOLD) -> bool:
    """True when the last assistant reply repeats `threshold` earlier ones exactly.

    Unlike OpenManus, tool calls count, so an agent calling the same tool with the
    same arguments over and over is caught even when it writes no text.
    """
    assistant = [m for m in messages if m.role == Role.ASSISTANT]
    if not assistant:
        return False
    last = reply_signature(assistant[-1])
    if not last:
        return False
    repeats = sum(1 for m in assistant[:-1] if reply_signature(m) == last)
    return repeats >= threshold
