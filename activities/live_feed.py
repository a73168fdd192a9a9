"""The worker's side of the live feed: each think's streamed tokens, written
to a journal that followers read (runtime/live_feed.py) while the think runs.

The journal of a run is `<workspace root>/.live/<name>/think.jsonl`, where
`<name>` is the run's directory name (a flow's step runs share the flow's,
one think at a time; without one, what agent_model/workspace_names.py makes
of the workflow id). It lies outside every run directory, and the tool sandbox shows tool code
an empty workspace root (activities/tools/sandbox.py), so neither the model's
code nor the editor can read or forge it. Directories are 0700 and the file
0600; every name is opened beneath its parent's descriptor without following
a symlink. Each think writes a fresh file and renames it into place, so a
reader sees one think's events, never a mix of two.

The feed is best effort: a journal that cannot be written is given up for
that think (said once per worker), and the think goes on. Writes happen in a
thread, at most WRITES_PER_SECOND, so a slow disk never stalls the think's
heartbeats. Text is redacted of the worker's secrets before it is written
(a secret split across tokens too: agent_model/stream_redaction.py) and
bounded per event and per think.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from activities.redaction import Redactor
from agent_model.live_events import (
    JOURNAL_NAME, LIVE_DIR_NAME, Channel, Kind, LiveEvent, encode, journal_dir_name, split_text,
)
from agent_model.stream_redaction import PieceRedactor

log = logging.getLogger(__name__)

WRITES_PER_SECOND = 20
"""Tokens arrive far faster; followers see them in batches this often at most."""
MAX_THINK_BYTES = 4 * 1024 * 1024
"""Of one think's journal: a reply is at most 512 KiB (activities/llm_client.py
MAX_REPLY_BYTES); what streams past this is not written."""
SETTLE_SECONDS = 0.005
"""A write waits this long after the first token it carries, for the rest of its batch."""
CLOSE_WAIT = 1.0
"""Seconds a think waits at its end for the last write; a disk that hangs
longer loses the journal's end, never the think's result."""
STALE_SECONDS = 24 * 3600
"""A run's journal untouched this long is removed (at the worker's first think):
the run is long past that think."""

_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")
"""A run directory's name (activities/workspace.py checks it likewise): never "." or "..", never a path."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class JournalRefused(OSError):
    """A journal path that is not ours to write: not a directory, or another user's."""


def _private_dir(parent: int, name: str) -> int:
    """The descriptor of directory `name` under `parent`, made 0700 if
    missing; a symlink or another user's directory is refused."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        os.close(fd)
        raise JournalRefused(f"{name} belongs to uid {info.st_uid}")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _prune(live: int, keep: str, now: float) -> None:
    """Removes other runs' journals untouched for STALE_SECONDS."""
    for entry in os.listdir(live):
        if entry == keep:
            continue
        try:
            run = os.open(entry, _DIR_FLAGS, dir_fd=live)
        except OSError:
            continue
        try:
            for name in os.listdir(run):
                info = os.stat(name, dir_fd=run, follow_symlinks=False)
                if now - info.st_mtime > STALE_SECONDS:
                    os.unlink(name, dir_fd=run)
            if not os.listdir(run):
                os.rmdir(entry, dir_fd=live)
        except OSError:
            pass
        finally:
            os.close(run)


def open_journal(root: Path, name: str, first_line: bytes, prune: bool = False) -> int:
    """A new journal for run directory `name`, holding `first_line`, renamed
    into place over the previous think's; returns its descriptor (for appending)."""
    root_fd = os.open(root, _DIR_FLAGS)
    opened: list[int] = [root_fd]
    try:
        live = _private_dir(root_fd, LIVE_DIR_NAME)
        opened.append(live)
        if prune:
            _prune(live, name, time.time())
        run = _private_dir(live, name)
        opened.append(run)
        temporary = f".{JOURNAL_NAME}.{uuid.uuid4().hex}"
        fd = os.open(temporary, _FILE_FLAGS, 0o600, dir_fd=run)
        try:
            _write_all(fd, first_line)
            os.rename(temporary, JOURNAL_NAME, src_dir_fd=run, dst_dir_fd=run)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(temporary, dir_fd=run)
            except OSError:
                pass
            raise
        return fd
    finally:
        for fd_ in opened:
            os.close(fd_)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_WRITER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="live-feed")
"""Journal writes: off the event loop, and off the default executor the
context store and the workspace use."""


class LiveFeed:
    """The worker's journals: one ThinkJournal per think. `root` is the
    workspace root (a real path); `redactor` the worker's secrets."""

    def __init__(self, root: Path, redactor: Redactor | None = None, clock: Callable[[], float] = time.time) -> None:
        self.root = root
        self.redactor = redactor or Redactor([])
        self.clock = clock
        self._warned = False
        self._pruned = False
        self.stalled: Future[None] | None = None
        """A write that outlasted its think's CLOSE_WAIT: until it returns,
        thinks write no journal (a hung disk costs one think a second, not every think)."""

    def journal(self, run_id: str, step: int | None, directory: str | None = None) -> ThinkJournal:
        """The journal of a think of run `run_id` (its workflow id) at `step`,
        under the run's directory name `directory` (None: the workflow id's)."""
        return ThinkJournal(self, run_id, step, directory)

    def failed(self, run_id: str, error: BaseException) -> None:
        """A journal gave up: said once per worker, as it is likely to recur."""
        if not self._warned:
            self._warned = True
            log.warning(
                "live feed: cannot write the journal of %s under %s (%s: %s); thinks go on without it",
                run_id, self.root / LIVE_DIR_NAME, type(error).__name__, error,
            )
        else:
            log.debug("live feed: journal of %s not written: %s", run_id, error)

    def should_prune(self) -> bool:
        first, self._pruned = not self._pruned, True
        return first


