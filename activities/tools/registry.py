"""Every tool the agents know, by name: its schema and how it runs."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from activities.tools import (
    ask_human,
    bash,
    create_chat_completion,
    planning,
    python_execute,
    str_replace_editor,
    terminate,
)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    schema: dict[str, Any]
    activity_options: dict[str, Any] | None
    """execute_activity options; None for tools that run inside the workflow."""

    @property
    def runs_in_workflow(self) -> bool:
        return self.activity_options is None


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(python_execute.NAME, python_execute.SCHEMA, python_execute.OPTIONS),
        ToolSpec(bash.NAME, bash.SCHEMA, bash.OPTIONS),
        ToolSpec(str_replace_editor.NAME, str_replace_editor.SCHEMA, str_replace_editor.OPTIONS),
        ToolSpec(terminate.NAME, terminate.SCHEMA, None),
        ToolSpec(ask_human.NAME, ask_human.SCHEMA, None),
        ToolSpec(create_chat_completion.NAME, create_chat_completion.SCHEMA, None),
        ToolSpec(planning.NAME, planning.SCHEMA, None),
    )
}


def schemas(names: list[str]) -> list[dict[str, Any]]:
    return [TOOLS[n].schema for n in names if n in TOOLS]


def activity_summary(name: str, arguments: dict[str, Any], limit: int = 80) -> str:
    """One line for the Web UI, e.g. `python_execute: import pandas as pd`."""
    detail = ""
    if name == python_execute.NAME:
        detail = str(arguments.get("code", "")).strip().splitlines()[0:1]
    elif name == bash.NAME:
        detail = str(arguments.get("command", "")).strip().splitlines()[0:1]
    elif name == str_replace_editor.NAME:
        path = str(arguments.get("path", ""))
        shown = posixpath.basename(path) if path.startswith("/") else path
        detail = [f"{arguments.get('command', '')} {shown}".strip()]
    text = f"{name}: {detail[0]}" if detail else name
    return text if len(text) <= limit else text[: limit - 1] + "…"
