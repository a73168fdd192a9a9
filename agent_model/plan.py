"""Plans and the planning tool's commands, as pure functions over workflow state."""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from agent_model.payload import clip
from agent_model.tool_arguments import read_arguments

MAX_PLANS = 20
"""Plans one run may hold: the plans are workflow state, returned whole by a query."""
MAX_PLAN_STEPS = 50
"""Steps of one plan; a PlanningFlow runs each as a child workflow."""
STEP_TEXT_LIMIT = 2000
"""Characters of one step's text."""
TITLE_LIMIT = 200
PLAN_ID_LIMIT = 100
NOTES_LIMIT = 2000
"""Characters of a step's notes."""


class StepStatus(str, Enum):
    NOT_STARTED = "not_started"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    BLOCKED = "blocked"

    @property
    def marker(self) -> str:
        return {"not_started": "[ ]", "in_progress": "[→]", "completed": "[✓]", "blocked": "[!]"}[self.value]


class PlanStep(BaseModel):
    text: str
    status: StepStatus = StepStatus.NOT_STARTED
    notes: str = ""
    executor: str | None = None
    """Agent key that ran (or will run) the step, in a PlanningFlow."""
    run_id: str | None = None
    """Workflow id of the child run that carried the step out."""

    @property
    def finished(self) -> bool:
        return self.status in (StepStatus.COMPLETED, StepStatus.BLOCKED)


