"""The worker side of the str_replace_editor tool (tools/str_replace_editor.py):
view, create and edit text files in the run's directory.

Tool code can change the run's directory between (and during) calls, so every
file is reached through activities.safe_files: resolved beneath an open
descriptor of the run directory (symlinks followed only while they stay
inside), opened without blocking, and checked on the descriptor to be a
regular file of bounded size (and, to be written, with a single link) before
anything is read or written. A file is read and written through the same
descriptor. Refusals come back as observations. A deadline bounds how long the
activity waits for its thread in case a filesystem stalls anyway.

Undo history lives on disk under Workspace.history_dir (out of the agent's
reach), one JSON file per edited file, so it survives a worker restart.

Retries: each edit and undo is recorded, before the file is written, together
with a tag naming the activity execution that made it (workflow id, run id,
activity id). A retried attempt that finds its own tag on the latest record
does not apply the change a second time: it finishes the write if the file
still has the old content, and in either case returns the recorded answer.
Only retries (attempt > 1) look for the tag, so a new call with the same
arguments is always treated as new.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio import activity

from agent_model.tool_arguments import bad_arguments
from agent_model.tool_io import ToolRequest, ToolResult
from activities import safe_files
from activities.heartbeats import heartbeating
from activities.lost_worker import release_run_from_lost_worker
from activities.safe_files import Beneath, FileTooLarge, OutsideRoot, UnsafeFile
from activities.workspace import PathOutsideWorkspace, Workspace


MAX_UNDO_DEPTH = 20
"""Edits remembered per file; older ones can no longer be undone."""

MAX_FILE_BYTES = safe_files.MAX_FILE_BYTES
"""Largest file the editor reads (10 MiB); bigger ones are refused."""

SNIPPET_CONTEXT_LINES = 4
"""Unchanged lines shown above and below an edit."""

LISTING_DEPTH = 2
"""Directory levels shown by `view` of a directory."""


COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
"""What the editor does; the tool's schema offers the same (tests/test_tool_editor.py)."""

DEFAULT_DEADLINE_SECONDS = 7.0
"""How long `run` waits for its thread unless told: long enough for any real
file; the tool (tools/str_replace_editor.py) sets it below its start_to_close."""


class _Refusal(Exception):
    """A request the tool cannot carry out; its message goes back to the model."""


