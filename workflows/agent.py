"""AgentWorkflow: the think/act loop of one agent, durable step by step.

Layers, top to bottom: this file (the loop, how it ends, continue-as-new) ->
workflows/agent_step.py (one step: think, then act) -> workflows/agent_tools.py
(one tool call, and the hooks of stateful tools); queries and the answer
update are in workflows/agent_handlers.py. Everything with I/O is an
activity. The run's mutable state is one object (agent_model/run_state.py
RunState): queries read it, continue-as-new carries it whole, replay rebuilds
it after a crash.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from agent_model.activity_specs import (
        PREPARE_WORKSPACE,
        PREPARE_WORKSPACE_CONFIG,
        PREPARE_WORKSPACE_CONFIG_BEFORE_WAITING,
        PREPARE_WORKSPACE_LOCALLY,
        WORKSPACE_CANCEL_PATCH,
        WORKSPACE_IN_FIRST_TASK_PATCH,
    )
    from agent_model.budget import Budget, budget_text, ceiling_note, ceiling_reached, money, run_cost
    from agent_model.budget_raise import raise_note
    from agent_model.continuation import carried_state, continued_input, limits_of_older_inputs, should_continue_as_new
    from agent_model.memory import Memory
    from agent_model.messages import user_message
    from agent_model.payload import DETAILS_LIMIT, clip
    from agent_model.profiles import UnknownAgent
    from agent_model.prompting import fill
    from agent_model.run import NOTE_LIMIT, AgentRunInput, AgentRunResult, fit_result, resolved_profile
    from agent_model.run_state import RunState
    from agent_model.session import first_session
    from agent_model.state import AgentState, StopReason
    from agent_model.think_context import ContextSync
    from agent_model.tool_spec import scheduled
    from agent_model.trace_attributes import run_attributes, run_end_attributes, run_span_name
    from agent_model.workspace_names import workspace_name_for
    from prompts import agent_notes
    from workflows import search_attributes
    from workflows.agent_fork import origin_line, restore_due, restore_fork_directory
    from workflows.agent_handlers import AgentHandlers
    from workflows.agent_session import SessionHandlers, Turns
    from workflows.agent_step import Stepper
    from workflows.agent_tools import RunTools
    from workflows.budget_ask import ask_to_raise
    from workflows.run_ending import Cancelled, RunEnded, cancel_requested, is_cancellation, root_message
    from workflows.run_failure import TASK_NOT_DONE_PATCH, not_done_failure
    from workflows.tracing import workflow_span

__all__ = ["AgentWorkflow", "is_cancellation", "root_message"]

Ending = tuple[AgentState, StopReason, str | None]
TASK_SHOWN = 200
"""Characters of the task a continued execution's details show."""


def last_assistant_text(memory: Memory) -> str | None:
    for message in reversed(memory.messages):
        if message.role.value == "assistant" and message.content:
            return message.content
    return None


