"""Inputs and outputs of tool activities."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from agent_model.messages import Message, tool_message
from agent_model.payload import clip


class ToolRequest(BaseModel):
    """One tool call, as the workflow hands it to the tool's activity."""

    workspace: str
    """Name of the run's directory under the worker's workspace root (not a path:
    the worker decides where the root is, so a workflow input cannot point a tool
    elsewhere)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    cwd: str | None = None
    """bash only: the shell's current directory, carried by the workflow between
    calls. None means the run's directory."""
    call_id: str | None = None
    """The model's id for this call. With observe_limit, the worker finishes
    the observation message that memory takes and writes it to the shared
    context store, so the next think refers to it instead of carrying it."""
    observe_limit: int | None = None
    """Characters of the output the observation keeps (see observation_message)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """The tool's options in this run's profile (ToolTerms.options)."""
    step: int | None = None
    """The run's step the call belongs to: the worker snapshots the run
    directory under it after a call that may change files (None: older
    workflows, no snapshot)."""


class ProducedObservation(BaseModel):
    """The part of a tool activity's result that memory takes as it is."""

    output: str = ""
    message: Message | None = None
    """The observation message, finished by the worker that ran the call when
    the request named the call (activities/produced_messages.py): the workflow
    adds exactly this message, and `output` is then empty, so the text is in
    history once."""
    stored_digest: str | None = None
    """Digest of `message` as that worker wrote it to the shared context
    store (None: not written)."""


class ToolResult(ProducedObservation):
    output: str = ""
    error: bool = False
    """True when the tool ran but failed; the output then explains why."""
    base64_image: str | None = None
    image_file: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """A PNG the tool wrote, by its path in the run directory: the model is
    shown it (the think reads the file, so its bytes never enter history).
    Left out of the JSON when None, as every other tool's result had it."""
    cwd: str | None = None
    """bash only: the directory the command ended in."""


class ToolOutput(Protocol):
    """What a tool call gave: a ToolResult, an MCP call's McpCallResult."""

    @property
    def output(self) -> str: ...

    @property
    def error(self) -> bool: ...


def observation_text(result: ToolOutput) -> str:
    """What the model is told a tool call gave."""
    output = result.output or "(no output)"
    return f"Error: {output}" if result.error else output


def observation_message(text: str, call_id: str, tool: str, limit: int) -> Message:
    """The memory message of a tool call's observation, cut to `limit` characters."""
    return tool_message(clip(text, limit), call_id, tool)


def produced_text(result: ProducedObservation, plain: str) -> str:
    """What a call gave: the text of the message its worker finished, or
    `plain` (made from the output) when the worker made none."""
    if result.message is not None:
        return result.message.content or ""
    return plain
