"""str_replace_editor: view, create and edit text files in the run's directory.

The work happens on the worker (activities/file_editor.py): every path is
resolved beneath the run directory without following links out, and each
edit is recorded so that a retried attempt does not apply it twice.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from temporalio import activity

from agent_model.errors import BAD_TOOL_ARGUMENTS_ERROR
from agent_model.tool_io import ToolRequest, ToolResult
from agent_model.tool_spec import TOOL_HEARTBEAT, WAIT_FOR_THE_CALL, Retries, Timeout, ToolSpec, activity_config

if TYPE_CHECKING:  # worker side; imported when the worker builds the activity
    from activities.worker_resources import WorkerResources
    from activities.workspace import Workspace

NAME = "str_replace_editor"

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "View, create and edit text files in the run's working directory. "
            "`view` shows a file with line numbers, or lists a directory two "
            "levels deep. `create` writes a new file (it refuses to overwrite). "
            "`str_replace` replaces old_str, which must occur exactly once in the "
            "file, by new_str; include enough surrounding lines to make it unique "
            "and match whitespace exactly. `insert` adds new_str after line "
            "insert_line (0 inserts at the top). `undo_edit` reverts the last "
            "edit made to the file with this tool."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": list(COMMANDS), "description": "What to do."},
                "path": {
                    "type": "string",
                    "description": (
                        "File or directory, relative to the run's directory or absolute inside it."
                    ),
                },
                "file_text": {"type": "string", "description": "create: the whole content of the new file."},
                "old_str": {"type": "string", "description": "str_replace: the exact text to replace."},
                "new_str": {
                    "type": "string",
                    "description": (
                        "str_replace: the replacement (default empty). insert: the text to insert."
                    ),
                },
                "insert_line": {
                    "type": "integer",
                    "description": "insert: the line after which new_str goes; 0 for the top.",
                },
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "view: [first, last] line to show, 1-based; last -1 means to the end.",
                },
            },
            "required": ["command", "path"],
        },
    },
}

START_TO_CLOSE = Timeout(10, "reading or writing one file (at most 10 MiB) takes milliseconds; 10 s bounds a stalled filesystem")
CONFIG = activity_config(
    start_to_close=START_TO_CLOSE,
    heartbeat=TOOL_HEARTBEAT,
    cancellation=WAIT_FOR_THE_CALL,
    retries=Retries(
        3,
        "safe to retry: view only reads, and a retried edit or undo recognises its own earlier attempt "
        "instead of repeating it; malformed arguments fail the same way every time",
        non_retryable=(BAD_TOOL_ARGUMENTS_ERROR,),
    ),
)


ANSWER_MARGIN_SECONDS = 3
"""The editor stops waiting for a stalled filesystem this long before
start_to_close, so that the model hears why."""


class StrReplaceEditor:
    def __init__(self, workspace: Workspace, **options: Any) -> None:
        """options: see activities.file_editor.FileEditor."""
        from activities.file_editor import FileEditor

        options.setdefault("deadline_seconds", START_TO_CLOSE.seconds - ANSWER_MARGIN_SECONDS)
        self.editor = FileEditor(workspace, **options)

    @activity.defn(name=NAME)
    async def run(self, request: ToolRequest) -> ToolResult:
        return await self.editor.run(request)


def summary(arguments: dict[str, Any]) -> str:
    path = str(arguments.get("path", ""))
    shown = posixpath.basename(path) if path.startswith("/") else path
    return f"{arguments.get('command', '')} {shown}".strip()


def build(resources: WorkerResources):
    return StrReplaceEditor(resources.workspace).run


SPEC = ToolSpec(
    name=NAME,
    schema=SCHEMA,
    summary=summary,
    activity=CONFIG,
    changes_files=True,
    read_calls={"command": ("view",)},
    build=build,
)
