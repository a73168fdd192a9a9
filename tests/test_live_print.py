"""The streamed thought on the starter's progress line (runtime/live_print.py):
one line that fits the terminal, inert, dim; read from a real journal."""

from __future__ import annotations

import asyncio

from activities.live_feed import LiveFeed
from runtime.live_print import DIM, RESET, SEPARATOR, LiveThought, progress_with_thought, tail_fitting, width_of

WAIT = 10.0


def visible(line: str) -> str:
    return line.replace(DIM, "").replace(RESET, "")


def test_the_line_ends_with_the_thought_s_tail_dim_and_fits():
    line = progress_with_thought("… step 2/20 · 3 s · 120 tokens", "word " * 100 + "last words", 60)
    assert line.startswith("… step 2/20 · 3 s · 120 tokens" + SEPARATOR + DIM) and line.endswith("last words" + RESET)
    assert sum(width_of(c) for c in visible(line)) <= 59


def test_the_model_s_escapes_and_newlines_never_reach_the_terminal():
    line = progress_with_thought("… step 1/5", "clear\x1b[2J the\r\nscreen \x1b]52;c;cGFzdGU=\x07and\tmore", 80)
    text = visible(line)
    assert "\x1b" not in text and "\r" not in text and "\n" not in text and "\x07" not in text
    assert text.endswith("clear the screen and more")


def test_wide_characters_count_twice():
    assert tail_fitting("漢字漢字", 5) == "漢字"
    line = progress_with_thought("p", "漢" * 100, 30)
    assert sum(width_of(c) for c in visible(line)) <= 29


def test_a_narrow_terminal_shows_the_progress_alone():
    assert progress_with_thought("… step 1/5 · 1 s", "thinking", 20) == "… step 1/5 · 1 s"
    assert progress_with_thought("… step 1/5 · a long progress line", "x", 12) == "… step 1/5 "
    assert progress_with_thought("    … indented", "", 80) == "    … indented"


async def test_the_thought_follows_the_journal_and_hides_once_its_step_is_printed(tmp_path):
    changes = asyncio.Event()
    async def directory() -> str:
        return "run-7"

    thought = LiveThought(tmp_path, directory, changes.set)
    thought.start()
    try:
        async with LiveFeed(tmp_path).journal("run-7", 3) as journal:
            journal.add("content", "Looking at the data")

            async def shown() -> None:
                while thought.text != "Looking at the data":
                    await changes.wait()
                    changes.clear()

            await asyncio.wait_for(shown(), WAIT)
            assert thought.thinking and thought.step == 3
            assert thought.shown_after(2) == "Looking at the data"
            assert thought.shown_after(3) == ""  # step 3's line is out: the thought gives way
    finally:
        thought.stop()
