"""Chat messages in the OpenAI Chat Completions wire shape."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, Field


class Role(str, Enum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolChoice(str, Enum):
    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"


class Function(BaseModel):
    name: str
    arguments: str  # JSON text, exactly as the model produced it


class ToolCall(BaseModel):
    id: str
    type: str = "function"
    function: Function


class Message(BaseModel):
    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    # Base64-encoded PNG/JPEG; sent as an image part of a user message.
    base64_image: str | None = None
    image_file: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """A PNG, JPEG or WebP image a tool wrote, by its path relative to the run
    directory: the think activity reads it, so its bytes never enter the run's
    history. Left out of the JSON when None, so that every other message keeps
    the bytes, and so the digest (agent_model/think_context.py), it always had."""

    def to_openai(self) -> dict[str, Any]:
        """The dict the Chat Completions API expects for this message."""
        out: dict[str, Any] = {"role": self.role.value}
        if self.base64_image and self.role == Role.USER:
            parts: list[dict[str, Any]] = []
            if self.content:
                parts.append({"type": "text", "text": self.content})
            parts.append(
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:image/png;base64,{self.base64_image}"},
                }
            )
            out["content"] = parts
        else:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = [tc.model_dump() for tc in self.tool_calls]
        if self.name is not None:
            out["name"] = self.name
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


def is_empty_reply(message: Message) -> bool:
    """A reply with neither text (beyond whitespace) nor a tool call: no answer
    and no action."""
    return not message.tool_calls and not (message.content or "").strip()


def system_message(content: str) -> Message:
    return Message(role=Role.SYSTEM, content=content)


def user_message(content: str, base64_image: str | None = None, image_file: str | None = None) -> Message:
    return Message(role=Role.USER, content=content, base64_image=base64_image, image_file=image_file)


def assistant_message(
    content: str | None, tool_calls: list[ToolCall] | None = None
) -> Message:
    return Message(role=Role.ASSISTANT, content=content, tool_calls=tool_calls or None)


def tool_message(content: str, tool_call_id: str, name: str) -> Message:
    return Message(role=Role.TOOL, content=content, tool_call_id=tool_call_id, name=name)
