"""Tool arguments the model writes can be hostile: nested thousands deep or
megabytes long. They become an observation for the model; the run goes on."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent_model.flow import FlowOutcome
from agent_model.plan import (
    COMMANDS,
    DEFAULT_STEPS,
    MAX_PLAN_STEPS,
    MAX_PLANS,
    STEP_TEXT_LIMIT,
    PlanBook,
    PlanningError,
    plan_from_reply,
    revised_steps,
    run_command,
)
from agent_model.state import StopReason
from agent_model.tool_arguments import MAX_ARGUMENT_BYTES, MAX_ARGUMENT_DEPTH, nesting_depth, parse_arguments
from testkit.fake_openai import Reply, call, terminate
from tests.test_agent_workflow import start, tool_messages
from tests.test_planning_flow import FlowScript, start_flow

DEEP = "[" * 1000 + "]" * 1000
DEEP_ARGUMENTS = '{"code": ' + DEEP + "}"
RUN_SECONDS = 60
"""A wedged run never ends; a healthy one ends in seconds."""


# ---- the pure parser ------------------------------------------------------------------


def test_ordinary_arguments_parse_as_before():
    assert parse_arguments("bash", '{"command": "ls", "n": [1, {"a": 2}]}') == ({"command": "ls", "n": [1, {"a": 2}]}, None)
    assert parse_arguments("bash", "") == ({}, None)


@pytest.mark.parametrize(
    "text, depth",
    [
        ("{}", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('{"a": "[[[[{{{{"}', 1),  # brackets inside strings do not count
        ('{"a": "\\"[[[["}', 1),  # nor after an escaped quote
        ('{"a": "\\\\", "b": [[]]}', 3),  # an escaped backslash ends before the quote
        ("[" * 1000, 1000),
    ],
)
def test_nesting_depth_counts_outside_strings(text, depth):
    assert nesting_depth(text) == depth


def test_deep_arguments_are_refused_before_parsing():
    arguments, error = parse_arguments("python_execute", DEEP_ARGUMENTS)
    assert arguments is None
    assert error == f"Error: the arguments of python_execute are nested deeper than {MAX_ARGUMENT_DEPTH} levels."


def test_the_deepest_allowed_arguments_parse():
    text = '{"a": ' + "[" * (MAX_ARGUMENT_DEPTH - 1) + "]" * (MAX_ARGUMENT_DEPTH - 1) + "}"
    arguments, error = parse_arguments("x", text)
    assert error is None and arguments is not None


def test_huge_arguments_are_refused_before_parsing():
    text = json.dumps({"code": "x" * MAX_ARGUMENT_BYTES})
    arguments, error = parse_arguments("python_execute", text)
    assert arguments is None
    assert error.startswith("Error: the arguments of python_execute are")
    assert f"over the limit of {MAX_ARGUMENT_BYTES} bytes" in error


def test_bad_json_and_non_objects_keep_their_observations():
    assert parse_arguments("bash", '{"a": ')[1].startswith("Error: the arguments of bash are not valid JSON (")
    assert parse_arguments("bash", "[1]")[1] == "Error: the arguments of bash are not a JSON object."
    assert parse_arguments("bash", '{"n": ' + "9" * 5000 + "}")[1].startswith("Error: the arguments of bash are not readable JSON")


def test_a_deep_or_huge_plan_falls_back_to_the_default():
    deep = [("planning", '{"command": "create", "steps": ' + DEEP + "}")]
    plan, problem = plan_from_reply("p", "task", deep)
    assert plan is None and f"nested deeper than {MAX_ARGUMENT_DEPTH} levels" in problem
    huge = [("planning", json.dumps({"steps": ["x" * MAX_ARGUMENT_BYTES]}))]
    plan, problem = plan_from_reply("p", "task", huge)
    assert plan is None and f"over the limit of {MAX_ARGUMENT_BYTES} bytes" in problem
    existing, _ = plan_from_reply("p", "task", [("planning", '{"steps": ["a", "b"]}')])
    steps, problem = revised_steps(existing, 0, deep)
    assert steps is None and "nested deeper" in problem


# ---- whole runs ---------------------------------------------------------------------------


HOSTILE = {
    "deep": DEEP_ARGUMENTS,
    "huge": json.dumps({"code": "#" * (MAX_ARGUMENT_BYTES + 100_000)}),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
async def test_hostile_arguments_become_an_observation_and_the_run_goes_on(
    time_skipping_env, worker, settings, fake_llm, kind
):
    fake_llm.turns = [Reply(tool_calls=[call("python_execute", raw_arguments=HOSTILE[kind])]), terminate("survived")]
    handle = await start(time_skipping_env, settings)
    result = await asyncio.wait_for(handle.result(), RUN_SECONDS)

    assert result.stop_reason == StopReason.TERMINATED and result.final_answer == "survived"
    (reply,) = tool_messages(fake_llm.requests[1])
    assert reply["content"].startswith("Error: the arguments of python_execute are")
    assert result.steps[0].tool_calls[0].error


@pytest.mark.parametrize("kind", list(HOSTILE))
async def test_a_hostile_plan_falls_back_to_the_default_plan(time_skipping_env, worker, settings, fake_llm, kind):
    raw = HOSTILE[kind].replace('"code"', '"steps"')
    fake_llm.responder = FlowScript(
        Reply(tool_calls=[call("planning", raw_arguments=raw)]), {n: [terminate(f"ok {n}")] for n in (1, 2, 3)}
    )
    handle = await start_flow(time_skipping_env, settings)
    result = await asyncio.wait_for(handle.result(), RUN_SECONDS)
    assert [s.text for s in result.plan.steps] == list(DEFAULT_STEPS)
    assert result.plan.notes.startswith("Default plan: the planning call's arguments are")
    assert result.outcome == FlowOutcome.COMPLETED


ODD_VALUES = [None, 5, 2.5, True, [], {}, [1], ["a"], "x" * 300, {"a": 1}, -1]


@pytest.mark.parametrize("field", ["plan_id", "title", "steps", "step_index", "step_status", "step_notes"])
def test_any_planning_arguments_give_an_answer_or_a_planning_error(field):
    """The planning tool runs inside the workflow: an exception other than
    PlanningError would fail the workflow task on every retry."""
    for command in [*COMMANDS, None, 5]:
        for value in ODD_VALUES:
            book = PlanBook()
            run_command(book, {"command": "create", "plan_id": "p", "title": "t", "steps": ["a", "b"]})
            try:
                run_command(book, {"command": command, "plan_id": "p", "step_index": 0, field: value})
            except PlanningError:
                pass


def test_plans_are_bounded():
    book = PlanBook()
    with pytest.raises(PlanningError, match=f"at most {MAX_PLAN_STEPS} steps"):
        run_command(book, {"command": "create", "plan_id": "p", "title": "t", "steps": ["s"] * (MAX_PLAN_STEPS + 1)})
    with pytest.raises(PlanningError, match=f"longer than {STEP_TEXT_LIMIT} characters"):
        run_command(book, {"command": "create", "plan_id": "p", "title": "t", "steps": ["s" * (STEP_TEXT_LIMIT + 1)]})
    for n in range(MAX_PLANS):
        run_command(book, {"command": "create", "plan_id": f"p{n}", "title": "T" * 10_000, "steps": ["a"]})
    with pytest.raises(PlanningError, match=f"already {MAX_PLANS} plans"):
        run_command(book, {"command": "create", "plan_id": "one-more", "title": "t", "steps": ["a"]})
    assert len(book.plans["p0"].title) < 300
    run_command(book, {"command": "mark_step", "plan_id": "p0", "step_index": 0, "step_notes": "n" * 100_000})
    assert len(book.plans["p0"].steps[0].notes) < 2100
