"""The thought a run's think streams, shown while the starter follows the run.

On a terminal the follower's progress line (runtime/follow.py) ends with the
tail of the current think's text, dim, redrawn as tokens arrive; the step's
own line replaces it when the step is done. The text comes from the run's
live journal (runtime/live_feed.py), on this machine only: it is the
model's, so it is made inert (runtime/terminal_text.py) and kept to one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import unicodedata
from collections.abc import Awaitable, Callable
from pathlib import Path

from runtime.live_feed import follow_think
from runtime.tasks import let_go
from runtime.terminal_text import inert

DIM = "\x1b[2m"
RESET = "\x1b[0m"
KEPT_CHARS = 2000
"""Of the thought, kept for its tail: no terminal line is longer."""
SEPARATOR = " │ "


def width_of(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 0 if unicodedata.combining(char) else 1


def tail_fitting(text: str, columns: int) -> str:
    """The end of `text` that fits in `columns` terminal columns."""
    used, start = 0, len(text)
    while start > 0 and used + width_of(text[start - 1]) <= columns:
        start -= 1
        used += width_of(text[start])
    return text[start:]


def head_fitting(text: str, columns: int) -> str:
    used, end = 0, 0
    while end < len(text) and used + width_of(text[end]) <= columns:
        used += width_of(text[end])
        end += 1
    return text[:end]


def one_line(text: str) -> str:
    return " ".join(inert(text).split())


def progress_with_thought(progress: str, thought: str, columns: int) -> str:
    """The progress line and, after it, as much of the thought's end as fits,
    dim; never wider than the terminal (a wrapped line could not be redrawn)."""
    room = columns - 1
    progress = head_fitting(inert(progress).replace("\n", " ").replace("\t", " "), room)
    thought = one_line(thought)
    left = room - sum(width_of(c) for c in progress) - len(SEPARATOR)
    if not thought or left < 10:
        return progress
    return f"{progress}{SEPARATOR}{DIM}{tail_fitting(thought, left)}{RESET}"


class LiveThought:
    """Follows a run's journal; `text` is the current think's so far, `step`
    its step. `directory` gives the run's directory name, which names its
    journal (it may have to read the run's input)."""

    def __init__(self, root: Path, directory: Callable[[], Awaitable[str]], changed: Callable[[], None]) -> None:
        self.root, self.directory, self.changed = root, directory, changed
        self.text = ""
        self.step: int | None = None
        self.thinking = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        with contextlib.suppress(OSError):  # a journal that cannot be read: nothing is shown
            async for event in follow_think(self.root, await self.directory()):
                if event.kind == "think_started":
                    self.text, self.step, self.thinking = "", event.step, True
                elif event.kind == "token":
                    self.text = (self.text + event.text)[-KEPT_CHARS:]
                else:
                    self.thinking = False
                self.changed()

    def shown_after(self, printed_step: int) -> str:
        """The thought, unless it belongs to a step whose line is printed already."""
        if self.step is not None and self.step <= printed_step:
            return ""
        return self.text

    def stop(self) -> None:
        if self._task is not None:
            let_go(self._task)
            self._task = None
