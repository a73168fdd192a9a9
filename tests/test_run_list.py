"""`list` and `show` answer "which run, what state, what does it want", and a
starter command ends cleanly where it used to end in a traceback: an --id a
running run has, a pipe closed early."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

import pytest

from agent_model.run import AgentRunInput
from testkit.e2e import REPO_DIR, wait_until
from testkit.fake_openai import ErrorReply, Reply, call, python, terminate
from testkit.run_results import final_result
from tests.test_run_control import Harness, harness, wait_for_question  # noqa: F401 (a fixture)
from workflows import search_attributes
from workflows.agent import AgentWorkflow


async def finished_run(h: Harness, turns, task: str, run_id: str | None = None, **run):
    h.fake.turns = turns
    handle = await h.dev_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=task, agent="manus", **run),
        id=run_id or f"ls-{uuid.uuid4().hex[:8]}",
        task_queue=h.settings.task_queue,
        search_attributes=search_attributes.initial("manus"),
    )
    await final_result(handle)
    return handle


def says(line: str, word: str) -> bool:
    """Whether a row has `word` as one of its cells (cells are 2 spaces apart)."""
    return re.search(rf"(^|\s\s){re.escape(word)}(\s\s|$)", line) is not None


def rows(out: str) -> dict[str, str]:
    """Each row's line by its run id."""
    return {line.split()[0]: line for line in out.splitlines()[1:]}


async def listed(h: Harness, *args: str, expect: set[str]) -> str:
    """The list, once every run in `expect` is in it (visibility is eventually consistent)."""
    seen = {}

    async def complete() -> bool:
        seen["out"] = await h.cli("list", "--limit", "100", *args)
        return expect <= set(rows(seen["out"]))

    await wait_until(complete, 30, f"runs {expect} in the list", 0.3)
    return seen["out"]


async def test_list_says_how_each_run_ended_what_it_waits_for_and_its_task(harness):
    h = harness
    done = await finished_run(h, [terminate("ok")], "Say   ok\nplease")
    gave_up = await finished_run(h, [terminate("cannot", status="failure")], "An impossible task")
    error = await finished_run(h, [ErrorReply(401)], "A task for a bad key")
    limit = await finished_run(h, [python("print(1)")], "A task too long for one step", max_steps=1)
    h.fake.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "Which colour?"})]), terminate("blue")]
    waiting = await h.start("Pick a colour")
    await wait_for_question(waiting)

    ids = {done.id, gave_up.id, error.id, limit.id, waiting.id}
    table = rows(await listed(h, expect=ids))
    assert (await h.cli("list", "--limit", "1")).splitlines()[0].split() == [
        "RUN", "ID", "AGENT/FLOW", "STATE", "STEP", "AGE", "TASK"
    ]
    assert says(table[done.id], "finished") and table[done.id].endswith("Say ok please")
    assert says(table[gave_up.id], "gave up") and table[gave_up.id].endswith("An impossible task")
    assert says(table[error.id], "error")
    assert says(table[limit.id], "step limit")
    assert says(table[waiting.id], "waits for an answer") and table[waiting.id].endswith("Pick a colour")

    assert set(rows(await h.cli("list", "--state", "waiting", "--limit", "100"))) >= {waiting.id}
    assert not set(rows(await h.cli("list", "--state", "waiting", "--limit", "100"))) & (ids - {waiting.id})
    failed = set(rows(await h.cli("list", "--state", "failed", "--limit", "100")))
    assert {gave_up.id, error.id, limit.id} <= failed and done.id not in failed
    assert done.id in rows(await h.cli("list", "--state", "finished", "--limit", "100"))
    assert len(rows(await h.cli("list", "--limit", "2"))) == 2
    assert "--limit must be from 1 to 1000" in await h.cli("list", "--limit", "0", expect=2)
    assert "invalid choice" in await h.cli("list", "--state", "done", expect=2)

    shown = await h.cli("show", waiting.id)
    assert "(no step finished yet)" not in shown
    assert "? question 1.1 waits for an answer: Which colour?" in shown
    assert f'answer with: python starter.py answer {waiting.id} "..."' in shown

    assert f"run {waiting.id} is already running; attach to it with: python starter.py attach {waiting.id}" in (
        await h.cli("run", "--id", waiting.id, "another task", expect=2)
    )

    await h.cli("cancel", waiting.id)
    cancelled = rows(await listed(h, "--state", "cancelled", expect={waiting.id}))
    assert says(cancelled[waiting.id], "cancelled")

    out = await h.cli("result", done.id)
    assert "finished: the agent ended its task (1 step, " in out and "terminated" not in out
    assert "gave up: the agent ended without doing its task" in await h.cli("result", gave_up.id, expect=1)


async def test_a_rewound_run_and_a_reused_id_are_one_row_each(harness):
    h = harness
    reused = f"ls-{uuid.uuid4().hex[:8]}"
    await finished_run(h, [terminate("first")], "The first task", run_id=reused)
    await finished_run(h, [terminate("again", status="failure")], "The second task", run_id=reused)
    rewound = await finished_run(h, [python("print(1)"), terminate("done")], "A task to rewind")
    h.fake.turns = [python("print(1)"), terminate("done again")]
    await h.cli("rewind", rewound.id, "--to-step", "1")

    out = await listed(h, expect={reused, rewound.id})
    ids = [line.split()[0] for line in out.splitlines()[1:]]
    assert ids.count(reused) == 1 and ids.count(rewound.id) == 1
    table = rows(out)
    assert says(table[reused], "gave up") and table[reused].endswith("The second task")
    assert says(table[rewound.id], "finished")


def test_the_task_column_is_cut_to_the_terminal_width_and_inert():
    from datetime import datetime, timezone

    from agent_model.outcome_words import StateClass
    from runtime.run_list import RunRow, table

    now = datetime.now(timezone.utc)
    row = RunRow("manus-1", "manus", "A \x1b]0;pwned\x07long " + "task " * 40, "RUNNING", "running",
                 StateClass.RUNNING, 3, now)
    lines = table([row], now, width=80)
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[1].endswith("…") and "\x1b" not in lines[1] and "pwned" not in lines[1]


@pytest.mark.e2e
async def test_list_into_a_pipe_closed_early_ends_without_a_traceback(harness):
    h = harness
    run = await finished_run(h, [terminate("ok")], "A task")
    await listed(h, expect={run.id})
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the list is written: `list | head -0`
    proc = subprocess.run(
        [sys.executable, "starter.py", "list"], cwd=REPO_DIR, env=h.env, stdout=write_end,
        stderr=subprocess.PIPE, text=True, timeout=60,
    )
    os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141
