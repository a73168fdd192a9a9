"""The worker's side of agent_model/think_context.py: each run's current
window, so a think request needs to carry only what is new.

Bounded by size, least recently used run first. It is the fast path in front of
the store all workers share (activities/context_store.py): what it lacks is
fetched from there by digest. Only when both lack something does the activity
say ThinkContextMissing, and the workflow sends the complete request again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from agent_model.llm_io import ContextRef, ThinkRequest
from agent_model.messages import Message
from agent_model.errors import CONTEXT_MISSING_ERROR

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Approximate memory held for all runs together (256 MiB). A full 100-message
window of 10 KB observations is ~1 MB, one of short messages ~100 KB, so this
keeps a few hundred to a few thousand recent runs."""


MESSAGE_OVERHEAD = 600
TOOL_CALL_OVERHEAD = 1000
"""Bytes a cached Message takes besides its text, and per tool call besides
its arguments (tracemalloc: ~700 B for a message with 100 characters, ~1.7 KB
for an assistant message with one short tool call)."""
TOOL_SCHEMA_SIZE = 2048
"""Bytes counted per tool schema (an estimate: schemas are small and fixed)."""


def message_size(message: Message) -> int:
    """Approximate memory of one cached message."""
    size = MESSAGE_OVERHEAD + len(message.content or "") + len(message.base64_image or "")
    for call in message.tool_calls or []:
        size += TOOL_CALL_OVERHEAD + len(call.function.arguments)
    return size


@dataclass
class _Entry:
    messages: dict[int, tuple[str | None, Message]] = field(default_factory=dict)
    """By id: the message and its digest as the workflow named it."""
    system: tuple[str, str] | None = None
    tools: tuple[str, list[dict[str, Any]]] | None = None
    size: int = 0


@dataclass
class Resolved:
    system_prompt: str | None
    messages: list[Message]
    tools: list[dict[str, Any]] | None


_Part = TypeVar("_Part")


def _held(digest: str | None, part: _Part | None) -> tuple[str, _Part] | None:
    """A digest exists only for a part that was sent, so both are set or neither."""
    return (digest, part) if digest is not None and part is not None else None


class ThinkContextCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._size = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        return self._size

    def lacking(self, request: ThinkRequest) -> list[tuple[str, str]]:
        """What the request refers to that neither it nor this cache holds, as
        (kind, digest) pairs: kind "message", "system" or "tools". A message
        without a digest (a think scheduled before digests) is ("message", "")."""
        return self._assemble(request, {})[3]

    def resolve(self, request: ThinkRequest, fetched: Mapping[str, Any] | None = None) -> Resolved:
        """The complete request, taking what this cache lacks from `fetched`
        (values by digest, already verified); remembers it for the run's next
        think. Raises a non-retryable ThinkContextMissing ApplicationError when
        something is still missing."""
        ref = request.context
        if ref is None:
            return Resolved(request.system_prompt, request.messages, request.tools)
        messages, system, tools, missing = self._assemble(request, fetched or {})
        if missing:
            self.misses += 1
            lost = sum(kind == "message" for kind, _ in missing)
            raise ApplicationError(
                f"neither this worker nor the shared store holds the run's earlier messages "
                f"({lost} of {len(ref.window)} missing); the workflow sends them again",
                type=CONTEXT_MISSING_ERROR,
                non_retryable=True,
                # Expected after a restart or on another worker: logged at DEBUG, no failure metric.
                category=ApplicationErrorCategory.BENIGN,
            )
        parts = Resolved(system, [m for m in messages if m is not None], tools)
        self._store(ref, parts)
        return parts

    def _assemble(
        self, request: ThinkRequest, fetched: Mapping[str, Any]
    ) -> tuple[list[Message | None], Any, Any, list[tuple[str, str]]]:
        ref = request.context
        assert ref is not None
        entry = self._entries.get(ref.key) or _Entry()
        digests = ref.digests if ref.digests is not None and len(ref.digests) == len(ref.window) else None
        new = iter(request.messages)
        stored = set(ref.stored)
        messages: list[Message | None] = []
        missing: list[tuple[str, str]] = []
        for position, message_id in enumerate(ref.window):
            wanted = digests[position] if digests else None
            if message_id > ref.known_through and message_id not in stored:
                message = next(new, None)
            else:
                held = entry.messages.get(message_id)
                # Ids are never reused within a run; the digest check guards the rest.
                message = held[1] if held is not None and (wanted is None or held[0] in (None, wanted)) else None
                if message is None and wanted is not None:
                    message = fetched.get(wanted)
            if message is None:
                missing.append(("message", wanted or ""))
            messages.append(message)
        if next(new, None) is not None:
            missing.append(("message", ""))
        system = self._part(request.system_prompt, ref.system_digest, entry.system, fetched)
        tools = self._part(request.tools, ref.tools_digest, entry.tools, fetched)
        if system is _MISSING:
            missing.append(("system", ref.system_digest or ""))
        if tools is _MISSING:
            missing.append(("tools", ref.tools_digest or ""))
        return messages, system, tools, missing

    @staticmethod
    def _part(sent: Any, wanted: str | None, held: tuple[str, Any] | None, fetched: Mapping[str, Any]) -> Any:
        if wanted is None or sent is not None:
            return sent
        if held is not None and held[0] == wanted:
            return held[1]
        return fetched.get(wanted, _MISSING)

    def _store(self, ref: ContextRef, parts: Resolved) -> None:
        old = self._entries.pop(ref.key, None)
        if old is not None:
            self._size -= old.size
        digests: list[str | None] = list(ref.digests) if ref.digests else [None] * len(ref.window)
        entry = _Entry(
            messages=dict(zip(ref.window, zip(digests, parts.messages))),
            system=_held(ref.system_digest, parts.system_prompt),
            tools=_held(ref.tools_digest, parts.tools),
            size=sum(map(message_size, parts.messages))
            + len(parts.system_prompt or "")
            + TOOL_SCHEMA_SIZE * len(parts.tools or []),
        )
        self._entries[ref.key] = entry
        self._size += entry.size
        while self._size > self.max_bytes and len(self._entries) > 1:
            _, evicted = self._entries.popitem(last=False)
            self._size -= evicted.size


_MISSING = object()
