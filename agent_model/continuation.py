"""Continuing a long run in a fresh history (Temporal's continue-as-new).

Every step adds events to a run's history, and the server ends a run whose
history passes its limits (50 MiB or 51,200 events by default). At a step
boundary, when the server suggests it or a run has taken its configured share
of steps or history, the run goes on as a new execution of the same workflow
id: the run's whole state (agent_model/run_state.py RunState) travels in the new
execution's input, so the agent goes on exactly where it was.

Step records are the one part that grows with every step; the carried ones are
the newest that fit in RECORDS_LIMIT, texts cut. All records stay complete in
the histories of the executions that made them.

The values below are those of new runs: the starter puts them in the run's
input (current_limits), and a run decides with the ones it started with.
"""

from __future__ import annotations

from agent_model.continuation_limits import ContinuationLimits
from agent_model.payload import clip, fit, json_size
from agent_model.plan import PlanBook
from agent_model.records import StepRecord
from agent_model.run import AgentRunInput, fit_records
from agent_model.run_state import RunState

HISTORY_EVENTS_PER_RUN = 2_000
"""Events after which a run continues as new even if the server has not
suggested it (~160 steps). A worker that takes a run over (its worker died or
was cut off) replays the execution in one workflow task, at ~1 ms an event on
2 loaded cores (bench P16); that task must end within the workflow task
timeout (10 s), or it is given to another worker that replays again, forever. 2,000 events
replay in ~2 s; 10,000, the value before, took as long as the server's 10 s."""
WORKFLOW_TASK_SECONDS: float | None = None
"""The workflow task timeout of new runs (None: the server's 10 s). 5 s would
retry sooner a task handed to a worker whose link went dark in that instant
(issue 25, between steps), but 200 runs started at once on one 2-core worker
(P3) then had workflow tasks time out and their eagerly started thinks
cancelled: a loaded worker's first task, which makes the run's directory,
can take longer. The run's input carries the value, so it can be set later."""
LIMITS_BEFORE_INPUTS_CARRIED_THEM_EVENTS = 10_000
"""The events threshold of runs whose input carries no limits (started before
inputs did): what the code said then, so that their replays decide alike."""
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


def current_limits() -> ContinuationLimits:
    """This code's thresholds, for a run that starts now (or one whose input has none)."""
    return ContinuationLimits(
        history_events=HISTORY_EVENTS_PER_RUN,
        history_bytes=HISTORY_BYTES_PER_RUN,
        records_bytes=RECORDS_LIMIT,
        records_text=RECORDS_TEXT_BUDGET,
        plans_bytes=PLANS_LIMIT,
        task_shown=TASK_SHOWN,
        earlier_runs_kept=EARLIER_RUNS_KEPT,
        workflow_task_seconds=WORKFLOW_TASK_SECONDS,
    )


def limits_of_older_inputs() -> ContinuationLimits:
    """The thresholds of a run whose input carries none."""
    return current_limits().model_copy(
        update={"history_events": LIMITS_BEFORE_INPUTS_CARRIED_THEM_EVENTS, "workflow_task_seconds": None}
    )


def compact_records(records: list[StepRecord], limits: ContinuationLimits) -> list[StepRecord]:
    """The newest records whose texts, cut to the text budget, fit in the records' bytes."""
    kept = fit_records(records, limits.records_text)
    while len(kept) > 1 and json_size(kept) > limits.records_bytes:
        kept = kept[len(kept) // 2 :]
    return kept


def carried_plans(plans: PlanBook, limits: ContinuationLimits) -> PlanBook:
    return fit(plans, limits.plans_bytes)


def carried_run_ids(earlier: list[str], this_run: str, limits: ContinuationLimits) -> list[str]:
    return [*earlier, this_run][-limits.earlier_runs_kept :]


def should_continue_as_new(
    suggested: bool,
    history_events: int,
    history_bytes: int,
    steps_this_run: int,
    steps_per_run: int | None,
    limits: ContinuationLimits,
) -> bool:
    """Whether a run, between two steps, goes on in a new execution."""
    if steps_this_run == 0:
        return False  # never twice in a row without progress
    return (
        suggested
        or history_events >= limits.history_events
        or history_bytes >= limits.history_bytes
        or (steps_per_run is not None and steps_this_run >= steps_per_run)
    )


def carried_state(state: RunState, this_run: str, limits: ContinuationLimits) -> RunState:
    """The state the next execution starts from: all of it, with the parts
    that grow with every step compacted."""
    return state.model_copy(
        update={
            "steps_before": state.step,
            "records": compact_records(state.records, limits),
            "plans": carried_plans(state.plans, limits),
            "earlier_runs": carried_run_ids(state.earlier_runs, this_run, limits),
        }
    )


def continued_input(
    run: AgentRunInput, carried: RunState, workspace: str, limits: ContinuationLimits
) -> AgentRunInput:
    """The input of the next execution, with the run's thresholds; step
    records are dropped if, beyond all the budgets above, it would still be
    too large."""
    continued = run.model_copy(
        update={
            "task": clip(run.task, limits.task_shown),
            "carried": carried,
            "workspace": workspace,
            "profile": None,
            "continuation": limits,
        }
    )
    if json_size(continued) > INPUT_LIMIT:
        continued.carried = carried.model_copy(update={"records": []})
    return continued
