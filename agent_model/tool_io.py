"""Inputs and outputs of tool activities."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


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


class ToolResult(BaseModel):
    output: str = ""
    error: bool = False
    """True when the tool ran but failed; the output then explains why."""
    base64_image: str | None = None
    cwd: str | None = None
    """bash only: the directory the command ended in."""