class FileEditor:
    def __init__(
        self, workspace: Workspace, max_view_chars: int = 16000, deadline_seconds: float = DEFAULT_DEADLINE_SECONDS
    ) -> None:
        """max_view_chars: longest `view` output (default 16000 characters);
        longer output is clipped with a hint to use view_range.
        deadline_seconds: longest wait for one call's file operations."""
        self.workspace = workspace
        self.max_view_chars = max_view_chars
        self.deadline_seconds = deadline_seconds

    async def run(self, request: ToolRequest) -> ToolResult:
        arguments = request.arguments
        command, path = arguments.get("command"), arguments.get("path")
        if command not in COMMANDS:
            raise bad_arguments(f"'command' must be one of {', '.join(COMMANDS)}; got {command!r}.")
        if not isinstance(path, str) or not path:
            raise bad_arguments("str_replace_editor needs a non-empty string argument 'path'.")
        self.workspace.run_dir(request.workspace)  # rejects a bad run name early
        await release_run_from_lost_worker()
        work = asyncio.ensure_future(
            asyncio.to_thread(self._run, request.workspace, command, path, arguments, _current_attempt())
        )
        try:
            async with heartbeating():
                done, _ = await asyncio.wait({work}, timeout=self.deadline_seconds)
            if done:
                return work.result()
        finally:
            work.cancel()  # the thread may still be stuck; the activity answers regardless
        return ToolResult(
            output=(
                f"str_replace_editor did not finish within {self.deadline_seconds:g} s; "
                f"{path} may or may not have been changed. View it before retrying."
            ),
            error=True,
        )

    def _run(
        self, run_name: str, command: str, path: str, arguments: dict[str, Any], attempt: _Attempt
    ) -> ToolResult:
        run_dir = self.workspace.run_dir(run_name)
        try:
            with Beneath(run_dir) as directory:
                refusal = functools.partial(self.workspace.write_refusal, run_name)
                target = _Target(directory, directory.relative(path), path, refusal)
                if command == "view":
                    return ToolResult(output=self._view(target, arguments.get("view_range")))
                history = _History(self.workspace.history_dir(run_name), target.key)
                handler = {
                    "create": _create,
                    "str_replace": _str_replace,
                    "insert": _insert,
                    "undo_edit": _undo,
                }[command]
                return ToolResult(output=handler(target, arguments, history, attempt))
        except OutsideRoot:
            return ToolResult(output=str(PathOutsideWorkspace(path, run_dir)), error=True)
        except FileTooLarge as refusal:
            return ToolResult(output=f"{path} {refusal.problem}; use bash to inspect it.", error=True)
        except UnsafeFile as refusal:
            return ToolResult(output=f"{path} {refusal.problem}.", error=True)
        except _Refusal as refusal:
            return ToolResult(output=str(refusal), error=True)
        except FileNotFoundError:
            return ToolResult(output=f"{path} does not exist.", error=True)
        except ValueError as error:  # e.g. a NUL byte in the path
            return ToolResult(output=f"Invalid path {path!r}: {error}", error=True)
        except OSError as error:
            return ToolResult(output=f"{path}: {error.strerror or error}", error=True)

    def _view(self, target: _Target, view_range: Any) -> str:
        shown = target.shown
        fd = target.directory.open_file(
            target.relative, writing=False, limit=MAX_FILE_BYTES, directory_ok=True
        )
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                return self._view_directory(fd, shown, view_range)
            data = safe_files.read_all(fd, target.relative, MAX_FILE_BYTES)
        finally:
            os.close(fd)
        lines = _lines(_decoded(data, shown))
        first, last = _view_bounds(view_range, len(lines))
        if not lines:
            return f"{shown} is empty."
        text = f"{shown}, lines {first}-{last} of {len(lines)}:\n" + _numbered(lines, first, last)
        return self._clipped(text, "use view_range to see the rest")

    def _view_directory(self, dir_fd: int, shown: str, view_range: Any) -> str:
        if view_range is not None:
            raise _Refusal("view_range only applies to files, and this is a directory.")
        text = f"Files and directories in {shown}, {LISTING_DEPTH} levels deep (hidden ones skipped):\n"
        listing = "\n".join(_listing(dir_fd, LISTING_DEPTH)) or "(empty directory)"
        return self._clipped(text + listing, "view a subdirectory to see the rest")

    def _clipped(self, text: str, hint: str) -> str:
        if len(text) <= self.max_view_chars:
            return text
        kept = text[: self.max_view_chars]
        kept = kept[: kept.rfind("\n") + 1] or kept
        return f"{kept}[Output clipped at {self.max_view_chars} characters; {hint}.]"


# --- the editing commands -------------------------------------------------------


def _create(target: _Target, arguments: dict, history: _History, attempt: _Attempt) -> str:
    shown = target.shown
    file_text = _text_argument(arguments, "file_text", "create")
    if attempt.is_retry:
        with target.opened(missing_ok=True) as file:
            replay = history.replay(attempt, file.content(), file.put)
        if replay is not None:
            return replay
    exists = f"{shown} already exists; use str_replace or insert to change it."
    if target.directory.exists(target.relative):
        raise _Refusal(exists)
    target.check_room(None, file_text)
    output = f"Created {shown} ({len(_lines(file_text))} lines)."
    history.record_edit(None, file_text, attempt.tag, output)
    try:
        target.directory.create_file(target.relative, file_text.encode("utf-8"))
    except BaseException as error:
        # Nothing was created, so there is nothing for undo to delete.
        history.forget_last_edit()
        if isinstance(error, FileExistsError):
            raise _Refusal(exists) from None
        raise
    return output


def _str_replace(target: _Target, arguments: dict, history: _History, attempt: _Attempt) -> str:
    old_str = _text_argument(arguments, "old_str", "str_replace")
    new_str = _text_argument(arguments, "new_str", "str_replace", default="")
    if not old_str:
        raise _Refusal("str_replace: 'old_str' must not be empty.")
    with target.opened(missing_ok=False) as file:
        return _replace_in(file, old_str, new_str, history, attempt)


