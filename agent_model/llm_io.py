"""Input and output of the think activity (one LLM call)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agent_model.messages import Message, ToolChoice
from agent_model.usage import TokenUsage


class ThinkRequest(BaseModel):
    llm: str = "default"
    """Name of an LLM profile in the worker's config (`[llm]` or `[llm.<name>]`);
    never the key itself, which stays on the worker."""
    system_prompt: str | None = None
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice = ToolChoice.AUTO


class ThinkResponse(BaseModel):
    message: Message
    usage: TokenUsage
    finish_reason: str | None = None
    model: str = ""
