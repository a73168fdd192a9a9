"""The planning tool's commands and plan rendering (pure)."""

from __future__ import annotations

import pytest

from agent_model.plan import PlanBook, PlanningError, StepStatus, executor_for, run_command


def created(steps=("Analyse", "Build", "Check")) -> PlanBook:
    book = PlanBook()
    run_command(book, {"command": "create", "plan_id": "p1", "title": "Demo", "steps": list(steps)})
    return book


def test_create_activates_and_renders():
    book = PlanBook()
    out = run_command(book, {"command": "create", "plan_id": "p1", "title": "Demo", "steps": ["A", "B"]})
    assert book.active == "p1"
    assert "Progress: 0/2 steps completed (0%)" in out
    assert "0. [ ] A" in out and "1. [ ] B" in out


@pytest.mark.parametrize(
    "args, message",
    [
        ({"title": "t", "steps": ["a"]}, "`plan_id` is required"),
        ({"plan_id": "p", "steps": ["a"]}, "`title` is required"),
        ({"plan_id": "p", "title": "t", "steps": []}, "non-empty list"),
        ({"plan_id": "p", "title": "t", "steps": "a, b"}, "non-empty list"),
        ({"plan_id": "p", "title": "t", "steps": ["a", ""]}, "non-empty strings"),
    ],
)
def test_create_rejects_bad_arguments(args, message):
    with pytest.raises(PlanningError, match=message):
        run_command(PlanBook(), {"command": "create", **args})


def test_create_refuses_an_existing_id():
    with pytest.raises(PlanningError, match="already exists"):
        run_command(created(), {"command": "create", "plan_id": "p1", "title": "x", "steps": ["a"]})


def test_markers_and_progress():
    book = created()
    run_command(book, {"command": "mark_step", "step_index": 0, "step_status": "completed", "step_notes": "ok"})
    run_command(book, {"command": "mark_step", "step_index": 1, "step_status": "in_progress"})
    out = run_command(book, {"command": "mark_step", "plan_id": "p1", "step_index": 2, "step_status": "blocked"})
    assert "Progress: 1/3 steps completed (33%)" in out
    assert "Status: 1 completed, 1 in progress, 1 blocked, 0 not started" in out
    assert "0. [✓] Analyse\n   Notes: ok" in out
    assert "1. [→] Build" in out and "2. [!] Check" in out


@pytest.mark.parametrize(
    "args, message",
    [
        ({"step_index": 3}, "out of range"),
        ({"step_index": -1}, "out of range"),
        ({"step_index": "1"}, "integer"),
        ({}, "integer"),
        ({"step_index": 0, "step_status": "done"}, "unknown step_status 'done'"),
        ({"step_index": 0, "plan_id": "nope"}, "no plan with ID 'nope'"),
    ],
)
def test_mark_step_rejects_bad_arguments(args, message):
    with pytest.raises(PlanningError, match=message):
        run_command(created(), {"command": "mark_step", **args})


def test_update_keeps_status_only_for_unchanged_text():
    book = created()
    run_command(book, {"command": "mark_step", "step_index": 0, "step_status": "completed", "step_notes": "n"})
    run_command(book, {"command": "mark_step", "step_index": 1, "step_status": "completed"})
    run_command(book, {"command": "update", "title": "Demo 2", "steps": ["Analyse", "Build it better", "Check", "Ship"]})
    plan = book.get("p1")
    assert plan.title == "Demo 2"
    assert [s.status for s in plan.steps] == [
        StepStatus.COMPLETED,
        StepStatus.NOT_STARTED,
        StepStatus.NOT_STARTED,
        StepStatus.NOT_STARTED,
    ]
    assert plan.steps[0].notes == "n"


def test_list_get_set_active_delete():
    book = created()
    run_command(book, {"command": "create", "plan_id": "p2", "title": "Second", "steps": ["x"]})
    listing = run_command(book, {"command": "list"})
    assert "- p1: Demo - 0/3 steps completed" in listing and "- p2 (active): Second" in listing
    assert run_command(book, {"command": "get", "plan_id": "p1"}).startswith("Plan: Demo (ID: p1)")
    run_command(book, {"command": "set_active", "plan_id": "p1"})
    assert book.active == "p1"
    run_command(book, {"command": "delete", "plan_id": "p1"})
    assert book.active is None and list(book.plans) == ["p2"]
    with pytest.raises(PlanningError, match="no plan_id given and no plan is active"):
        run_command(book, {"command": "get"})
    with pytest.raises(PlanningError, match="unknown command 'shred'"):
        run_command(book, {"command": "shred"})
    assert run_command(PlanBook(), {"command": "list"}).startswith("No plans yet")


def test_executor_from_tag_case_insensitive():
    agents = ["manus", "data_analysis"]
    assert executor_for("[DATA_ANALYSIS] chart it", agents, "manus") == "data_analysis"
    assert executor_for("[Manus] write it", agents, "data_analysis") == "manus"
    assert executor_for("[unknown] do", agents, "manus") == "manus"
    assert executor_for("no tag", agents, "data_analysis") == "data_analysis"


def test_plan_from_reply_uses_our_id_and_reports_problems():
    from agent_model.plan import plan_from_reply

    args = '{"command": "create", "plan_id": "theirs", "title": "T", "steps": ["a", "b"]}'
    plan, problem = plan_from_reply("ours", "task", [("other_tool", "{}"), ("planning", args)])
    assert problem == "" and plan.plan_id == "ours" and [s.text for s in plan.steps] == ["a", "b"]
    assert plan_from_reply("p", "task", []) == (None, "the planner did not call the planning tool")
    assert plan_from_reply("p", "task", [("planning", "{oops")])[1].startswith("the planning call's arguments are not valid JSON")
    assert "non-empty list" in plan_from_reply("p", "task", [("planning", '{"steps": []}')])[1]
    untitled, _ = plan_from_reply("p", "Build a site\nwith details", [("planning", '{"steps": ["x"]}')])
    assert untitled.title == "Build a site"


def test_revised_steps_keep_what_is_done():
    from agent_model.plan import Plan, PlanStep, revised_steps

    plan = Plan(plan_id="p", title="t", steps=[PlanStep(text=t) for t in ("a", "b", "c")])
    full = '{"command": "update", "steps": ["a", "b", "b2", "c2"]}'
    steps, _ = revised_steps(plan, 1, [("planning", full)])
    assert [s.text for s in steps] == ["b2", "c2"]
    only_rest, _ = revised_steps(plan, 1, [("planning", '{"steps": ["x"]}')])
    assert [s.text for s in only_rest] == ["x"]
    assert revised_steps(plan, 1, [("planning", '{"steps": ["a", "b"]}')]) == (None, "the revised plan has no steps left to run")
