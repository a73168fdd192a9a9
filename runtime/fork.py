"""`fork`: a new run from the state an agent run had at the end of step N.

The state is Temporal's own: the origin execution's history is replayed here
(temporalio's Replayer, this code's AgentWorkflow) and the run's RunState is
copied at the last moment it is the state after step N, i.e. when the
workflow, between steps, asks for its info (AgentWorkflow._time_to_continue_as_new
does so at every step boundary; a run that ended at step N is copied as it
ended). The fork's input carries that state, as a continued execution's
does, with the origin named (agent_model/fork.py ForkOrigin), so the fork's
first execution restores its own directory from the origin's snapshots
before it goes on. The origin is only read: a running origin can be forked.
"""

from __future__ import annotations

import uuid
from datetime import timezone
from typing import Any, TextIO

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.worker import (
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from agent_model.budget import Budget
from agent_model.continuation import INPUT_LIMIT, carried_plans, compact_records, current_limits
from agent_model.fork import ForkOrigin, fork_line, forked_state
from agent_model.payload import clip, json_size
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.run_state import RunState
from agent_model.workspace_names import workspace_name_for
from config.settings import Settings
from runtime import run_control
from runtime.run_start import check_llm_choice, summary_of
from runtime.terminal_text import inert
from runtime.user_errors import RunControlError, UsageError
from workflows import search_attributes
from workflows.agent import AgentWorkflow


class StepCapture:
    """The state of the replayed run after one step, and how far the run got."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.state: RunState | None = None
        self.reached = -1
        """The last step the replayed run ended (-1: none began)."""

    def look(self, instance: Any) -> None:
        state = getattr(instance, "state", None)
        if not isinstance(state, RunState) or state.profile is None:
            return  # the run has not begun
        ended = state.step if state.step == 0 or (state.records and state.records[-1].step == state.step) else state.step - 1
        self.reached = max(self.reached, ended)
        if state.step == self.step and ended == self.step:
            self.state = state.model_copy(deep=True)


class _Capturing(Interceptor):
    def __init__(self, capture: StepCapture) -> None:
        self.capture = capture

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        capture = self.capture

        class Outbound(WorkflowOutboundInterceptor):
            def info(self) -> workflow.Info:
                capture.look(workflow.instance())
                return super().info()

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


async def state_at(client: Client, history: WorkflowHistory, step: int) -> StepCapture:
    """Replay an execution of an agent run, capturing its state after `step`."""
    capture = StepCapture(step)
    replayer = Replayer(
        workflows=[AgentWorkflow],
        interceptors=[_Capturing(capture)],
        data_converter=client.data_converter,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is not None and capture.state is None:
        raise RunControlError(
            f"cannot replay run {history.workflow_id} with this code to read its state at step {step}: "
            f"{run_control.one_line(result.replay_failure)}"
        )
    return capture


def execution_is_first(history: WorkflowHistory) -> bool:
    return not history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id


def first_started_at(history: WorkflowHistory) -> float:
    """When the (first) execution began, POSIX seconds."""
    return history.events[0].event_time.ToDatetime(tzinfo=timezone.utc).timestamp()


async def execution_with_step(client: Client, run_id: str, newest: str, step: int) -> tuple[str, WorkflowHistory]:
    """The execution of the run (a chain, after continue-as-new) in which step `step` ended, and its history."""
    execution = newest
    while True:
        history = await client.get_workflow_handle(run_id, run_id=execution).fetch_history()
        steps_before, continued_from = await run_control.execution_start(client, history)
        if step >= steps_before or not continued_from:
            return execution, history
        execution = continued_from


def fork_llm_budget(settings: Settings, budget: Budget | None, llm: str | None) -> Budget | None:
    """The origin's budget, with the prices of the fork's --llm added."""
    if budget is None or llm is None or llm in budget.prices:
        return budget
    profile = settings.llm.get(llm)
    if profile is not None and profile.prices is not None:
        return budget.model_copy(update={"prices": {**budget.prices, llm: profile.prices}})
    if budget.max_cost is not None:
        raise UsageError(f"--llm {llm}: the origin has a cost budget, and [llm.{llm}] has no prices")
    return budget


async def fork_input(
    client: Client,
    settings: Settings,
    origin_id: str,
    step: int,
    fork_id: str,
    *,
    task: str | None = None,
    message: str | None = None,
    llm: str | None = None,
) -> AgentRunInput:
    """The input of a fork of `origin_id` at the end of `step` (RunControlError: no such run or step)."""
    check_llm_choice(settings, llm)
    description = await run_control.describe(client, origin_id)
    if run_control.is_flow(description):
        raise RunControlError(
            f"run {origin_id} is a planning flow; fork one of its steps instead (show {origin_id} lists their run ids)"
        )
    if description.workflow_type != AgentWorkflow.__name__:
        raise RunControlError(f"run {origin_id} is not an agent run ({description.workflow_type})")
    execution, history = await execution_with_step(client, origin_id, description.run_id, step)
    capture = await state_at(client, history, step)
    if capture.state is None:
        reached = max(capture.reached, 0)
        raise RunControlError(
            f"run {origin_id} has ended {reached} step(s) so far; --from-step must be from 0 to {reached}"
        )
    origin = await run_control.started_run_input(client, history)
    limits = origin.continuation or current_limits()
    state = forked_state(capture.state, fork_id, task=task, message=message, llm=llm)
    state.budget = fork_llm_budget(settings, state.budget, llm)  # a ceiling the user raised in the origin
    state.records = compact_records(state.records, limits)
    state.plans = carried_plans(state.plans, limits)
    shown = task if task is not None else state.memory.request.content if state.memory.request else origin.task
    fork = AgentRunInput(
        task=clip(shown or "", limits.task_shown),
        agent=state.profile.name if state.profile else origin.agent,
        steps_per_run=origin.steps_per_run,
        continuation=limits,
        approval=origin.approval,
        budget=fork_llm_budget(settings, origin.budget, llm),
        carried=state,
        workspace=workspace_name_for(fork_id),
        forked_from=ForkOrigin(
            run_id=origin_id, execution=execution, step=step,
            workspace=origin.workspace or workspace_name_for(origin_id),
            directory=capture.state.directory,
            started_at=first_started_at(history) if execution_is_first(history) else None,
        ),
    )
    if json_size(fork) > INPUT_LIMIT:
        fork.carried = state.model_copy(update={"records": []})
    return fork


async def start_fork(
    client: Client,
    settings: Settings,
    origin_id: str,
    step: int,
    *,
    task: str | None = None,
    message: str | None = None,
    llm: str | None = None,
    run_id: str | None = None,
) -> WorkflowHandle:
    fork_id = run_id or f"fork-{uuid.uuid4().hex[:12]}"
    run = await fork_input(client, settings, origin_id, step, fork_id, task=task, message=message, llm=llm)
    registered = await run_control.search_attributes_registered(client)
    assert run.forked_from is not None
    started = await client.start_workflow(
        AgentWorkflow.run,
        run,
        id=fork_id,
        task_queue=settings.task_queue,
        task_timeout=run.continuation.workflow_task_timeout() if run.continuation else None,
        static_summary=summary_of(f"{fork_line(run.forked_from)}: {run.task}"),
        search_attributes=search_attributes.initial(run.agent) if registered else None,
    )
    return client.get_workflow_handle(
        started.id, first_execution_run_id=started.first_execution_run_id, result_type=AgentRunResult
    )


async def origin_of(client: Client, run_id: str) -> ForkOrigin | None:
    """Where the agent run came from, if it is a fork (read from its current execution's input)."""
    async for event in client.get_workflow_handle(run_id).fetch_history_events(page_size=1):
        if not event.HasField("workflow_execution_started_event_attributes"):
            return None
        run = await run_control.run_input_of(client.data_converter, event.workflow_execution_started_event_attributes)
        return run.forked_from
    return None


async def show_origin(client: Client, run_id: str, out: TextIO) -> None:
    """`show`'s first line for a fork."""
    description = await run_control.describe(client, run_id)
    if description.workflow_type != AgentWorkflow.__name__:
        return
    origin = await origin_of(client, run_id)
    if origin is not None:
        print(inert(f"{fork_line(origin)} (execution {origin.execution})"), file=out)
