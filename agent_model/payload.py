"""Keeping what the workflows hand to Temporal under its payload limit.

Temporal refuses a payload over 2 MiB: a workflow result, activity input or
query answer that large fails the workflow task on every retry, and the run
is stuck RUNNING. The model's replies and the tools' outputs are long at
will, so every payload built from them is bounded here, by measuring it as
the pydantic data converter will write it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel

PAYLOAD_LIMIT = 1024 * 1024
"""Bytes of JSON that one result, activity input or query answer of ours may
have: half of Temporal's 2 MiB, so that the envelope around it always fits."""
MIN_TEXT = 200
"""No text is cut below this many characters."""
DETAILS_LIMIT = 16_000
"""Characters of a workflow's current details (the Web UI's summary)."""

Value = TypeVar("Value")


def json_size(value: Any) -> int:
    """Bytes of `value` as JSON, as the pydantic data converter writes it."""
    return len(pydantic_core.to_json(value))


def clip(text: str, limit: int | None, where: str = "cut") -> str:
    """text, or its first `limit` characters and a note saying how many more
    characters are `where`; None = no limit."""
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n... [{len(text) - limit} more characters {where}]"


def longest_text(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, BaseModel):
        return max((longest_text(v) for v in value.__dict__.values()), default=0)
    if isinstance(value, dict):
        return max((longest_text(v) for v in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return max((longest_text(v) for v in value), default=0)
    return 0


def map_texts(value: Value, change: Callable[[str], str]) -> Value:
    """A copy of `value` (models, lists, tuples, dicts) with `change` applied
    to every string in it."""
    return _mapped(value, change)


def _mapped(value: Any, change: Callable[[str], str]) -> Any:
    # Any, not Value: the copies built below are not typed by narrowing a TypeVar.
    if isinstance(value, str):
        return change(value)
    if isinstance(value, BaseModel):
        return value.model_copy(update={k: _mapped(v, change) for k, v in value.__dict__.items()})
    if isinstance(value, dict):
        return {_mapped(k, change): _mapped(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_mapped(v, change) for v in value)
    return value


def clip_texts(value: Value, limit: int, where: str = "cut") -> Value:
    """A copy of `value` with every string clipped to `limit` characters."""
    return map_texts(value, lambda text: clip(text, limit, where))


def fit(value: Value, limit: int = PAYLOAD_LIMIT, where: str = "cut") -> Value:
    """`value`, with its longest texts cut (never below MIN_TEXT characters)
    until its JSON is at most `limit` bytes; unchanged when it already fits."""
    if json_size(value) <= limit:
        return value
    cap = longest_text(value)
    fitted = value
    while cap > MIN_TEXT and json_size(fitted) > limit:
        cap = max(MIN_TEXT, cap // 2)
        fitted = clip_texts(value, cap, where)
    return fitted


def first_within(items: Sequence[Value], limit: int = PAYLOAD_LIMIT, where: str = "cut") -> list[Value]:
    """The first items whose JSON together stays within `limit` bytes; at
    least the first one, fitted to `limit`."""
    kept: list[Value] = []
    total = 2  # the list's brackets
    for item in items:
        total += json_size(item) + 1
        if total > limit:
            break
        kept.append(item)
    if not kept and items:
        kept.append(fit(items[0], limit, where))
    return kept


def newest_within(items: Sequence[Value], limit: int = PAYLOAD_LIMIT, where: str = "cut") -> list[Value]:
    """Like first_within, from the end of `items`; oldest first."""
    return first_within(items[::-1], limit, where)[::-1]
