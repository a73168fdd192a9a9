"""What following a run prints reads cleanly: a flow's lines do not run into a
step's progress line, its plan is numbered like its steps, a step line says
`[n/limit]` however the result and the status queries raced, and an
outcome reads in a user's words."""

from __future__ import annotations

import inspect
import io
import re

from agent_model.outcome_words import AGENT_OUTCOMES, FLOW_OUTCOMES, StateClass
from agent_model.flow import FlowOutcome
from agent_model.state import StopReason
from runtime.command_line import LIST_STATES
from runtime.follow import CLEAR_LINE, AgentProgress, follow_flow
from testkit.fake_openai import python, terminate
from tests.test_agent_workflow import PROFILE, start
from tests.test_follow import Terminal
from tests.test_planning_flow import FlowScript, plan_reply, start_flow


def screen(text: str) -> list[str]:
    """The lines a terminal shows: each erase-line starts its line afresh."""
    return [line.split(CLEAR_LINE)[-1] for line in text.split("\n")]


async def test_a_flow_on_a_terminal_clears_the_progress_line_and_numbers_its_plan_from_1(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.responder = FlowScript(
        plan_reply("Compute it", "Report it"),
        # Step 2 takes long enough to be polled: step 1's outcome is printed by a poll, not after the flow's end.
        {1: [python("import time; time.sleep(1.5); print(1)"), terminate("one")],
         2: [python("import time; time.sleep(1.5); print(2)"), terminate("two")]},
    )
    handle = await start_flow(time_skipping_env, settings)
    terminal = Terminal()
    await follow_flow(time_skipping_env.client, handle, terminal, interactive=False)
    text = terminal.getvalue()

    assert "    … step 1/20 · " in text  # the step run's progress line was drawn...
    lines = screen(text)
    for line in lines:  # ...and every flow line starts on a line of its own
        if "completed:" in line or "started (" in line:
            assert line.startswith("step "), line
    assert any(re.fullmatch(r"1\. \[.\] Compute it", line) for line in lines), lines
    assert any(re.fullmatch(r"2\. \[.\] Report it", line) for line in lines), lines
    assert not any(line.startswith("0. ") for line in lines)


async def test_step_lines_say_the_step_limit_when_the_result_came_before_any_status(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.turns = [python("print(1)"), terminate("done")]
    handle = await start(time_skipping_env, settings, profile=PROFILE)
    result = await handle.result()
    out = io.StringIO()
    progress = AgentProgress(handle, out, interactive=False, converter=time_skipping_env.client.data_converter)
    done = progress.finish(result)  # no poll first: as when the run ended before the first status answer
    if inspect.isawaitable(done):
        await done
    assert out.getvalue().splitlines() == [
        "[1/6] python_execute → 1",
        "[2/6] terminate → The run ends (terminated).",
    ]


def test_every_outcome_has_words_and_only_success_reads_finished():
    assert set(AGENT_OUTCOMES) == set(StopReason) and set(FLOW_OUTCOMES) == set(FlowOutcome)
    finished = {reason for reason, outcome in AGENT_OUTCOMES.items() if outcome.word == "finished"}
    assert finished == {reason for reason in StopReason if reason.succeeded}
    assert AGENT_OUTCOMES[StopReason.TERMINATED].sentence() == "finished: the agent ended its task"
    assert all("terminated" not in outcome.sentence() for outcome in AGENT_OUTCOMES.values())
    assert [FLOW_OUTCOMES[o].word for o in FlowOutcome if FLOW_OUTCOMES[o].state_class == StateClass.FINISHED] == [
        "finished"
    ]
    assert LIST_STATES == tuple(state.value for state in StateClass)