@workflow.defn
class AgentWorkflow(AgentHandlers, SessionHandlers):
    @workflow.init
    def __init__(self, run: AgentRunInput) -> None:
        info = workflow.info()
        self.input = run
        self.workspace = run.workspace or workspace_name_for(info.workflow_id)
        self.limits = run.continuation or limits_of_older_inputs()
        """Continue-as-new thresholds: the run's own, or (older inputs) this code's."""
        self.state = run.carried or RunState(context=ContextSync(key=f"{info.workflow_id}/{info.run_id}"))
        self.tools = RunTools(self.state, self.workspace, self._publish_details, run.approval)
        self.stepper = Stepper(self.state, self.tools, self._publish_details, budget=run.budget)
        if run.session is not None and self.state.session is None:
            self.state.session = first_session(run.task)
        elif run.session is None and self.state.session is not None:
            self.state.session = None  # e.g. a fork of a session: a run of its own, no session
        self.turns = Turns(self.state, run.session, self._publish_details)
        self.stop_reason: StopReason | None = None
        """How this execution ended, once it has (for its span)."""

    @workflow.run
    async def run(self, run: AgentRunInput) -> AgentRunResult:
        fails_when_not_done = workflow.patched(TASK_NOT_DONE_PATCH)
        self.waits_for_workspace = workflow.patched(WORKSPACE_CANCEL_PATCH)
        self.prepares_in_first_task = workflow.patched(WORKSPACE_IN_FIRST_TASK_PATCH)
        # A continued execution's profile is in the state it carries.
        profile = self.state.profile or run.profile
        agent = profile.name if profile is not None else run.agent
        info = workflow.info()
        with workflow_span(
            run_span_name(agent), "run", run_attributes(agent, info.workflow_id), expected=(CancelledError,)
        ) as span:
            try:
                result = await self._run(run, fails_when_not_done)
            finally:
                state, reason = self.state, self.stop_reason.value if self.stop_reason else ""
                span.set(run_end_attributes(state.agent_state.value, reason, state.step, state.usage))
            return result

    async def _run(self, run: AgentRunInput, fails_when_not_done: bool) -> AgentRunResult:
        state = self.state
        state.agent_state = AgentState.RUNNING
        ending = await self._ending_of(self._turn(run))
        # A session (agent_model/session.py) waits for a message after each turn.
        while self.turns.goes_on(ending, self._turn_answer):
            ending = await self._ending_of(self._turn(run))
        if state.profile is not None:
            await self.tools.at_run_end()
        if cancel_requested():
            # Whatever else ended the loop, the run was asked to stop. The state
            # stays readable by queries, which replay the closed run.
            self._finish(AgentState.CANCELLED, StopReason.CANCELLED, agent_notes.CANCELLED_NOTE)
            raise CancelledError(agent_notes.CANCELLED_NOTE)
        result = self._finish(*ending)
        # Only the run's last ending counts: a session's turn that failed was followed by more.
        if fails_when_not_done and (failure := not_done_failure(result)) is not None:
            raise failure
        return result

    async def _turn(self, run: AgentRunInput) -> None:
        """Steps until the run would end (raised as RunEnded); a session's
        later turns first wait for their message."""
        state = self.state
        if state.profile is None:
            await self._begin(run)
        elif restore_due(run, state):
            await restore_fork_directory(run, state, self.workspace)
        if self.turns.between_turns():
            await self.turns.next_message()
        profile = self.tools.profile
        self._publish_details()
        earlier_turns = self.turns.steps_before_turn()
        while state.step - earlier_turns < profile.max_steps:
            if cancel_requested():
                raise Cancelled()
            await self._stop_if_budget_spent()
            if self._time_to_continue_as_new(run):
                await self._continue_as_new(run)
            state.step += 1
            await self.stepper.step()
        raise RunEnded(StopReason.MAX_STEPS, fill(agent_notes.MAX_STEPS_NOTE, max_steps=profile.max_steps))

    async def _ending_of(self, turn: Awaitable[None]) -> Ending:
        """How a turn ended: every way out of the loop, as (state, reason, note)."""
        try:
            await turn
            raise AssertionError("a turn ends by raising")
        except RunEnded as end:
            return (end.state, end.reason, end.note)
        except UnknownAgent as e:
            return (AgentState.ERROR, StopReason.ERROR, str(e))
        except (Cancelled, asyncio.CancelledError):
            return (AgentState.CANCELLED, StopReason.CANCELLED, agent_notes.CANCELLED_NOTE)
        except ActivityError as e:
            if is_cancellation(e):
                return (AgentState.CANCELLED, StopReason.CANCELLED, agent_notes.CANCELLED_NOTE)
            return (AgentState.ERROR, StopReason.ERROR, root_message(e))

    def _turn_answer(self) -> str | None:
        return self.state.final_answer or last_assistant_text(self.state.memory)

    async def _begin(self, run: AgentRunInput) -> None:
        """A new run: its profile as the starter resolved it (older inputs name a
        built-in one), its directory, and the task as the first message."""
        state = self.state
        state.profile = resolved_profile(run)
        state.memory = Memory.for_profile(state.profile)
        summary = f"prepare workspace {self.workspace}"
        if self.prepares_in_first_task:
            call = workflow.LocalActivityConfig(**PREPARE_WORKSPACE_LOCALLY, summary=summary)
            state.directory = await workflow.execute_local_activity(
                PREPARE_WORKSPACE, self.workspace, result_type=str, **call
            )
        else:
            state.directory = await workflow.execute_activity(
                PREPARE_WORKSPACE,
                self.workspace,
                result_type=str,
                **scheduled(
                    PREPARE_WORKSPACE_CONFIG if self.waits_for_workspace else PREPARE_WORKSPACE_CONFIG_BEFORE_WAITING,
                    summary,
                ),
            )
        state.memory.add(user_message(run.task))

    def _cost(self) -> float | None:
        """USD spent so far, at the run's prices (None: it has none)."""
        profile = self.state.profile
        return run_cost(self.input.budget, profile.llm, self.state.usage) if profile else None

    async def _stop_if_budget_spent(self) -> None:
        """A think that would start with the budget spent does not start: the
        run ends with what it has, its last assistant text as the answer; or,
        when the budget says so, the user is asked for a higher ceiling first."""
        state, cost = self.state, self._cost()
        budget = state.budget or self.input.budget
        ceiling = ceiling_reached(budget, state.usage, cost)
        if ceiling is None:
            return
        assert budget is not None and state.profile is not None
        note = ceiling_note(ceiling, f"step {state.step}", state.usage, cost)
        if budget.ask_at_ceiling:
            asked = await ask_to_raise(state, budget, cost, state.profile.human_timeout_seconds, self._publish_details)
            if isinstance(asked, Budget):
                state.budget = asked
                self._publish_details(f"{note}; {raise_note(budget, asked)}")
                return
            note = f"{note}; {asked}"
        state.final_answer = state.final_answer or last_assistant_text(state.memory)
        raise RunEnded(StopReason.BUDGET, note)

    def _time_to_continue_as_new(self, run: AgentRunInput) -> bool:
        info = workflow.info()
        return should_continue_as_new(
            suggested=info.is_continue_as_new_suggested(),
            history_events=info.get_current_history_length(),
            history_bytes=info.get_current_history_size(),
            steps_this_run=self.state.step - self.state.steps_before,
            steps_per_run=run.steps_per_run,
            limits=self.limits,
        )

    async def _continue_as_new(self, run: AgentRunInput) -> None:
        """Go on in a new execution with this one's whole state (raises ContinueAsNewError)."""
        # An answer being handled must finish here, not be lost with this execution.
        await workflow.wait_condition(workflow.all_handlers_finished)
        carried = carried_state(self.state, workflow.info().run_id, self.limits)
        workflow.continue_as_new(
            continued_input(run, carried, self.workspace, self.limits),
            # With worker versioning, a pinned run moves to the current version
            # here: the new execution starts from the carried state, with no
            # history for the new code to replay (docs/deploying.md).
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    def _finish(self, agent_state: AgentState, reason: StopReason, note: str | None) -> AgentRunResult:
        state = self.state
        state.agent_state = agent_state
        self.stop_reason = reason
        note = clip(note, NOTE_LIMIT) if note else note
        state.note = note
        if state.final_answer is None and reason.succeeded:
            state.final_answer = last_assistant_text(state.memory)
        if note and state.records:
            state.records[-1].note = note
        self._publish_details(note)
        return fit_result(
            AgentRunResult(
                agent=state.profile.name if state.profile else self.input.agent,
                state=agent_state,
                stop_reason=reason,
                final_answer=state.final_answer,
                note=note,
                steps_taken=state.step,
                steps=state.records,
                usage=state.usage,
                cost=self._cost(),
                directory=state.directory or None,
                raised_budget=state.budget,
                turns=state.session.turns if state.session else [],
            )
        )

    def _publish_details(self, note: str | None = None) -> None:
        """Current details (markdown, shown in the Web UI) and search attributes."""
        state, profile = self.state, self.state.profile
        usage, cost = state.usage, self._cost()
        lines = [
            f"**agent** {profile.name if profile else self.input.agent}",
            f"**state** {state.agent_state.value}",
            f"**step** {state.step}/{profile.max_steps if profile else '?'}",
            f"**tokens** {usage.total_tokens} ({usage.prompt_tokens} prompt, {usage.completion_tokens} completion)"
            + ("" if cost is None else f" · **cost** {money(cost)}"),
        ]
        if (origin := origin_line(self.input)) is not None:
            lines.append(origin)
        budget = budget_text(state.budget or self.input.budget, usage, cost)
        if budget is not None:
            lines.append(f"**budget** {budget} spent")
        last = state.records[-1].tool_calls[-1] if state.records and state.records[-1].tool_calls else None
        if last is not None:
            outcome = " ".join(last.observation.split())[:120]
            lines.append(f"**last tool** `{last.name}` {'failed' if last.error else 'ok'}: {outcome}")
        if state.steps_before:
            # Temporal gives a continued execution no Summary (continue-as-new
            # carries none in SDK 1.35 / server 1.32), so its details name the task.
            lines.insert(0, f"**task** {clip(' '.join(self.input.task.split()), TASK_SHOWN)}")
            lines.append(
                f"**continued** after step {state.steps_before}, in execution {len(state.earlier_runs) + 1} of this run"
            )
        lines.extend(self.turns.details())
        if state.desk.pending is not None:
            lines.append(f"**waiting for the user** (question {state.desk.pending.id}): {state.desk.pending.text}")
        gated = state.approvals.pending
        if gated is not None:
            lines.append(
                f"**waiting for approval** (call {gated.id}, {gated.reason}): `{gated.tool}` "
                f"{clip(gated.arguments, 300)}  \nsend the update `decide` with "
                f'{{"call_id": "{gated.id}", "action": "approve"}} (or "reject" with "reason", '
                f'or "edit" with "arguments")'
            )
        if note:
            lines.append(f"**note** {note}")
        workflow.set_current_details(clip("  \n".join(lines), DETAILS_LIMIT))
        search_attributes.upsert(state.agent_state.value, state.step, search_attributes.AGENT_STEP_INTERVAL)