def _replace_in(file: _OpenFile, old_str: str, new_str: str, history: _History, attempt: _Attempt) -> str:
    shown = file.target.shown
    content = file.text()
    replay = history.replay(attempt, content, file.put)
    if replay is not None:
        return replay
    starts = _occurrences(content, old_str)
    if not starts:
        raise _Refusal(
            f"old_str was not found in {shown}; nothing was changed. "
            "It must match exactly, whitespace included."
        )
    if len(starts) > 1:
        lines = sorted({content.count("\n", 0, start) + 1 for start in starts})
        raise _Refusal(
            f"old_str occurs {len(starts)} times in {shown} (starting on lines "
            f"{', '.join(map(str, lines))}); nothing was changed. Include more "
            "surrounding text so it matches exactly once."
        )
    updated = content[: starts[0]] + new_str + content[starts[0] + len(old_str) :]
    first_line = content.count("\n", 0, starts[0]) + 1
    output = _edited_message(shown, updated, first_line, first_line + new_str.count("\n"))
    file.target.check_room(content, updated)
    history.record_edit(content, updated, attempt.tag, output)
    file.put(updated)
    return output


def _insert(target: _Target, arguments: dict, history: _History, attempt: _Attempt) -> str:
    new_str = _text_argument(arguments, "new_str", "insert")
    insert_line = arguments.get("insert_line")
    if not isinstance(insert_line, int) or isinstance(insert_line, bool):
        raise _Refusal("insert: 'insert_line' must be an integer (0 inserts at the top).")
    with target.opened(missing_ok=False) as file:
        return _insert_in(file, new_str, insert_line, history, attempt)


def _insert_in(file: _OpenFile, new_str: str, insert_line: int, history: _History, attempt: _Attempt) -> str:
    shown = file.target.shown
    content = file.text()
    replay = history.replay(attempt, content, file.put)
    if replay is not None:
        return replay
    lines = _lines(content, keep_ends=True)
    if not 0 <= insert_line <= len(lines):
        raise _Refusal(
            f"insert_line {insert_line} is out of range: {shown} has {len(lines)} lines, "
            f"so use 0 to {len(lines)}."
        )
    above = lines[:insert_line]
    if above and not above[-1].endswith("\n"):
        above[-1] += "\n"
    inserted = new_str if new_str.endswith("\n") else new_str + "\n"
    updated = "".join(above) + inserted + "".join(lines[insert_line:])
    output = _edited_message(shown, updated, insert_line + 1, insert_line + inserted.count("\n"))
    file.target.check_room(content, updated)
    history.record_edit(content, updated, attempt.tag, output)
    file.put(updated)
    return output


def _undo(target: _Target, arguments: dict, history: _History, attempt: _Attempt) -> str:
    with target.opened(missing_ok=True) as file:
        return _undo_in(file, history, attempt)


def _undo_in(file: _OpenFile, history: _History, attempt: _Attempt) -> str:
    shown = file.target.shown
    current = file.content()
    replay = history.replay_undo(attempt, current, file.put)
    if replay is not None:
        return replay
    edit = history.pop_edit()
    if edit is None:
        raise _Refusal(f"There is no edit of {shown} to undo.")
    restored = edit["before"]
    if restored is None:
        output = f"Undid the creation of {shown}; the file was deleted."
    else:
        output = f"Undid the last edit of {shown}; it is back to {len(_lines(restored))} lines."
    if current != edit["after"]:
        output += " Note: the file had changed since that edit; those changes were discarded too."
    file.target.check_room(current, restored)
    history.record_undo(restored, attempt.tag, output)
    file.put(restored)
    return output


def _edited_message(shown: str, updated: str, first: int, last: int) -> str:
    lines = _lines(updated)
    start = max(1, first - SNIPPET_CONTEXT_LINES)
    end = min(len(lines), max(first, last) + SNIPPET_CONTEXT_LINES)
    return (
        f"Edited {shown}. Lines {start}-{end} now read:\n"
        f"{_numbered(lines, start, end)}\n"
        "Check that the change is what you intended."
    )


# --- undo history on disk -------------------------------------------------------


