"""Following a run as the starter does: step lines, and a question answered from a terminal."""

from __future__ import annotations

import io
import os
import re
import sys

from runtime.follow import CLEAR_LINE, follow
from testkit.fake_openai import Reply, call, terminate
from tests.test_agent_workflow import PROFILE, start


async def test_follow_prints_steps_and_answers_a_question(time_skipping_env, worker, settings, fake_llm, monkeypatch):
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", {"code": "print(6*7)"})]),
        Reply(tool_calls=[call("ask_human", {"inquire": "Favourite colour?"})]),
        terminate("noted: blue"),
    ]
    read_end, write_end = os.pipe()
    os.write(write_end, b"\nblue\n")  # an empty line first: refused, asked again
    monkeypatch.setattr(sys, "stdin", os.fdopen(read_end, "r"))
    handle = await start(time_skipping_env, settings, profile=PROFILE)
    out = io.StringIO()
    with time_skipping_env.auto_time_skipping_disabled():  # a person answers in real time
        result = await follow(handle, out, interactive=True)
    os.close(write_end)

    text = out.getvalue()
    assert result.final_answer == "noted: blue"
    assert "[1/6] python_execute → 42" in text
    assert "? The agent asks: Favourite colour?" in text
    assert "an empty answer is not accepted" in text
    assert "[2/6] ask_human → The user answered: blue" in text
    assert text.count("[1/6]") == 1  # each step printed once


async def test_follow_without_a_terminal_prints_the_question(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "Proceed?"})]), terminate()]
    handle = await start(time_skipping_env, settings, profile=PROFILE.model_copy(update={"human_timeout_seconds": 2}))
    out = io.StringIO()
    with time_skipping_env.auto_time_skipping_disabled():
        result = await follow(handle, out, interactive=False)
    assert result.succeeded
    assert f"? waiting for an answer to question 1.1 of {handle.id}: Proceed?" in out.getvalue()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_progress_line_on_a_terminal_only(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", {"code": "import time; time.sleep(1.5); print(1)"})]),
        Reply(tool_calls=[call("python_execute", {"code": "import time; time.sleep(1.5); print(2)"})]),
        terminate("done"),
    ]
    handle = await start(time_skipping_env, settings, profile=PROFILE)
    terminal = Terminal()
    await follow(handle, terminal, interactive=False)
    text = terminal.getvalue()
    assert "\r\x1b[K… step 2/6 · after python_execute · " in text
    assert "\r\x1b[K[1/6] python_execute → 1" in text
    assert text.endswith("\r\x1b[K")

    fake_llm.turns = [terminate("plain")]
    handle = await start(time_skipping_env, settings, profile=PROFILE)
    plain = io.StringIO()
    await follow(handle, plain, interactive=False)
    assert "\x1b" not in plain.getvalue() and "\r" not in plain.getvalue()


async def test_end_of_input_while_asked_stops_asking(time_skipping_env, worker, settings, fake_llm, monkeypatch):
    # A terminal that closes (Ctrl-D, a closed pipe) reads "" forever; it must
    # not be taken for an empty answer asked again and again.
    fake_llm.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "Proceed?"})]), terminate()]
    read_end, write_end = os.pipe()
    os.close(write_end)
    monkeypatch.setattr(sys, "stdin", os.fdopen(read_end, "r"))
    handle = await start(time_skipping_env, settings, profile=PROFILE.model_copy(update={"human_timeout_seconds": 2}))
    out = io.StringIO()
    with time_skipping_env.auto_time_skipping_disabled():
        result = await follow(handle, out, interactive=True)
    text = out.getvalue()
    assert result.succeeded
    assert text.count("? The agent asks: Proceed?") == 1
    assert "an empty answer is not accepted" not in text
    assert f"no more input; answer later with: python starter.py answer {handle.id}" in text


async def test_a_result_call_failing_while_the_server_is_waited_for_leaves_no_traceback():
    # The run's result call fails with the server gone while the starter is
    # still waiting for the server; asyncio would print its unread error as
    # "Task exception was never retrieved" (seen in CI).
    import asyncio
    import gc

    from temporalio.service import RPCError, RPCStatusCode

    from runtime.follow import ServerLost, Watch, _until_done

    def gone() -> RPCError:
        return RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")

    class GoneHandle:
        id = "run-gone"

        async def result(self):
            await asyncio.sleep(0.05)
            raise gone()

    class GoneServer(Watch):
        def __init__(self) -> None:
            self.waiting = True  # no status queries

        async def check(self, progress) -> None:
            raise gone()

        async def wait_for_server(self, run_id, progress) -> None:
            await asyncio.sleep(0.3)  # the result call fails meanwhile
            raise ServerLost("the Temporal server did not come back")

    class Quiet:
        def close(self) -> None:
            pass

    unread: list[dict] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unread.append(context))
    try:
        try:
            await _until_done(GoneHandle(), Quiet(), GoneServer())
        except ServerLost:
            pass
        await asyncio.sleep(0.1)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [context.get("message") for context in unread] == []


async def test_on_a_terminal_only_the_starters_own_control_sequence_is_printed(
    time_skipping_env, worker, settings, fake_llm, monkeypatch
):
    """The progress line is redrawn with CLEAR_LINE; what the run wrote (a tool
    name, an observation, a question, the answer) reaches the terminal inert."""
    hostile = "x\x1b[2J\x1b]0;owned\x07\x1b]52;c;b3duZWQ=\x1b\\\rover\x9b1m\x08y"
    fake_llm.turns = [
        Reply(tool_calls=[call(f"rocket{hostile}", {})]),
        Reply(tool_calls=[call("ask_human", {"inquire": f"Sure? {hostile}"})]),
        terminate(f"done {hostile}"),
    ]
    read_end, write_end = os.pipe()
    os.write(write_end, b"yes\n")
    monkeypatch.setattr(sys, "stdin", os.fdopen(read_end, "r"))
    handle = await start(time_skipping_env, settings, profile=PROFILE)
    terminal = Terminal()
    with time_skipping_env.auto_time_skipping_disabled():
        result = await follow(handle, terminal, interactive=True)
    os.close(write_end)
    assert result.succeeded
    text = terminal.getvalue()
    assert "\r\x1b[K" in text  # the progress line, on a terminal
    own = text.replace(CLEAR_LINE, "")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", own), repr(own)
    assert "unknown tool 'rocketxovery'" in text and "? The agent asks: Sure? xovery" in text
