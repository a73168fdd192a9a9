"""Sending each message to the think activity once.

Every LLM call needs the whole memory window, the system prompt and the tool
schemas. Sent whole to every think, an observation is written into the run's
history once per later think until it leaves the window (~33 times with the
default 100-message window), so history grows quadratically and a long run
reaches the server's history limit (BENCHMARKS.md, P2).

Instead the workflow numbers its messages (Memory.ids) and remembers what the
worker has been sent and acknowledged. A think then carries the window as ids,
the messages the worker lacks, and the system prompt and tools only when they
changed. The worker keeps each run's window in a cache
(activities/think_context_cache.py) and rebuilds the full request. Each window
message is also named by a short digest of its content, so a worker that lacks
some (restarted, evicted, or the task went to another worker) fetches them from
the store all workers share (activities/context_store.py) and verifies them by
that digest. Only if the store lacks them too does the activity fail at once
with CONTEXT_MISSING_ERROR, and the workflow sends the complete request.

A message produced by an activity (a think's reply, a tool's observation) is
already in the run's history once, as that activity's result. Its worker also
writes it to the shared store and says so with the digest it wrote; when that
digest is the one the workflow computes for the message it adds to memory, the
next think names the message instead of carrying it (ContextRef.stored). So
each observation is written to history once, whichever workers run the steps.

ContextSync is workflow state; it changes only on activity results, so replay
rebuilds it exactly.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, PrivateAttr

from agent_model.llm_io import ContextRef, ThinkRequest
from agent_model.messages import Message, ToolChoice



MESSAGE_DIGEST_CHARS = 16
"""Hex characters of a message's digest: a full window adds ~2 KB to a think's
input, and 64 bits still rule out an accidental match."""


def canonical(value: Any) -> bytes:
    """The bytes a digest is taken of, and that the shared store keeps."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text.encode()


def digest(value: Any) -> str | None:
    if value is None:
        return None
    return hashlib.sha256(canonical(value)).hexdigest()[:32]


def message_bytes(message: Message) -> bytes:
    return canonical(message.model_dump(mode="json"))


def message_digest(message: Message) -> str:
    return hashlib.sha256(message_bytes(message)).hexdigest()[:MESSAGE_DIGEST_CHARS]


class ContextSync(BaseModel):
    """What the worker's context cache holds for one run, as far as the workflow knows."""

    key: str
    known_through: int = -1
    system_digest: str | None = None
    tools_digest: str | None = None
    stored: list[int] = []
    """Ids above known_through whose messages their producing activity wrote to
    the shared store."""
    _digests: dict[int, str] = PrivateAttr(default_factory=dict)
    """Message digests by id: each message is hashed once, not once per step."""

    def build(
        self,
        llm: str,
        system_prompt: str | None,
        window: list[tuple[int, Message]],
        tools: list[dict[str, Any]] | None,
        tool_choice: ToolChoice,
    ) -> ThinkRequest:
        system_digest, tools_digest = digest(system_prompt), digest(tools)
        known = self._digests
        self._digests = {i: known.get(i) or message_digest(m) for i, m in window}
        stored = set(self.stored)
        return ThinkRequest(
            llm=llm,
            system_prompt=None if system_digest == self.system_digest else system_prompt,
            messages=[m for i, m in window if i > self.known_through and i not in stored],
            tools=None if tools_digest == self.tools_digest else tools,
            tool_choice=tool_choice,
            context=ContextRef(
                key=self.key,
                window=[i for i, _ in window],
                digests=[self._digests[i] for i, _ in window],
                known_through=self.known_through,
                system_digest=system_digest,
                tools_digest=tools_digest,
                stored=[i for i, _ in window if i > self.known_through and i in stored],
            ),
        )

    def produced(self, message_id: int, message: Message, stored_digest: str | None) -> None:
        """An activity produced `message` (now memory's `message_id`) and wrote
        what it says has `stored_digest` to the shared store: if that is this
        very message, the next think need not carry it."""
        if stored_digest is None:
            return
        own = message_digest(message)
        if own == stored_digest:
            self._digests[message_id] = own
            self.stored.append(message_id)

    @staticmethod
    def is_complete(request: ThinkRequest) -> bool:
        """True if the request refers to nothing the worker must already hold."""
        ref = request.context
        return ref is None or (
            len(request.messages) == len(ref.window)
            and (ref.system_digest is None or request.system_prompt is not None)
            and (ref.tools_digest is None or request.tools is not None)
        )

    def confirm(self, request: ThinkRequest) -> None:
        """The think succeeded: its worker now holds the request's whole context."""
        ref = request.context
        assert ref is not None
        self.known_through = max([self.known_through, *ref.window])
        self.system_digest, self.tools_digest = ref.system_digest, ref.tools_digest
        self.stored = [i for i in self.stored if i > self.known_through]

    def forget(self) -> None:
        """The worker lacked the context: the next request is sent complete."""
        self.known_through = -1
        self.system_digest = self.tools_digest = None
        self.stored = []
