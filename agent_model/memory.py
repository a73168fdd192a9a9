"""The agent's conversation memory: a bounded window that stays valid for the API."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_model.messages import Message, Role
from agent_model.payload import PAYLOAD_LIMIT, json_size

DEFAULT_MAX_MESSAGES = 100
"""Messages kept besides the original request (OpenManus keeps 100)."""
DEFAULT_MAX_BYTES = PAYLOAD_LIMIT
"""JSON bytes of the window: a worker that lost the run's context gets the
whole window in one think request, which Temporal refuses over 2 MiB."""


class Memory(BaseModel):
    """Messages of one run, oldest first.

    The first user message (the original request) is always kept. When the
    window overflows (max_messages, or max_bytes of JSON), the oldest messages
    after it are dropped, but never inside a tool-call group (an assistant
    message with tool_calls and its tool replies): a group at the cut is kept
    whole when counting messages (so the window may exceed max_messages by the
    size of one group) and dropped whole when counting bytes (but never the
    newest group), and the API never sees a tool reply without its call or a
    call without its replies.
    """

    messages: list[Message] = Field(default_factory=list)
    ids: list[int] = Field(default_factory=list)
    """ids[i] numbers messages[i]: 0, 1, 2, ... in the order added, never reused,
    so a think can send each message once (agent_model/think_context.py)."""
    sizes: list[int] = Field(default_factory=list)
    """sizes[i]: bytes of messages[i] as JSON."""
    max_messages: int = DEFAULT_MAX_MESSAGES
    max_bytes: int = DEFAULT_MAX_BYTES
    next_id: int = 0

    def add(self, message: Message) -> None:
        self.messages.append(message)
        self.ids.append(self.next_id)
        self.sizes.append(json_size(message))
        self.next_id += 1
        self._trim()

    def extend(self, messages: list[Message]) -> None:
        for message in messages:
            self.add(message)

    @property
    def request(self) -> Message | None:
        """The original request: the first user message."""
        for message in self.messages:
            if message.role == Role.USER:
                return message
        return None

    def window(self) -> list[Message]:
        """The whole (already bounded) memory, oldest first."""
        return list(self.messages)

    def numbered_window(self) -> list[tuple[int, Message]]:
        """The window with each message's id; ids increase along it."""
        return list(zip(self.ids, self.messages))

    def _trim(self) -> None:
        request = self.request
        rest = [i for i, m in enumerate(self.messages) if m is not request]
        group_starts = [k for k, i in enumerate(rest) if self.messages[i].role != Role.TOOL] or [0]
        start = self._start_by_count(len(rest), group_starts)
        start = self._start_by_bytes(rest, group_starts, start, request)
        if start == 0:
            return
        kept = [i for i, m in enumerate(self.messages) if m is request] + rest[start:]
        self.messages = [self.messages[i] for i in kept]
        self.ids = [self.ids[i] for i in kept]
        self.sizes = [self.sizes[i] for i in kept]

    def _start_by_count(self, count: int, group_starts: list[int]) -> int:
        """Where the kept messages begin so that about max_messages are kept:
        back to the start of the group at the cut."""
        cut = count - self.max_messages
        if cut <= 0:
            return 0
        return max((s for s in group_starts if s <= cut), default=0)

    def _start_by_bytes(self, rest: list[int], group_starts: list[int], start: int, request: Message | None) -> int:
        """The first group start from `start` on after which the window fits
        in max_bytes; at the latest, the newest group's."""
        budget = self.max_bytes - sum(size for size, m in zip(self.sizes, self.messages) if m is request)
        remaining = sum(self.sizes[i] for i in rest[start:])
        position = start
        for group_start in (s for s in group_starts if s >= start):
            remaining -= sum(self.sizes[i] for i in rest[position:group_start])
            position = group_start
            if remaining <= budget:
                break
        return position
