"""The live feed's journal, written by the worker's side (activities/live_feed.py)
and read by the follower's (runtime/live_feed.py), on a real directory."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from pathlib import Path

import pytest

from activities import live_feed
from activities.live_feed import LiveFeed
from activities.redaction import Redactor
from agent_model.live_events import LIVE_DIR_NAME, MAX_LINE_BYTES, LiveEvent, encode, journal_dir_name, journal_path
from runtime.live_feed import follow_think

RUN = "run-1"
NAME = journal_dir_name(RUN)
WAIT = 10.0
"""Bound on waiting for a condition that holds within milliseconds."""


async def until(condition, what: str) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), WAIT)
    except asyncio.TimeoutError:
        raise AssertionError(f"not within {WAIT} s: {what}") from None


class Follower:
    """follow_think in a task, collecting what it yields."""

    def __init__(self, root: Path, step: int | None = None) -> None:
        self.events: list[LiveEvent] = []
        self.task = asyncio.ensure_future(self._run(root, step))

    async def _run(self, root: Path, step: int | None) -> None:
        async for event in follow_think(root, NAME, step):
            self.events.append(event)

    def text(self) -> str:
        return "".join(e.text for e in self.events if e.kind == "token")

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def journal_events(root: Path) -> list[dict]:
    return [json.loads(line) for line in journal_path(root, NAME).read_text().splitlines()]


async def test_a_follower_gets_a_think_as_it_is_written_and_its_files_are_private(tmp_path):
    feed = LiveFeed(tmp_path)
    follower = Follower(tmp_path)
    async with feed.journal(RUN, 4) as journal:
        journal.add("content", "Let me ")
        await until(lambda: follower.text() == "Let me ", "the first token read before the think ends")
        assert follower.kinds() == ["think_started", "token"]
        journal.add("content", "think.")
        journal.add("tool_call", "python_execute {}")
    await until(lambda: "think_ended" in follower.kinds(), "the end read")
    await follower.stop()
    assert follower.text() == "Let me think.python_execute {}"
    assert [e.channel for e in follower.events if e.kind == "token"][-1] == "tool_call"
    assert {e.step for e in follower.events} == {4} and {e.run_id for e in follower.events} == {RUN}
    path = journal_path(tmp_path, NAME)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


async def test_a_late_follower_gets_the_think_so_far_then_the_rest(tmp_path):
    feed = LiveFeed(tmp_path)
    async with feed.journal(RUN, 1) as journal:
        journal.add("content", "early ")
        await until(lambda: journal_path(tmp_path, NAME).exists() and "early" in journal_path(tmp_path, NAME).read_text(), "written")
        follower = Follower(tmp_path)
        await until(lambda: follower.text() == "early ", "the think so far")
        journal.add("content", "late")
        await until(lambda: follower.text() == "early late", "the live part")
    await until(lambda: follower.kinds()[-1:] == ["think_ended"], "the end")
    await follower.stop()
    assert follower.kinds()[0] == "think_started"


async def test_thinks_replace_each_other_and_are_never_mixed(tmp_path):
    feed = LiveFeed(tmp_path)
    every = Follower(tmp_path)
    second = Follower(tmp_path, step=2)
    for step in (1, 2, 3):
        async with feed.journal(RUN, step) as journal:
            for word in ("a", "b", "c"):
                journal.add("content", f"{step}{word} ")
                await asyncio.sleep(0.06)  # past the write interval: one event per word
        await until(lambda: [e.step for e in every.events if e.kind == "think_ended"][-1:] == [step], f"think {step} read")
    await every.stop()
    await asyncio.wait_for(second.task, WAIT)  # it ended by itself, after step 2's think
    # Each think's events in order, whole, one think after the other.
    by_think = [(e.step, e.kind) for e in every.events if e.kind != "token"]
    assert by_think == [(1, "think_started"), (1, "think_ended"), (2, "think_started"), (2, "think_ended"),
                        (3, "think_started"), (3, "think_ended")]
    assert every.text() == "1a 1b 1c 2a 2b 2c 3a 3b 3c "
    steps = [e.step for e in every.events]
    assert steps == sorted(steps)
    assert second.text() == "2a 2b 2c " and second.kinds()[0] == "think_started"


async def test_a_missing_journal_is_waited_for(tmp_path):
    follower = Follower(tmp_path)
    await asyncio.sleep(0.1)
    assert not follower.task.done() and follower.events == []
    async with LiveFeed(tmp_path).journal(RUN, 7) as journal:
        journal.add("content", "here now")
    await until(lambda: follower.kinds()[-1:] == ["think_ended"], "the think read")
    await follower.stop()
    assert follower.text() == "here now"


async def test_a_garbled_journal_never_stops_the_follower(tmp_path):
    path = journal_path(tmp_path, NAME)
    path.parent.mkdir(parents=True)
    good = lambda kind, text="": encode(LiveEvent(run_id=RUN, step=1, kind=kind, text=text)).encode()  # noqa: E731
    path.write_bytes(
        good("token", "before any start")  # not preceded by think_started: not trusted
        + good("think_started")
        + b"{not json\n"
        + b'{"run_id": "r", "kind": "explode"}\n'
        + b"\xff\xfe\x00\n"
        + b'{"pad": "' + b"x" * (3 * MAX_LINE_BYTES) + b'"}\n'
        + good("token", "kept")
        + b'{"half a line'
    )
    follower = Follower(tmp_path)
    await until(lambda: follower.text() == "kept", "the readable event")
    with path.open("ab") as more:
        more.write(b' that never ends"}\n' + good("token", " and more"))
    await until(lambda: follower.text() == "kept and more", "the line after the broken one")
    await follower.stop()
    assert follower.kinds() == ["think_started", "token", "token"]


async def test_many_tokens_at_once_are_one_write(tmp_path):
    async with LiveFeed(tmp_path).journal(RUN, 1) as journal:
        for i in range(1000):
            journal.add("content", f"{i} ")
    tokens = [e for e in journal_events(tmp_path) if e["kind"] == "token"]
    assert "".join(e["text"] for e in tokens) == "".join(f"{i} " for i in range(1000))
    assert len(tokens) <= 3  # split only at the event size (2,000 characters)


async def test_secrets_are_redacted_even_split_across_tokens(tmp_path):
    secret = "sk-live-SECRET-0123456789"
    text = f"the key is {secret}, keep it"
    async with LiveFeed(tmp_path, Redactor([secret])).journal(RUN, 1) as journal:
        for i in range(0, len(text), 3):
            journal.add("content", text[i : i + 3])
            await asyncio.sleep(0.01)
    written = journal_path(tmp_path, NAME).read_text()
    assert "SECRET" not in written
    assert "".join(e["text"] for e in journal_events(tmp_path) if e["kind"] == "token") == "the key is [REDACTED], keep it"


async def test_a_think_longer_than_the_bound_stops_growing_but_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(live_feed, "MAX_THINK_BYTES", 4000)
    async with LiveFeed(tmp_path).journal(RUN, 1) as journal:
        for _ in range(20):
            journal.add("content", "y" * 500)
            await asyncio.sleep(0.06)
    events = journal_events(tmp_path)
    assert journal_path(tmp_path, NAME).stat().st_size < 4000 + 1000
    assert events[0]["kind"] == "think_started" and events[-1]["kind"] == "think_ended"


@pytest.mark.parametrize("planted", ["run directory", "journal"])
async def test_a_symlink_in_the_journals_place_is_never_followed(tmp_path, planted):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    victim = elsewhere / "think.jsonl"
    victim.write_text("precious\n")
    live = root / LIVE_DIR_NAME
    live.mkdir(mode=0o700)
    if planted == "run directory":
        (live / NAME).symlink_to(elsewhere)
    else:
        (live / NAME).mkdir(mode=0o700)
        (live / NAME / "think.jsonl").symlink_to(victim)
    async with LiveFeed(root).journal(RUN, 1) as journal:
        journal.add("content", "where does this go?")
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["think.jsonl"]
    if planted == "journal":  # the link was replaced by the real journal, in its own directory
        assert not (live / NAME / "think.jsonl").is_symlink()


async def test_a_symlinked_journal_is_not_read(tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text(encode(LiveEvent(run_id=RUN, step=1, kind="think_started")))
    path = journal_path(tmp_path / "root", NAME)
    path.parent.mkdir(parents=True)
    path.symlink_to(outside)
    follower = Follower(tmp_path / "root")
    await asyncio.sleep(0.1)
    await follower.stop()
    assert follower.events == []


async def test_a_journal_that_cannot_be_written_costs_the_think_nothing(tmp_path, caplog):
    (tmp_path / LIVE_DIR_NAME).write_text("a file where the directory should be")
    feed = LiveFeed(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="activities.live_feed"):
        for step in (1, 2):
            async with feed.journal(RUN, step) as journal:
                journal.add("content", "lost")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "live feed: cannot write the journal" in warnings[0].getMessage()


async def test_a_think_cancelled_mid_stream_still_ends_its_journal(tmp_path):
    started = asyncio.Event()

    async def think() -> None:
        async with LiveFeed(tmp_path).journal(RUN, 1) as journal:
            journal.add("content", "half")
            started.set()
            await asyncio.sleep(60)

    task = asyncio.ensure_future(think())
    await asyncio.wait_for(started.wait(), WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    kinds = [e["kind"] for e in journal_events(tmp_path)]
    assert kinds == ["think_started", "token", "think_ended"]


async def test_stale_journals_of_other_runs_are_pruned(tmp_path):
    old = journal_path(tmp_path, "old-run")
    old.parent.mkdir(parents=True)
    old.write_text("{}\n")
    os.utime(old, (1, 1))
    recent = journal_path(tmp_path, "recent-run")
    recent.parent.mkdir(parents=True)
    recent.write_text("{}\n")
    async with LiveFeed(tmp_path).journal(RUN, 1):
        pass
    assert not old.parent.exists() and recent.exists()


async def test_a_journal_is_named_by_the_run_s_directory_when_it_has_one(tmp_path):
    feed = LiveFeed(tmp_path)
    async with feed.journal("flow-1/step-2", 1, "flow-1") as journal:
        journal.add("content", "in the flow's directory")
    async with feed.journal("odd/run", 1, "../escape") as journal:  # not a directory name: the id's
        journal.add("content", "x")
    assert journal_path(tmp_path, "flow-1").exists()
    assert journal_path(tmp_path, journal_dir_name("odd/run")).exists()
    assert not (tmp_path / "escape").exists() and sorted(p.name for p in (tmp_path / LIVE_DIR_NAME).iterdir()) == sorted(
        ["flow-1", journal_dir_name("odd/run")]
    )


async def test_the_run_page_gets_the_tokens_of_the_journal(tmp_path):
    from runtime.run_page import think_tokens

    async with LiveFeed(tmp_path).journal(RUN, 2) as journal:
        journal.add("content", "for the page")
    events = []
    async for event in think_tokens.think_events(tmp_path, NAME, 2):
        events.append(event)
    assert [(e.kind, e.text) for e in events] == [("think_started", ""), ("token", "for the page"), ("think_ended", "")]