class ThinkJournal:
    """One think's journal: `async with` it around the call, `add` each piece
    of text as it streams."""

    def __init__(self, feed: LiveFeed, run_id: str, step: int | None, directory: str | None = None) -> None:
        self.feed, self.run_id, self.step = feed, run_id, step
        self.name = directory if directory and _SAFE_NAME.fullmatch(directory) else journal_dir_name(run_id)
        secrets = feed.redactor.secrets
        self._pieces = {channel: PieceRedactor(secrets, feed.redactor.text) for channel in ("content", "tool_call")}
        self._channel: Channel = "content"
        self._started: bytes | None = None
        self._queued: list[tuple[Channel, str]] = []
        """Text not yet written: merged into one event per channel run when written."""
        self._ending = False
        self._ended = asyncio.Event()
        """Set at the think's end: the last write goes at once, whatever the rate."""
        self._wake = asyncio.Event()
        self._fd: int | None = None
        self._broken = feed.stalled is not None and not feed.stalled.done()
        self._written = 0
        self._full = False
        self._pump: asyncio.Task[None] | None = None
        self._in_flight: Future[None] | None = None

    def _event(self, kind: Kind, text: str = "", channel: Channel = "content") -> bytes:
        event = LiveEvent(run_id=self.run_id, step=self.step, kind=kind, text=text, channel=channel, at=self.feed.clock())
        return encode(event).encode()

    async def __aenter__(self) -> ThinkJournal:
        if not self._broken:
            self._started = self._event("think_started")
            self._pump = asyncio.create_task(self._write_loop())
            self._wake.set()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._pump is None:
            return
        self._release()
        self._ending = True
        self._ended.set()
        self._wake.set()
        try:
            # shield: the think's end waits CLOSE_WAIT at most for the last write.
            await asyncio.wait_for(asyncio.shield(self._pump), CLOSE_WAIT)
        except asyncio.TimeoutError:
            self._abandon()
        except asyncio.CancelledError:
            self._abandon()
            raise
        except Exception:  # noqa: BLE001 (the write loop said what failed)
            pass
        self._close_when_written()

    def _abandon(self) -> None:
        assert self._pump is not None
        self._pump.cancel()
        self._broken = True
        if self._in_flight is not None and not self._in_flight.done():
            self.feed.stalled = self._in_flight

    def _close_when_written(self) -> None:
        """Closes the journal once no write uses its descriptor any more."""
        if self._in_flight is not None and not self._in_flight.done():
            self._in_flight.add_done_callback(lambda _: self._close())
        else:
            self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def add(self, channel: Channel, text: str) -> None:
        """A piece of the reply as it streamed: content, or a tool call's name and arguments."""
        if self._pump is None or self._broken or not text:
            return
        if channel != self._channel:
            self._release()
            self._channel = channel
        self._queue(channel, self._pieces[channel].add(text))

    def _release(self) -> None:
        """What the current channel still holds back, for a change of channel or the end."""
        self._queue(self._channel, self._pieces[self._channel].flush())

    def _queue(self, channel: Channel, text: str) -> None:
        if not text:
            return
        if self._queued and self._queued[-1][0] == channel:
            self._queued[-1] = (channel, self._queued[-1][1] + text)
        else:
            self._queued.append((channel, text))
        self._wake.set()

    def _lines(self) -> list[bytes]:
        """What is queued, as event lines: the start first, then one token
        event per run of one channel's text (split at MAX_EVENT_CHARS)."""
        lines = [self._started] if self._started is not None else []
        self._started = None
        queued, self._queued = self._queued, []
        for channel, text in queued:
            lines += [self._event("token", piece, channel) for piece in split_text(text)]
        return lines

    async def _write_loop(self) -> None:
        interval = 1 / WRITES_PER_SECOND
        while True:
            await self._wake.wait()
            if not self._ending:
                # The stream's reader hands over a batch of tokens in several
                # steps of the event loop: take it whole, not its first token.
                await asyncio.sleep(SETTLE_SECONDS)
            self._wake.clear()
            lines = self._lines()
            end = self._event("think_ended") if self._ending else None
            began = time.monotonic()
            try:
                self._in_flight = _WRITER.submit(self._write, lines, end)
                await asyncio.wrap_future(self._in_flight)
            except Exception as e:  # noqa: BLE001 (whatever the disk does, the think goes on)
                self._broken = True
                self.feed.failed(self.run_id, e)
                return
            if end is not None:
                return
            rest = interval - (time.monotonic() - began)
            if rest > 0:
                try:
                    await asyncio.wait_for(self._ended.wait(), rest)
                except asyncio.TimeoutError:
                    pass

    def _write(self, lines: list[bytes], end: bytes | None) -> None:
        """In a writing thread: the first batch opens the journal; past
        MAX_THINK_BYTES only the end is written, so followers learn the think is over."""
        if self._fd is None:
            if not lines:
                return
            first, lines = lines[0], lines[1:]
            self._fd = open_journal(self.feed.root, self.name, first, prune=self.feed.should_prune())
            self._written = len(first)
        data = b"".join(lines)
        if self._full or self._written + len(data) > MAX_THINK_BYTES:
            self._full, data = True, b""
        data += end or b""
        if data:
            _write_all(self._fd, data)
            self._written += len(data)
