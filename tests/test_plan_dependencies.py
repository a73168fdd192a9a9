"""Dependencies between plan steps (agent_model/plan.py), as pure functions."""

from __future__ import annotations

import json

from agent_model.plan import (
    MAX_PLAN_STEPS,
    Plan,
    PlanBook,
    PlanStep,
    StepStatus,
    dependencies_argument,
    kept_before_replan,
    needs_a_blocked_step,
    plan_from_reply,
    ready_steps,
    revised_steps,
    run_command,
)


def plan_of(*needs, statuses=()) -> Plan:
    steps = [PlanStep(text=f"s{n}", depends_on=need) for n, need in enumerate(needs, start=1)]
    for step, status in zip(steps, statuses):
        step.status = status
    return Plan(plan_id="p", title="t", steps=steps)


def planning(**arguments) -> list[tuple[str, str]]:
    return [("planning", json.dumps(arguments))]


def test_undeclared_dependencies_mean_the_step_before():
    plan = plan_of(None, None, None)
    assert ready_steps(plan, running=()) == [0]
    plan.steps[0].status = StepStatus.COMPLETED
    assert ready_steps(plan, running=()) == [1]


def test_independent_steps_are_all_ready_but_not_twice():
    plan = plan_of([], [], [], [])
    assert ready_steps(plan, running=()) == [0, 1, 2, 3]
    assert ready_steps(plan, running={0, 2}) == [1, 3]


def test_a_step_waits_for_every_step_it_needs():
    plan = plan_of([], [], [1, 2], statuses=[StepStatus.COMPLETED, StepStatus.IN_PROGRESS])
    assert ready_steps(plan, running={1}) == []
    plan.steps[1].status = StepStatus.COMPLETED
    assert ready_steps(plan, running=()) == [2]


def test_only_earlier_known_steps_can_be_needed():
    needs, notes = dependencies_argument([[], [1, 2], [3, 9, 0, "1", True, 1], None, "x"], 5)
    assert needs == [[], [1], [1], None, None]
    assert "step 2 can only need earlier steps: dropped 2." in notes
    assert any(n.startswith("step 3 can only need earlier steps: dropped 3, 9, 0") for n in notes)
    assert "step 5's `depends_on` is not a list: it needs the step before it." in notes


def test_a_bad_or_oversized_argument_is_bounded():
    assert dependencies_argument("everything", 2) == ([None, None], ["`depends_on` is not a list of lists of step numbers: ignored."])
    needs, notes = dependencies_argument([[]] * (MAX_PLAN_STEPS + 5), 3)
    assert needs == [[], [], []] and "extra ones were dropped" in notes[0]
    needs, _ = dependencies_argument([None, list(range(10_000))], 2)
    assert needs == [None, [1]]


def test_the_planners_reply_carries_dependencies_and_notes():
    plan, problem = plan_from_reply("plan", "task", planning(command="create", steps=["a", "b", "c"], depends_on=[[], [], [1, 3]]))
    assert problem == "" and plan is not None
    assert [s.depends_on for s in plan.steps] == [[], [], [1]]
    assert "step 3 can only need earlier steps: dropped 3." in plan.notes
    assert "2. [ ] b (needs: nothing)" in plan.render(first_number=1)
    assert "3. [ ] c (needs: 1)" in plan.render(first_number=1)


def test_the_planning_tool_updates_dependencies_and_keeps_status():
    book = PlanBook()
    run_command(book, {"command": "create", "plan_id": "p", "title": "t", "steps": ["a", "b"]})
    run_command(book, {"command": "mark_step", "step_index": 0, "step_status": "completed"})
    run_command(book, {"command": "update", "steps": ["a", "b"], "depends_on": [[], []]})
    steps = book.get("p").steps
    assert [s.depends_on for s in steps] == [[], []] and steps[0].status == StepStatus.COMPLETED


def test_a_blocked_need_is_found_through_other_steps():
    plan = plan_of([], [1], [2], [], statuses=[StepStatus.BLOCKED])
    assert needs_a_blocked_step(plan, 2) == 0
    assert needs_a_blocked_step(plan, 3) is None


def test_a_replan_keeps_every_finished_step_and_renumbers_dependencies():
    done, blocked = StepStatus.COMPLETED, StepStatus.BLOCKED
    plan = plan_of([], [], [], [], statuses=[blocked, done, done])
    keep = kept_before_replan(plan)
    assert keep == 3
    steps, problem = revised_steps(
        plan, 0, planning(command="update", steps=["s1", "s2", "s3", "again", "then"], depends_on=[[], [], [], [2], [4, 3]]), keep=keep
    )
    assert problem == ""
    assert [(s.text, s.depends_on) for s in steps] == [("again", [2]), ("then", [3, 4])]


def test_a_replan_without_keep_is_todays():
    plan = plan_of(None, None, None, statuses=[StepStatus.COMPLETED, StepStatus.BLOCKED])
    steps, _ = revised_steps(plan, 1, planning(command="update", steps=["s1", "s2", "new"]))
    assert [(s.text, s.depends_on) for s in steps] == [("new", None)]
