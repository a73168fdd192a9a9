"""Continuing a long run in a fresh history (Temporal's continue-as-new).

Every step adds events to a run's history, and the server ends a run whose
history passes its limits (50 MiB or 51,200 events by default). At a step
boundary, when the server suggests it or a run has taken its configured share
of steps or history, the run goes on as a new execution of the same workflow
id: the state below travels in the new execution's input, so the agent goes
on exactly where it was (agent_model/run.py CarriedState: same memory, plans,
shell directory, step count).

Step records are the one part that grows with every step; the carried ones are
the newest that fit in RECORDS_LIMIT, texts cut. All records stay complete in
the histories of the executions that made them.
"""

from __future__ import annotations

from agent_model.payload import clip, fit, json_size
from agent_model.plan import PlanBook
from agent_model.run import AgentRunInput, CarriedState, StepRecord, fit_records

HISTORY_EVENTS_PER_RUN = 10_000
"""Events after which a run continues as new even if the server has not
suggested it: a fifth of the server's default 51,200-event limit."""
HISTORY_BYTES_PER_RUN = 10 * 1024 * 1024
"""History bytes after which a run continues as new: a fifth of the default
50 MiB limit, so that one more step of maximal payloads always fits."""
RECORDS_LIMIT = 256 * 1024
"""JSON bytes of step records carried into the next execution."""
RECORDS_TEXT_BUDGET = 64_000
"""Characters of thoughts, arguments and observations in the carried records."""
PLANS_LIMIT = 128 * 1024
"""JSON bytes of the plans carried into the next execution."""
INPUT_LIMIT = 3 * 512 * 1024
"""JSON bytes of a continued execution's input: Temporal refuses 2 MiB, and a
workflow task that cannot continue as new would fail forever."""
TASK_SHOWN = 2000
"""Characters of the task repeated in a continued execution's input, for the
Web UI; the task itself travels in the memory window."""
EARLIER_RUNS_KEPT = 20
"""Run ids of earlier executions carried, newest last (for --show and --rewind)."""


def compact_records(records: list[StepRecord], limit: int = RECORDS_LIMIT) -> list[StepRecord]:
    """The newest records whose texts, cut to RECORDS_TEXT_BUDGET, fit in `limit` bytes."""
    kept = fit_records(records, RECORDS_TEXT_BUDGET)
    while len(kept) > 1 and json_size(kept) > limit:
        kept = kept[len(kept) // 2 :]
    return kept


def carried_plans(plans: PlanBook) -> PlanBook:
    return fit(plans, PLANS_LIMIT)


def should_continue_as_new(
    suggested: bool, history_events: int, history_bytes: int, steps_this_run: int, steps_per_run: int | None
) -> bool:
    """Whether a run, between two steps, goes on in a new execution."""
    if steps_this_run == 0:
        return False  # never twice in a row without progress
    return (
        suggested
        or history_events >= HISTORY_EVENTS_PER_RUN
        or history_bytes >= HISTORY_BYTES_PER_RUN
        or (steps_per_run is not None and steps_this_run >= steps_per_run)
    )


def continued_input(run: AgentRunInput, carried: CarriedState, workspace: str) -> AgentRunInput:
    """The input of the next execution; step records are dropped if, beyond
    all the budgets above, it would still be too large."""
    continued = run.model_copy(
        update={"task": clip(run.task, TASK_SHOWN), "carried": carried, "workspace": workspace, "profile": None}
    )
    if json_size(continued) > INPUT_LIMIT:
        continued.carried = carried.model_copy(update={"records": []})
    return continued
