"""The reader's side of the live feed: a run's think events as the worker
writes them (activities/live_feed.py), for the starter and the run page.

`follow_think` reads the journal from its beginning, so a follower that joins
late gets the think's events so far and then the live ones. It waits for a
journal that is missing, moves on to the next think's when the file is
replaced, and skips any line it cannot read. It only reads: a symlink, a FIFO
or anything but a plain file in the journal's place is taken for no journal.
Polling, not inotify: the workspace root may be a network volume.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

from agent_model.live_events import MAX_LINE_BYTES, LiveEvent, decode, journal_path

POLL_SECONDS = 0.02
"""Between looks at the journal: the writer batches at most 20 times a second."""
MISSING_POLL_SECONDS = 0.1
"""Between looks for a journal that is not there (yet, or ever: a worker on
another machine writes its own): a new file's first event waits this long at most."""
READ_BYTES = 256 * 1024
"""Read at once; a journal is at most a few MiB."""
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Journal:
    """One think's file, open, and the part of a line read so far."""

    def __init__(self, fd: int, identity: tuple[int, int]) -> None:
        self.fd, self.identity = fd, identity
        self.partial = b""
        self.skipping = False
        """A line grew past MAX_LINE_BYTES: the rest of it is dropped."""
        self.step: int | None = None
        self.started = False

    def lines(self) -> list[bytes] | None:
        """The complete lines read now; None at the end of what is written."""
        data = os.read(self.fd, READ_BYTES)
        if not data:
            return None
        *complete, self.partial = (self.partial + data).split(b"\n")
        kept = []
        for line in complete:
            if self.skipping:
                self.skipping = False  # the end of the overlong line
                continue
            kept.append(line)
        if len(self.partial) > MAX_LINE_BYTES:
            self.partial, self.skipping = b"", True
        return kept

    def close(self) -> None:
        os.close(self.fd)


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _open(path: Path) -> _Journal | None:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:  # missing, a symlink (ELOOP), unreadable
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return _Journal(fd, _identity(info))


def _replaced(path: Path, journal: _Journal) -> bool:
    try:
        return _identity(os.stat(path, follow_symlinks=False)) != journal.identity
    except OSError:
        return False  # gone: the next think's file is not there yet, this one may still grow


async def follow_think(root: Path, run_dir: str, step: int | None = None) -> AsyncIterator[LiveEvent]:
    """The events of the run's thinks as they are written, under workspace
    root `root` for run directory name `run_dir` (agent_model/live_events.py
    journal_dir_name of the run's workflow id).

    step None: every think from the current one on, without end (stop
    iterating to stop following). A step: only that step's think; it ends
    after that think's `think_ended`, or when the journal holds a later step's
    think. A think asked again (a retry) starts over with `think_started`."""
    path = journal_path(root, run_dir)
    journal: _Journal | None = None
    try:
        while True:
            if journal is None:
                journal = _open(path)
                if journal is None:
                    await asyncio.sleep(MISSING_POLL_SECONDS)
                    continue
            lines = journal.lines()
            if lines is None:
                if _replaced(path, journal):
                    # Its last lines were read above: on to the next think's file.
                    journal.close()
                    journal = None
                    continue
                await asyncio.sleep(POLL_SECONDS)
                continue
            for line in lines:
                event = decode(line)
                if event is None:
                    continue
                if event.kind == "think_started":
                    journal.step, journal.started = event.step, True
                elif not journal.started:
                    continue  # no think_started first: not a journal this follower trusts
                if step is not None:
                    if journal.step is not None and journal.step > step:
                        return
                    if journal.step != step:
                        continue
                yield event
                if step is not None and event.kind == "think_ended":
                    return
    finally:
        if journal is not None:
            journal.close()
