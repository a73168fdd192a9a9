"""Plans and the planning tool's commands, as pure functions over workflow state."""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Collection

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
    depends_on: list[int] | None = None
    """1-based numbers of the earlier steps this one needs, as the planner
    declared them; None (not declared): the step before it, so a plan without
    dependencies runs in order."""

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
            needs = "" if step.depends_on is None else f" (needs: {', '.join(map(str, step.depends_on)) or 'nothing'})"
            lines.append(f"{i}. {step.status.marker} {step.text}{needs}")
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


def create(book: PlanBook, plan_id: str | None, title: str | None, steps: Any, depends_on: Any = None) -> str:
    if not plan_id:
        raise PlanningError("`plan_id` is required for create")
    if plan_id in book.plans:
        raise PlanningError(f"a plan with ID {plan_id!r} already exists; use update")
    if len(book.plans) >= MAX_PLANS:
        raise PlanningError(f"there are already {MAX_PLANS} plans; delete one first")
    if not title or not str(title).strip():
        raise PlanningError("`title` is required for create")
    texts = _steps_argument(steps)
    needs, notes = dependencies_argument(depends_on, len(texts))
    plan = Plan(
        plan_id=plan_id,
        title=_title(title),
        steps=[PlanStep(text=t, depends_on=n) for t, n in zip(texts, needs)],
        notes=clip(" ".join(notes), NOTES_LIMIT),
    )
    book.plans[plan_id] = plan
    book.active = plan_id
    return f"Created plan {plan_id} (now active).\n\n{plan.render()}"


def update(book: PlanBook, plan_id: str | None, title: str | None, steps: Any, depends_on: Any = None) -> str:
    plan = book.get(plan_id)
    if title:
        plan.title = _title(title)
    if steps is not None:
        old = plan.steps
        texts = _steps_argument(steps)
        needs, notes = dependencies_argument(depends_on, len(texts))
        new_steps = []
        for i, (text, need) in enumerate(zip(texts, needs)):
            if i < len(old) and old[i].text == text:
                new_steps.append(old[i].model_copy(update={"depends_on": need}))  # keeps its status and notes
            else:
                new_steps.append(PlanStep(text=text, depends_on=need))
        plan.steps = new_steps
        if notes:
            plan.notes = clip(" ".join(notes), NOTES_LIMIT)
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
        return create(book, plan_id, arguments.get("title"), arguments.get("steps"), arguments.get("depends_on"))
    if command == "update":
        return update(book, plan_id, arguments.get("title"), arguments.get("steps"), arguments.get("depends_on"))
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
        create(book, plan_id, title, arguments.get("steps"), arguments.get("depends_on"))
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


def revised_steps(
    plan: Plan, blocked_index: int, tool_calls: list[tuple[str, str]], *, keep: int | None = None
) -> tuple[list[PlanStep] | None, str]:
    """New steps after the first `keep` (default: up to and including
    `blocked_index`) from a replanner's reply, or (None, why not).

    The model may send the whole list or only the remaining steps: entries that
    repeat a kept step are dropped, and the kept steps are never changed. The
    numbers in its `depends_on` count the entries it sent; they are turned into
    the plan's own step numbers.
    """
    arguments, problem = _planning_arguments(tool_calls)
    if arguments is None:
        return None, problem
    try:
        texts = _steps_argument(arguments.get("steps"))
    except PlanningError as e:
        return None, str(e)
    keep = blocked_index + 1 if keep is None else keep
    kept_numbers = {s.text: n for n, s in enumerate(plan.steps[:keep], start=1)}
    needs, _ = dependencies_argument(arguments.get("depends_on"), len(texts))
    number_of: dict[int, int] = {}
    remaining: list[PlanStep] = []
    for sent, (text, need) in enumerate(zip(texts, needs), start=1):
        if text in kept_numbers:
            number_of[sent] = kept_numbers[text]
            continue
        number_of[sent] = keep + len(remaining) + 1
        mapped = None if need is None else sorted({number_of[n] for n in need if n in number_of})
        remaining.append(PlanStep(text=text, depends_on=mapped))
    if not remaining:
        return None, "the revised plan has no steps left to run"
    if keep + len(remaining) > MAX_PLAN_STEPS:
        return None, f"the revised plan would have more than {MAX_PLAN_STEPS} steps"
    return remaining, ""


# --- dependencies between steps (PlanningFlow's parallel steps) -----------------------


def dependencies_argument(value: Any, step_count: int) -> tuple[list[list[int] | None], list[str]]:
    """Each step's declared dependencies from the planning tool's `depends_on`
    (one list of 1-based step numbers per step), and notes on what was dropped.

    Missing (or a null entry): not declared, the step needs the one before it.
    Only earlier steps can be needed, so the plan never has a cycle: a step's
    own number, later ones and unknown ones are dropped with a note.
    """
    if value is None:
        return [None] * step_count, []
    if not isinstance(value, list):
        return [None] * step_count, ["`depends_on` is not a list of lists of step numbers: ignored."]
    notes: list[str] = []
    if len(value) > step_count:
        notes.append(f"`depends_on` has {len(value)} entries for {step_count} steps: the extra ones were dropped.")
    needs: list[list[int] | None] = []
    for number in range(1, step_count + 1):
        entry = value[number - 1] if number <= len(value) else None
        if entry is None:
            needs.append(None)
            continue
        if not isinstance(entry, list):
            notes.append(f"step {number}'s `depends_on` is not a list: it needs the step before it.")
            needs.append(None)
            continue
        valid = sorted({n for n in entry[:MAX_PLAN_STEPS] if type(n) is int and 1 <= n < number})
        dropped = [repr(n) for n in entry[:MAX_PLAN_STEPS] if not (type(n) is int and 1 <= n < number)]
        if dropped or len(entry) > MAX_PLAN_STEPS:
            notes.append(f"step {number} can only need earlier steps: dropped {', '.join(dropped[:5]) or 'extra entries'}.")
        needs.append(valid)
    return needs, notes


def step_needs(plan: Plan, index: int) -> list[int]:
    """0-based indices of the steps step `index` (0-based) waits for."""
    declared = plan.steps[index].depends_on
    if declared is None:
        return [index - 1] if index > 0 else []
    return [n - 1 for n in declared if 0 < n <= index]


def ready_steps(plan: Plan, running: Collection[int]) -> list[int]:
    """Steps (0-based) that can start now: not started, not running, and every
    step they need has finished (a blocked one is replanned before anything
    else starts, so finished is enough)."""
    return [
        i
        for i, step in enumerate(plan.steps)
        if step.status == StepStatus.NOT_STARTED
        and i not in running
        and all(plan.steps[n].finished for n in step_needs(plan, i))
    ]


def needs_a_blocked_step(plan: Plan, index: int) -> int | None:
    """The blocked step (0-based) step `index` needs, directly or through the
    steps it needs, or None."""
    seen: set[int] = set()
    todo = step_needs(plan, index)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if plan.steps[n].status == StepStatus.BLOCKED:
            return n
        todo.extend(step_needs(plan, n))
    return None


def kept_before_replan(plan: Plan) -> int:
    """How many steps a replan keeps: every step up to the last one that
    finished (later ones never started, so the replan replaces them)."""
    return 1 + max((i for i, s in enumerate(plan.steps) if s.finished), default=-1)
