"""Parsing the JSON arguments a model wrote for a tool call, within bounds.

The arguments are hostile input parsed inside workflow code. json.loads
recurses once per nesting level, so arguments nested a thousand deep raise
RecursionError in the workflow task, which then fails on every retry and
wedges the run. Both the size and the depth are checked first, by a linear
scan that never recurses, and a refusal is an observation for the model.
"""

from __future__ import annotations

import json
import re
from typing import Any

from temporalio.exceptions import ApplicationError

from agent_model.errors import BAD_TOOL_ARGUMENTS_ERROR

MAX_ARGUMENT_BYTES = 256 * 1024
"""Largest arguments (UTF-8) one tool call may have; no tool needs more."""
MAX_ARGUMENT_DEPTH = 32
"""Deepest nesting of objects and arrays in one tool call's arguments."""

_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
"""A JSON string (its end quote may be missing) or one bracket: brackets inside
strings are skipped with the string."""


def nesting_depth(text: str) -> int:
    """The deepest nesting of brackets in `text`, ignoring those in strings."""
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def refusal(text: str) -> str | None:
    """Why `text` is too big or too deep to parse, or None."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_ARGUMENT_BYTES:
        return f"{size} bytes long, over the limit of {MAX_ARGUMENT_BYTES} bytes"
    if nesting_depth(text) > MAX_ARGUMENT_DEPTH:
        return f"nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    return None


def read_arguments(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, None), or (None, what is wrong with them), worded to follow
    "the arguments are"."""
    text = text or "{}"
    problem = refusal(text)
    if problem is not None:
        return None, problem
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg} at position {e.pos})"
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        return None, f"not readable JSON ({e})"
    if not isinstance(arguments, dict):
        return None, "not a JSON object"
    return arguments, None


def parse_arguments(tool: str, text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, None), or (None, an error observation for the model)."""
    arguments, problem = read_arguments(text)
    if problem is not None:
        return None, f"Error: the arguments of {tool} are {problem}."
    return arguments, None


def bad_arguments(message: str) -> ApplicationError:
    """A non-retryable BadToolArguments error: malformed arguments fail the
    same way on every attempt."""
    return ApplicationError(message, type=BAD_TOOL_ARGUMENTS_ERROR, non_retryable=True)


def required_string(arguments: dict, name: str, tool: str) -> str:
    """The string argument `name`, or a non-retryable BadToolArguments error."""
    value = arguments.get(name)
    if not isinstance(value, str):
        raise bad_arguments(f"{tool} needs a string argument '{name}'.")
    return value
