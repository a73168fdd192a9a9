"""The agent's conversation memory: a bounded window that stays valid for the API."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_model.messages import Message, Role

DEFAULT_MAX_MESSAGES = 100
"""Messages kept besides the original request (OpenManus keeps 100)."""


class Memory(BaseModel):
    """Messages of one run, oldest first.

    The first user message (the original request) is always kept. When the
    window overflows, the oldest messages after it are dropped, but never inside
    a tool-call group (an assistant message with tool_calls and its tool
    replies): a group at the cut is kept whole, so the window may exceed
    max_messages by the size of one group, and the API never sees a tool reply
    without its call or a call without its replies.
    """

    messages: list[Message] = Field(default_factory=list)
    ids: list[int] = Field(default_factory=list)
    """ids[i] numbers messages[i]: 0, 1, 2, ... in the order added, never reused,
    so a think can send each message once (agent_model/think_context.py)."""
    max_messages: int = DEFAULT_MAX_MESSAGES
    next_id: int = 0

    def add(self, message: Message) -> None:
        self.messages.append(message)
        self.ids.append(self.next_id)
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
        if len(rest) <= self.max_messages:
            return
        start = len(rest) - self.max_messages
        while start > 0 and self.messages[rest[start]].role == Role.TOOL:
            start -= 1  # back to the assistant message that made these calls
        kept = [i for i, m in enumerate(self.messages) if m is request] + rest[start:]
        self.messages = [self.messages[i] for i in kept]
        self.ids = [self.ids[i] for i in kept]
