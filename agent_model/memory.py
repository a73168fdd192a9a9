"""The agent's conversation memory: a bounded window that stays valid for the API."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field, model_validator

from agent_model.messages import Message, Role
from agent_model.payload import PAYLOAD_LIMIT, fit, json_size
from agent_model.token_estimate import message_tokens


class WindowBudgets(Protocol):
    """What a memory's bounds come from (an AgentProfile), named here so that
    profiles, which take their defaults from this module, are not imported."""

    @property
    def max_memory_messages(self) -> int: ...

    @property
    def max_window_tokens(self) -> int: ...

DEFAULT_MAX_MESSAGES = 100
"""Messages kept besides the original request (OpenManus keeps 100)."""
DEFAULT_MAX_TOKENS = 80_000
"""Estimated tokens of the window (agent_model/token_estimate.py). The estimate
runs 15-60% above the real count, so this is ~50-70k real tokens: with the
system prompt, the tool schemas (a few thousand) and the default 4096-token
reply it fits a 128k-context model even if the estimate were 25% low. Lower
it (AgentProfile.max_window_tokens) for models with smaller contexts."""
REQUEST_LIMIT = PAYLOAD_LIMIT
"""JSON bytes of a complete think request: the window, the system prompt, the
tool schemas and the context reference. A worker that lost the run's context
is sent all of it in one activity input, which Temporal refuses over 2 MiB;
like every payload of ours it stays within half of that."""
DEFAULT_RESERVED_BYTES = 64 * 1024
"""Of REQUEST_LIMIT, the bytes kept for what a request carries besides the
window until `reserve` says exactly: the built-in profiles' system prompts
(with a 4096-character directory), all tool schemas together and the request's
other fields take at most ~8 KiB (tests/test_window_budget.py)."""
REQUEST_ENVELOPE_BYTES = 1024
"""The request's fields besides the window, the prompt and the tools: model
profile name, run key, digests of prompt and tools, field names."""
REF_BYTES_PER_MESSAGE = 48
"""What each window message adds to a request's context reference: its id (up
to 20 digits) and its 16-digit digest, quoted, with separators."""
MAX_USER_MESSAGE_BYTES = REQUEST_LIMIT // 4
"""JSON bytes of a user message as memory keeps it (the task, a next-step
prompt with a plan in it): a longer one is cut, with a note, so that the task,
the newest tool-call group and the prompt after it always fit in one think
request. The full task stays in the run's input. Messages with an image
(inline or by file) are kept as they are."""


class Memory(BaseModel):
    """Messages of one run, oldest first.

    The first user message (the original request) is always kept; user
    messages longer than MAX_USER_MESSAGE_BYTES of JSON are cut. When the
    window overflows, the oldest messages after the request are dropped, whole
    tool-call groups at a time (an assistant message with tool_calls and its
    tool replies; any other message is a group of its own), until all three
    budgets hold:

    - max_messages: a group at the cut is kept whole, so the window may exceed
      max_messages by the size of one group;
    - max_tokens: estimated tokens of the window (agent_model/token_estimate.py);
    - max_bytes: JSON bytes of a complete think request, i.e. the window with
      each message's context reference, plus `reserved_bytes` for the system
      prompt, the tool schemas and the request's other fields.

    The newest tool-call group (the last assistant message and everything after
    it) is never dropped, even when it alone is over a budget, so the model
    always sees its last reply and what its tools answered: a budget is
    exceeded only when the request and that group alone exceed it. With the
    parts bounded as they are (a reply within 512 KiB, each observation within
    the profile's max_observe characters, user messages cut), a complete
    request then still stays under Temporal's 2 MiB for replies of up to four
    tool calls (tests/test_window_budget.py); nothing here bounds the number
    of calls in one reply. The API never sees a tool reply without its call or
    a call without its replies.
    """

    messages: list[Message] = Field(default_factory=list)
    ids: list[int] = Field(default_factory=list)
    """ids[i] numbers messages[i]: 0, 1, 2, ... in the order added, never reused,
    so a think can send each message once (agent_model/think_context.py)."""
    sizes: list[int] = Field(default_factory=list)
    """sizes[i]: bytes of messages[i] as JSON."""
    tokens: list[int] = Field(default_factory=list)
    """tokens[i]: estimated tokens of messages[i]."""
    max_messages: int = DEFAULT_MAX_MESSAGES
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_bytes: int = REQUEST_LIMIT
    reserved_bytes: int = DEFAULT_RESERVED_BYTES
    next_id: int = 0

    @model_validator(mode="after")
    def _measure_what_was_not(self) -> Memory:
        """Memory carried by a run of an earlier version (continue-as-new) has
        no token estimates: made here, from its messages."""
        if len(self.tokens) != len(self.messages):
            self.tokens = [message_tokens(m) for m in self.messages]
        if len(self.sizes) != len(self.messages):
            self.sizes = [json_size(m) for m in self.messages]
        return self

    @classmethod
    def for_profile(cls, profile: WindowBudgets) -> Memory:
        """An empty memory with the profile's budgets."""
        return cls(max_messages=profile.max_memory_messages, max_tokens=profile.max_window_tokens)

    def add(self, message: Message) -> int:
        """Appends `message` and returns the id it was given. The message kept
        is `message` itself, except a user message longer than
        MAX_USER_MESSAGE_BYTES: then a cut copy (assistant replies and tool
        observations are never changed, so their digests stay those of the
        messages their activities produced)."""
        size = json_size(message)
        has_image = message.base64_image or message.image_file
        if size > MAX_USER_MESSAGE_BYTES and message.role == Role.USER and not has_image:
            message = fit(message, MAX_USER_MESSAGE_BYTES, "cut: too long for the memory window")
            size = json_size(message)
        message_id = self.next_id
        self.messages.append(message)
        self.ids.append(message_id)
        self.sizes.append(size)
        self.tokens.append(message_tokens(message))
        self.next_id += 1
        self._trim()
        return message_id

    def extend(self, messages: list[Message]) -> None:
        for message in messages:
            self.add(message)

    def reserve(self, system_prompt: str | None, tools: list[dict[str, Any]] | None) -> None:
        """Keeps room for exactly what the next think request carries besides
        the window (call it before building the request; the window is trimmed
        if the room grew)."""
        reserved = REQUEST_ENVELOPE_BYTES + json_size(system_prompt) + json_size(tools)
        if reserved != self.reserved_bytes:
            self.reserved_bytes = reserved
            self._trim()

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

    def window_tokens(self) -> int:
        """Estimated tokens of the window."""
        return sum(self.tokens)

    def request_bytes(self) -> int:
        """Upper bound of a complete think request's JSON bytes with this window."""
        return self.reserved_bytes + sum(size + REF_BYTES_PER_MESSAGE for size in self.sizes)

    def _trim(self) -> None:
        request = self.request
        rest = [i for i, m in enumerate(self.messages) if m is not request]
        if not rest:
            return
        starts = [k for k, i in enumerate(rest) if self.messages[i].role != Role.TOOL] or [0]
        assistants = [k for k, i in enumerate(rest) if self.messages[i].role == Role.ASSISTANT]
        newest = assistants[-1] if assistants else starts[-1]
        starts = [s for s in starts if s <= newest]
        kept = [i for i, m in enumerate(self.messages) if m is request]
        byte_costs = [size + REF_BYTES_PER_MESSAGE for size in self.sizes]
        start = max(
            self._start_by_count(len(rest), starts),
            self._start_within(rest, starts, byte_costs, self.max_bytes - self.reserved_bytes, kept),
            self._start_within(rest, starts, self.tokens, self.max_tokens, kept),
        )
        if start == 0:
            return
        kept += rest[start:]
        self.messages = [self.messages[i] for i in kept]
        self.ids = [self.ids[i] for i in kept]
        self.sizes = [self.sizes[i] for i in kept]
        self.tokens = [self.tokens[i] for i in kept]

    def _start_by_count(self, count: int, starts: list[int]) -> int:
        """Where the kept messages begin so that about max_messages are kept:
        back to the start of the group at the cut."""
        cut = count - self.max_messages
        if cut <= 0:
            return 0
        return max((s for s in starts if s <= cut), default=0)

    @staticmethod
    def _start_within(rest: list[int], starts: list[int], costs: list[int], budget: int, kept: list[int]) -> int:
        """The first group start after which the kept messages' costs (with the
        request's) are within `budget`; at the latest, the newest group's."""
        remaining = sum(costs[i] for i in kept) + sum(costs[i] for i in rest)
        position = 0
        for start in starts:
            remaining -= sum(costs[i] for i in rest[position:start])
            position = start
            if remaining <= budget:
                break
        return position
