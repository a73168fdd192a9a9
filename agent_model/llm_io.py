"""Input and output of the think activity (one LLM call)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent_model.messages import Message, ToolChoice
from agent_model.usage import TokenUsage


class ContextRef(BaseModel):
    """Names the parts of a think request that the worker already holds, so
    they are not sent (and written into the run's history) again. See
    agent_model/think_context.py."""

    key: str
    """One run: "<workflow id>/<run id>"."""
    window: list[int]
    """Ids of the memory window's messages, in the order sent to the model."""
    digests: list[str] | None = None
    """Per window message, the start of the sha256 of its canonical JSON
    (agent_model/think_context.py): a worker that lacks a message fetches it by
    this from the shared store. None in thinks scheduled before digests existed."""
    known_through: int = -1
    """The worker holds the window's messages with ids up to this one; the
    request's `messages` are the others, in window order."""
    system_digest: str | None = None
    """Digest of the system prompt; the request carries the text only when the
    worker may not hold it."""
    tools_digest: str | None = None
    """Digest of the tool schemas, likewise."""
    stored: list[int] = []
    """Ids above known_through that the request does not carry either: the
    activity that produced them (a think's reply, a tool's observation) wrote
    them to the shared store, where the worker finds them by digest."""


class ThinkRequest(BaseModel):
    llm: str = "default"
    """Name of an LLM profile in the worker's config (`[llm]` or `[llm.<name>]`);
    never the key itself, which stays on the worker."""
    system_prompt: str | None = None
    messages: list[Message]
    """The whole window, or with `context` only the messages the worker lacks."""
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice = ToolChoice.AUTO
    context: ContextRef | None = None
    """None: the request is complete as it is."""
    workspace: str | None = None
    """Name of the run's directory on the workers, where the window's
    image_file paths lead (None: their images are not sent), and the name of
    the run's live journal (agent_model/live_events.py; None: named after the
    workflow id, as a directory would be)."""
    step: int | None = None
    """The run's step this think is for, named in the live feed's events;
    None: a think outside a step (a flow's planning) or scheduled by code
    that predates it."""


class ThinkResponse(BaseModel):
    message: Message
    usage: TokenUsage
    finish_reason: str | None = None
    model: str = ""
    stored_digest: str | None = None
    """Digest of `message` as written to the shared context store by the
    worker (None: not written)."""
    note: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """Why `message` is not the model's own reply (it could not be read), if it is not."""