class Plan(BaseModel):
    plan_id: str
    title: str
    steps: list[PlanStep] = Field(default_factory=list)
    notes: str = ""

    def count(self, status: StepStatus) -> int:
        return sum(1 for s in self.steps if s.status == status)

    def render(self, first_number: int = 0) -> str:
        """The plan as text, its steps numbered from `first_number`: 0 for the
        model, whose planning commands index steps from 0; 1 for a person, as
        the terminal numbers steps and runs."""
        total = len(self.steps)
        done = self.count(StepStatus.COMPLETED)
        percent = (100 * done // total) if total else 0
        lines = [
            f"Plan: {self.title} (ID: {self.plan_id})",
            f"Progress: {done}/{total} steps completed ({percent}%)",
            f"Status: {done} completed, {self.count(StepStatus.IN_PROGRESS)} in progress, "
            f"{self.count(StepStatus.BLOCKED)} blocked, {self.count(StepStatus.NOT_STARTED)} not started",
        ]
        if self.notes:
            lines.append(f"Notes: {self.notes}")
        lines.append("")
        lines.append("Steps:")
        for i, step in enumerate(self.steps, start=first_number):
            lines.append(f"{i}. {step.status.marker} {step.text}")
            if step.notes:
                lines.append(f"   Notes: {step.notes}")
        return "\n".join(lines)


class PlanningError(ValueError):
    """A planning command the model got wrong; its message goes back to the model."""


class PlanBook(BaseModel):
    """The planning tool's state: every plan by id, and the active one."""

    plans: dict[str, Plan] = Field(default_factory=dict)
    active: str | None = None

    def get(self, plan_id: str | None) -> Plan:
        plan_id = plan_id or self.active
        if not plan_id:
            raise PlanningError("no plan_id given and no plan is active")
        if plan_id not in self.plans:
            raise PlanningError(f"no plan with ID {plan_id!r}")
        return self.plans[plan_id]


COMMANDS = ("create", "update", "list", "get", "set_active", "mark_step", "delete")


def _steps_argument(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(s, str) and s.strip() for s in value):
        raise PlanningError("`steps` must be a non-empty list of non-empty strings")
    if len(value) > MAX_PLAN_STEPS:
        raise PlanningError(f"a plan has at most {MAX_PLAN_STEPS} steps, not {len(value)}")
    steps = [s.strip() for s in value]
    too_long = next((i for i, s in enumerate(steps) if len(s) > STEP_TEXT_LIMIT), None)
    if too_long is not None:
        raise PlanningError(f"step {too_long} is longer than {STEP_TEXT_LIMIT} characters; keep steps short")
    return steps


def _plan_id(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > PLAN_ID_LIMIT:
        raise PlanningError(f"`plan_id` must be a string of at most {PLAN_ID_LIMIT} characters")
    return value


def _title(title: Any) -> str:
    return clip(str(title).strip(), TITLE_LIMIT)


def create(book: PlanBook, plan_id: str | None, title: str | None, steps: Any) -> str:
    if not plan_id:
        raise PlanningError("`plan_id` is required for create")
    if plan_id in book.plans:
        raise PlanningError(f"a plan with ID {plan_id!r} already exists; use update")
    if len(book.plans) >= MAX_PLANS:
        raise PlanningError(f"there are already {MAX_PLANS} plans; delete one first")
    if not title or not str(title).strip():
        raise PlanningError("`title` is required for create")
    plan = Plan(plan_id=plan_id, title=_title(title), steps=[PlanStep(text=t) for t in _steps_argument(steps)])
    book.plans[plan_id] = plan
    book.active = plan_id
    return f"Created plan {plan_id} (now active).\n\n{plan.render()}"


def update(book: PlanBook, plan_id: str | None, title: str | None, steps: Any) -> str:
    plan = book.get(plan_id)
    if title:
        plan.title = _title(title)
    if steps is not None:
        old = plan.steps
        new_steps = []
        for i, text in enumerate(_steps_argument(steps)):
            if i < len(old) and old[i].text == text:
                new_steps.append(old[i])  # unchanged text keeps its status and notes
            else:
                new_steps.append(PlanStep(text=text))
        plan.steps = new_steps
    return f"Updated plan {plan.plan_id}.\n\n{plan.render()}"


def list_plans(book: PlanBook) -> str:
    if not book.plans:
        return "No plans yet. Create one with command `create`."
    lines = ["Plans:"]
    for plan in book.plans.values():
        active = " (active)" if plan.plan_id == book.active else ""
        done = plan.count(StepStatus.COMPLETED)
        lines.append(f"- {plan.plan_id}{active}: {plan.title} - {done}/{len(plan.steps)} steps completed")
    return "\n".join(lines)


def set_active(book: PlanBook, plan_id: str | None) -> str:
    if not plan_id:
        raise PlanningError("`plan_id` is required for set_active")
    plan = book.get(plan_id)
    book.active = plan.plan_id
    return f"Plan {plan.plan_id} is now active.\n\n{plan.render()}"


def mark_step(
    book: PlanBook, plan_id: str | None, step_index: Any, step_status: Any, step_notes: Any
) -> str:
    plan = book.get(plan_id)
    if not isinstance(step_index, int) or isinstance(step_index, bool):
        raise PlanningError("`step_index` (an integer, 0-based) is required for mark_step")
    if not 0 <= step_index < len(plan.steps):
        raise PlanningError(f"step_index {step_index} is out of range: the plan has steps 0 to {len(plan.steps) - 1}")
    step = plan.steps[step_index]
    if step_status is not None:
        try:
            step.status = StepStatus(step_status)
        except ValueError:
            allowed = ", ".join(s.value for s in StepStatus)
            raise PlanningError(f"unknown step_status {step_status!r}; use one of {allowed}") from None
    if step_notes is not None:
        step.notes = clip(str(step_notes), NOTES_LIMIT)
    return f"Step {step_index} of plan {plan.plan_id} is now {step.status.value}.\n\n{plan.render()}"


def delete(book: PlanBook, plan_id: str | None) -> str:
    if not plan_id:
        raise PlanningError("`plan_id` is required for delete")
    book.get(plan_id)
    del book.plans[plan_id]
    if book.active == plan_id:
        book.active = None
    return f"Deleted plan {plan_id}."


def run_command(book: PlanBook, arguments: dict[str, Any]) -> str:
    """The planning tool: apply one command to `book`; returns the observation.

    Raises PlanningError, whose message is meant for the model.
    """
    command = arguments.get("command")
    plan_id = _plan_id(arguments.get("plan_id"))
    if command == "create":
        return create(book, plan_id, arguments.get("title"), arguments.get("steps"))
    if command == "update":
        return update(book, plan_id, arguments.get("title"), arguments.get("steps"))
    if command == "list":
        return list_plans(book)
    if command == "get":
        return book.get(plan_id).render()
    if command == "set_active":
        return set_active(book, plan_id)
    if command == "mark_step":
        return mark_step(
            book, plan_id, arguments.get("step_index"), arguments.get("step_status"), arguments.get("step_notes")
        )
    if command == "delete":
        return delete(book, plan_id)
    raise PlanningError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")


_TAG = re.compile(r"\[([A-Za-z0-9_\-]+)\]")


def executor_for(step_text: str, agent_keys: list[str], primary: str) -> str:
    """The agent named by the first `[tag]` in the step (case-insensitive), else the primary."""
    keys = {k.lower(): k for k in agent_keys}
    for tag in _TAG.findall(step_text):
        if tag.lower() in keys:
            return keys[tag.lower()]
    return primary


# --- PlanningFlow helpers --------------------------------------------------------

DEFAULT_STEPS = (
    "Analyse the task and what it needs",
    "Carry out the task",
    "Check the result and report it",
)
"""The plan used when the planner gives no usable one (OpenManus: analyse,
execute, verify)."""


def _planning_arguments(tool_calls: list[tuple[str, str]]) -> tuple[dict[str, Any] | None, str]:
    """The arguments of the first `planning` call, or None and why not."""
    for name, raw in tool_calls:
        if name != "planning":
            continue
        arguments, problem = read_arguments(raw)
        if arguments is None:
            return None, f"the planning call's arguments are {problem}"
        return arguments, ""
    return None, "the planner did not call the planning tool"


def title_from_task(task: str) -> str:
    """A plan's title when the planner gave none: the task's first line."""
    lines = task.strip().splitlines()
    return lines[0][:80] if lines else "Plan"


def plan_from_reply(plan_id: str, task: str, tool_calls: list[tuple[str, str]]) -> tuple[Plan | None, str]:
    """The plan a planner's reply creates, as (plan, "") or (None, why not).

    `tool_calls` are (name, raw JSON arguments). The plan id is ours, whatever
    the model chose, so the flow always knows where its plan is.
    """
    arguments, problem = _planning_arguments(tool_calls)
    if arguments is None:
        return None, problem
    book = PlanBook()
    title = arguments.get("title") or title_from_task(task)
    try:
        create(book, plan_id, title, arguments.get("steps"))
    except PlanningError as e:
        return None, str(e)
    return book.plans[plan_id], ""


def default_plan(plan_id: str, task: str, why: str) -> Plan:
    return Plan(
        plan_id=plan_id,
        title=title_from_task(task),
        steps=[PlanStep(text=t) for t in DEFAULT_STEPS],
        notes=f"Default plan: {why}.",
    )


def revised_steps(plan: Plan, blocked_index: int, tool_calls: list[tuple[str, str]]) -> tuple[list[PlanStep] | None, str]:
    """New steps after `blocked_index` from a replanner's reply, or (None, why not).

    The model may send the whole list or only the remaining steps: entries that
    repeat a step up to and including the blocked one are dropped, and the steps
    already done are never changed.
    """
    arguments, problem = _planning_arguments(tool_calls)
    if arguments is None:
        return None, problem
    try:
        texts = _steps_argument(arguments.get("steps"))
    except PlanningError as e:
        return None, str(e)
    done = {s.text for s in plan.steps[: blocked_index + 1]}
    remaining = [PlanStep(text=t) for t in texts if t not in done]
    if not remaining:
        return None, "the revised plan has no steps left to run"
    if blocked_index + 1 + len(remaining) > MAX_PLAN_STEPS:
        return None, f"the revised plan would have more than {MAX_PLAN_STEPS} steps"
    return remaining, ""