class _History:
    """The undo stack of one file: a JSON file in the run's history directory,
    named by a hash of the file's absolute path (normalised, symlinks not
    resolved).

    {"path": "...", "edits": [{"before": str | None, "after": str, "tag": str | None,
     "output": str}, ...], "last_undo": {"content": str | None, "tag": ..., "output": ...} | None}

    "before": None means the file did not exist (the edit was a create).
    """

    def __init__(self, history_dir: Path, path: str) -> None:
        key = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self.file = history_dir / f"{key}.json"
        self.state = self._load(path)

    def replay(self, attempt: _Attempt, current: str | None, put: Callable[[str | None], None]) -> str | None:
        """If this attempt retries the execution that made the latest edit,
        complete that edit if needed (through `put`) and return its answer."""
        edits = self.state["edits"]
        if not attempt.is_retry or not edits or edits[-1]["tag"] != attempt.tag:
            return None
        edit = edits[-1]
        if current == edit["after"]:
            return edit["output"]
        if current == edit["before"]:  # recorded, but the write never happened
            put(edit["after"])
            return edit["output"]
        return None  # the file changed since: treat the call as new

    def replay_undo(
        self, attempt: _Attempt, current: str | None, put: Callable[[str | None], None]
    ) -> str | None:
        undo = self.state["last_undo"]
        if not attempt.is_retry or undo is None or undo["tag"] != attempt.tag:
            return None
        if current != undo["content"]:
            put(undo["content"])
        return undo["output"]

    def record_edit(self, before: str | None, after: str, tag: str | None, output: str) -> None:
        edits = self.state["edits"]
        edits.append({"before": before, "after": after, "tag": tag, "output": output})
        del edits[:-MAX_UNDO_DEPTH]
        self.state["last_undo"] = None
        self._save()

    def forget_last_edit(self) -> None:
        """Drop the edit just recorded, whose write failed."""
        self.state["edits"].pop()
        self._save()

    def pop_edit(self) -> dict | None:
        # Saved together with the undo record in record_undo.
        return self.state["edits"].pop() if self.state["edits"] else None

    def record_undo(self, content: str | None, tag: str | None, output: str) -> None:
        self.state["last_undo"] = {"content": content, "tag": tag, "output": output}
        self._save()

    def _load(self, path: str) -> dict:
        try:
            return json.loads(self.file.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            # Writes are atomic, so a damaged file means outside interference;
            # starting afresh loses the undo history but keeps the editor usable.
            return {"path": path, "edits": [], "last_undo": None}

    def _save(self) -> None:
        # Write a temporary file and rename it over the old one, so a crash
        # leaves either the old history or the new one, never half of one.
        descriptor, temporary = tempfile.mkstemp(dir=self.file.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
                json.dump(self.state, stream)
            os.replace(temporary, self.file)
        except BaseException:
            os.unlink(temporary)
            raise


# --- helpers --------------------------------------------------------------------


@dataclass(frozen=True)
class _Attempt:
    tag: str | None
    """Names the activity execution, the same for all its attempts; None
    outside an activity."""
    is_retry: bool


def _current_attempt() -> _Attempt:
    if not activity.in_activity():
        return _Attempt(tag=None, is_retry=False)
    info = activity.info()
    return _Attempt(
        tag=f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}",
        is_retry=info.attempt > 1,
    )


def _text_argument(arguments: dict, name: str, command: str, default: str | None = None) -> str:
    value = arguments.get(name, default)
    if not isinstance(value, str):
        raise _Refusal(f"{command} needs a string argument '{name}'.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Refusal(f"{command}: '{name}' is not valid Unicode text.") from None
    return value


class _Target:
    """The path a call names: where it is relative to the run directory, and
    how to show it."""

    def __init__(
        self, directory: Beneath, relative: str, shown: str, refusal: Callable[[int], str | None]
    ) -> None:
        """refusal: why adding this many bytes to the run is refused now, or None (Workspace.write_refusal)."""
        self.directory = directory
        self.relative = relative
        self.shown = shown
        self.refusal = refusal
        self.key = os.path.normpath(directory.path / relative)
        """Names the file's undo history."""

    def check_room(self, before: str | None, after: str | None) -> None:
        """Refuses a write that would put the run over its disk quota, or the
        disk below its reserve."""
        adding = len((after or "").encode("utf-8")) - len((before or "").encode("utf-8"))
        refusal = self.refusal(adding)
        if refusal is not None:
            raise _Refusal(refusal)

    @contextlib.contextmanager
    def opened(self, missing_ok: bool) -> Iterator[_OpenFile]:
        """The file, opened once for reading and writing, so that what an edit
        reads and what it writes are the same file whatever happens to the
        name meanwhile."""
        try:
            fd = self.directory.open_file(self.relative, writing=True, limit=MAX_FILE_BYTES)
        except FileNotFoundError:
            if not missing_ok:
                raise _Refusal(f"{self.shown} does not exist.") from None
            fd = None
        try:
            yield _OpenFile(self, fd)
        finally:
            if fd is not None:
                os.close(fd)


class _OpenFile:
    def __init__(self, target: _Target, fd: int | None) -> None:
        self.target = target
        self.fd = fd
        """None: the file does not exist."""
        self._data: bytes | None = None

    def _bytes(self) -> bytes | None:
        if self.fd is not None and self._data is None:
            self._data = safe_files.read_all(self.fd, self.target.relative, MAX_FILE_BYTES)
        return self._data

    def text(self) -> str:
        data = self._bytes()
        if data is None:
            raise _Refusal(f"{self.target.shown} does not exist.")
        return _decoded(data, self.target.shown)

    def content(self) -> str | None:
        """The file's text, or None if it does not exist (or is not text)."""
        data = self._bytes()
        try:
            return None if data is None else _decoded(data, self.target.shown)
        except _Refusal:
            return None

    def put(self, content: str | None) -> None:
        """Make the file hold `content`; None means it should not exist."""
        directory, relative = self.target.directory, self.target.relative
        if content is None:
            if self.fd is not None:
                directory.remove_file(relative)
        elif self.fd is not None:
            safe_files.replace_all(self.fd, content.encode("utf-8"))
        else:
            try:
                directory.create_file(relative, content.encode("utf-8"))
            except FileExistsError:
                raise _Refusal(f"{self.target.shown} appeared meanwhile; nothing was written.") from None


def _decoded(data: bytes, shown: str) -> str:
    try:
        if b"\0" in data:
            raise UnicodeError
        return data.decode("utf-8")
    except UnicodeError:
        raise _Refusal(f"{shown} is not a text file (it is binary or not UTF-8).") from None


def _lines(text: str, keep_ends: bool = False) -> list[str]:
    """Lines split on "\\n" only (as editors number them); a final newline does
    not start another line."""
    parts = text.split("\n")
    if keep_ends:
        lines = [part + "\n" for part in parts[:-1]]
        return lines + [parts[-1]] if parts[-1] else lines
    return parts[:-1] if parts[-1] == "" else parts


def _numbered(lines: list[str], first: int, last: int) -> str:
    """Lines first..last (1-based, inclusive) in `cat -n` style."""
    return "\n".join(f"{number:6}\t{lines[number - 1]}" for number in range(first, last + 1))


def _view_bounds(view_range: Any, line_count: int) -> tuple[int, int]:
    if view_range is None:
        return 1, line_count
    if (
        not isinstance(view_range, list)
        or len(view_range) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
    ):
        raise _Refusal("view_range must be a list of two integers [first, last].")
    first, last = view_range
    if not 1 <= first <= line_count:
        raise _Refusal(f"view_range starts at line {first}, but the file has {line_count} lines.")
    if last == -1 or last > line_count:
        last = line_count
    if last < first:
        raise _Refusal(
            f"view_range [{first}, {last}] ends before it starts; use -1 as last to read to the end."
        )
    return first, last


def _occurrences(text: str, part: str) -> list[int]:
    """Start offsets of the non-overlapping occurrences of `part`."""
    starts, position = [], text.find(part)
    while position != -1:
        starts.append(position)
        position = text.find(part, position + len(part))
    return starts


def _listing(dir_fd: int, depth: int, prefix: str = "") -> list[str]:
    """Non-hidden entries, directories marked with "/". Symlinked directories
    are listed but not entered, since they may lead out of the run directory."""
    with os.scandir(dir_fd) as entries:
        found = sorted(
            (entry.name, entry.is_dir(follow_symlinks=False))
            for entry in entries
            if not entry.name.startswith(".")
        )
    lines = []
    for name, is_dir in found:
        if not is_dir:
            lines.append(f"{prefix}{name}")
            continue
        lines.append(f"{prefix}{name}/")
        if depth > 1:
            try:
                child = safe_files.open_child_dir(dir_fd, name)
            except OSError:  # replaced by something else since it was listed
                continue
            try:
                lines.extend(_listing(child, depth - 1, f"{prefix}{name}/"))
            finally:
                os.close(child)
    return lines
