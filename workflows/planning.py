"""PlanningFlowWorkflow: plan with the LLM, run each step as a child AgentWorkflow,
summarise. Bounded by the flow's time limit (default 3600 s), which it enforces
itself so that it always ends with a result.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from agent_model.activity_specs import THINK, THINK_CONFIG
    from agent_model.budget import add_cost, budget_text, ceiling_note, ceiling_reached, money, remaining, run_cost
    from agent_model.budget_raise import raised_by
    from agent_model.tool_spec import scheduled
    from agent_model.trace_attributes import FLOW_OUTCOME, OPERATION, flow_span_name, usage_attributes
    from agent_model.flow import (
        FINALIZE_RESERVE_SECONDS,
        FINISH_MARGIN_SECONDS,
        FlowOutcome,
        PlanningFlowInput,
        PlanningFlowResult,
        StepOutcome,
    )
    from agent_model.llm_io import ThinkRequest, ThinkResponse
    from agent_model.messages import ToolChoice, user_message
    from agent_model.payload import DETAILS_LIMIT, clip, fit
    from agent_model.plan import (
        Plan,
        PlanStep,
        StepStatus,
        default_plan,
        executor_for,
        kept_before_replan,
        needs_a_blocked_step,
        plan_from_reply,
        ready_steps,
        revised_steps,
    )
    from agent_model.profiles import UnknownAgent
    from agent_model.prompting import fill
    from agent_model.run import AgentRunInput, AgentRunResult
    from agent_model.state import AgentState
    from agent_model.workspace_names import workspace_name_for
    from tools import planning as planning_tool
    from agent_model.usage import TokenUsage
    from prompts import planning as prompts
    from workflows import search_attributes
    from workflows.agent import AgentWorkflow, is_cancellation, root_message
    from workflows.run_failure import TASK_NOT_DONE_PATCH, not_done_failure, result_in
    from workflows.tracing import workflow_span

FLOW_SPAN = flow_span_name("planning")
FLOW_ATTRIBUTES = {OPERATION: "invoke_workflow"}
NOTE_LIMIT = 500
"""Characters of a child's answer kept in its step's notes."""
ANSWER_LIMIT = 8000
"""Characters of a child's answer kept in its step's outcome (and sent to the summary)."""


class _FlowEnded(Exception):
    def __init__(self, outcome: FlowOutcome, note: str) -> None:
        self.outcome, self.note = outcome, note


class _ThinkFailed(Exception):
    """A think of the flow's own failed or had no time left; the message says why."""


@workflow.defn
class PlanningFlowWorkflow:
    @workflow.init
    def __init__(self, flow: PlanningFlowInput) -> None:
        self.input = flow
        self.plan = Plan(plan_id="plan", title="(planning)")
        self.outcomes: list[StepOutcome] = []
        self.usage = TokenUsage()
        self.cost: float | None = None
        """USD of `usage`, when the flow's prices are known."""
        self.budget = flow.budget
        """The flow's budget, raised when the user raised a step's (agent_model/budget_raise.py)."""
        self.replans = 0
        self.summary: str | None = None
        self.workspace = workspace_name_for(workflow.info().workflow_id)
        self.started = workflow.now()
        self.running: dict[int, asyncio.Task[bool]] = {}
        """Steps (0-based) whose runs are in flight, when steps run at once."""

    # ---- the flow -------------------------------------------------------------

    @workflow.run
    async def run(self, flow: PlanningFlowInput) -> PlanningFlowResult:
        fails_when_not_done = workflow.patched(TASK_NOT_DONE_PATCH)
        with workflow_span(FLOW_SPAN, "flow", FLOW_ATTRIBUTES, expected=(CancelledError,)) as span:
            result = await self._flow(flow)
            span.set({FLOW_OUTCOME: result.outcome.value, **usage_attributes(result.usage)})
            if fails_when_not_done and (failure := not_done_failure(result)) is not None:
                raise failure
            return result

    async def _flow(self, flow: PlanningFlowInput) -> PlanningFlowResult:
        try:
            flow.check_agents()
        except UnknownAgent as e:
            return self._result(FlowOutcome.ERROR, str(e))
        try:
            await self._create_plan()
            if flow.parallel_steps > 1:
                outcome, note = await self._run_steps_concurrently(flow.parallel_steps)
            else:
                outcome, note = await self._run_steps()
        except _FlowEnded as end:
            outcome, note = end.outcome, end.note
        except asyncio.CancelledError:
            return self._cancelled()
        try:
            await self._finalize()
        except asyncio.CancelledError:
            if not self._cancel_ends_flow():
                raise
            return self._cancelled()
        return self._result(outcome, note)

    def _cancel_ends_flow(self) -> bool:
        """True once the flow was asked to cancel: no child or think starts
        after that, and the flow ends CANCELED."""
        return workflow.cancellation_reason() is not None

    def _cancelled(self) -> PlanningFlowResult:
        """Publish the plan as cancelled; end CANCELED when the flow was asked
        to cancel, else (only its own activity was cancelled) with a CANCELLED
        result."""
        result = self._result(FlowOutcome.CANCELLED, "the flow was cancelled")
        if self._cancel_ends_flow():
            raise CancelledError("the flow was cancelled")
        return result

    async def _run_steps(self) -> tuple[FlowOutcome, str | None]:
        while True:
            index = next((i for i, s in enumerate(self.plan.steps) if not s.finished), None)
            if index is None:
                blocked = [str(i + 1) for i, s in enumerate(self.plan.steps) if s.status == StepStatus.BLOCKED]
                if blocked:
                    return FlowOutcome.BLOCKED, f"the plan ran to its end, but step(s) {', '.join(blocked)} stayed blocked"
                return FlowOutcome.COMPLETED, None
            if self._time_left() <= timedelta(0):
                return FlowOutcome.TIMED_OUT, f"the flow's {self.input.timeout_seconds:.0f} s ran out before step {index + 1}"
            if (spent := self._budget_spent()) is not None:
                return FlowOutcome.BUDGET, f"{spent}; step {index + 1} and after were not started"
            if not await self._run_step(index):
                reason = self.plan.steps[index].notes
                if (end := self._end_instead_of_replan(index, reason)) is not None:
                    return end
                if not await self._replan(index, reason):
                    return FlowOutcome.BLOCKED, f"step {index + 1} is blocked ({reason}) and the plan could not be revised"

    async def _run_steps_concurrently(self, limit: int) -> tuple[FlowOutcome, str | None]:
        """Up to `limit` steps at once: every step whose needs have finished
        starts, as a child run; when one ends, newly ready steps start. A
        blocked step lets the running ones finish, then the plan is revised as
        in `_run_steps`."""
        self.running = {}
        replanned: set[int] = set()
        """Blocked steps a replan has already answered."""
        try:
            while True:
                stop = self._stop_before_next_step()
                blocked = [i for i, s in enumerate(self.plan.steps) if s.status == StepStatus.BLOCKED and i not in replanned]
                if stop is None and not blocked:
                    for index in ready_steps(self.plan, self.running)[: limit - len(self.running)]:
                        self.running[index] = asyncio.create_task(self._run_step(index))
                if self.running:
                    done, _ = await workflow.wait(list(self.running.values()), return_when=asyncio.FIRST_COMPLETED)
                    for index in [i for i, task in self.running.items() if task in done]:
                        self.running.pop(index).result()  # raises when the flow's cancellation reached the step
                    self._publish()
                    continue
                if not blocked:
                    return stop or self._plan_ended()
                if (end := await self._after_blocked(blocked[0])) is not None:
                    return end
                replanned.update(i for i, s in enumerate(self.plan.steps) if s.status == StepStatus.BLOCKED)
        except asyncio.CancelledError:
            await self._cancel_running()
            raise

    async def _cancel_running(self) -> None:
        """The flow is cancelled: cancel every running step's run and wait for
        them to end, so that none outlives the flow."""
        for task in self.running.values():
            task.cancel()
        if self.running:
            await workflow.wait(list(self.running.values()))
        self.running = {}

    def _stop_before_next_step(self) -> tuple[FlowOutcome, str] | None:
        """Why no further step may start (time or budget), or None."""
        waiting = next((i for i, s in enumerate(self.plan.steps) if s.status == StepStatus.NOT_STARTED), None)
        if waiting is None:
            return None
        if self._time_left() <= timedelta(0):
            return FlowOutcome.TIMED_OUT, f"the flow's {self.input.timeout_seconds:.0f} s ran out before step {waiting + 1}"
        if (spent := self._budget_spent()) is not None:
            return FlowOutcome.BUDGET, f"{spent}; step {waiting + 1} and after were not started"
        return None

    def _plan_ended(self) -> tuple[FlowOutcome, str | None]:
        blocked = [str(i + 1) for i, s in enumerate(self.plan.steps) if s.status == StepStatus.BLOCKED]
        if blocked:
            return FlowOutcome.BLOCKED, f"the plan ran to its end, but step(s) {', '.join(blocked)} stayed blocked"
        return FlowOutcome.COMPLETED, None

    def _end_instead_of_replan(self, index: int, reason: str) -> tuple[FlowOutcome, str] | None:
        """Why blocked step `index` ends the flow rather than a replan (budget, time, replans used), or None."""
        if (spent := self._budget_spent()) is not None:
            return FlowOutcome.BUDGET, f"{spent}; step {index + 1} is blocked ({reason}) and was not replanned"
        if self._time_left() <= timedelta(0):
            return FlowOutcome.TIMED_OUT, f"the flow's {self.input.timeout_seconds:.0f} s ran out during step {index + 1}"
        if self.replans >= self.input.max_replans:
            return FlowOutcome.BLOCKED, f"step {index + 1} is blocked ({reason}) and no replans are left"
        return None

    async def _after_blocked(self, index: int) -> tuple[FlowOutcome, str] | None:
        """Step `index` blocked and nothing runs: revise the plan (None), or
        the flow's end."""
        reason = self.plan.steps[index].notes
        if (end := self._end_instead_of_replan(index, reason)) is not None:
            return end
        keep = kept_before_replan(self.plan)
        for i, step in enumerate(self.plan.steps[:keep]):
            if step.status == StepStatus.NOT_STARTED and (needed := needs_a_blocked_step(self.plan, i)) is not None:
                step.status, step.notes = StepStatus.BLOCKED, f"not run: it needs step {needed + 1}, which is blocked"
        if not await self._replan(index, reason, keep=keep):
            return FlowOutcome.BLOCKED, f"step {index + 1} is blocked ({reason}) and the plan could not be revised"
        return None

    async def _run_step(self, index: int) -> bool:
        """Run step `index` as a child agent; True when it completed."""
        if self._cancel_ends_flow():
            raise asyncio.CancelledError()
        step = self.plan.steps[index]
        step.executor = executor_for(step.text, self.input.agents, self.input.primary_agent)
        step.run_id = f"{workflow.info().workflow_id}/step-{index + 1}"
        step.status = StepStatus.IN_PROGRESS
        self._publish()
        task = fill(
            prompts.STEP_PROMPT,
            plan_status=self.plan.render(),
            step_number=index + 1,
            step_text=step.text,
        )
        outcome = StepOutcome(index=index, text=step.text, executor=step.executor, run_id=step.run_id, status=step.status)
        given = remaining(self.budget, self.usage, self.cost)
        result: AgentRunResult | None
        try:
            result = await workflow.execute_child_workflow(
                AgentWorkflow.run,
                AgentRunInput(
                    task=task,
                    agent=step.executor,
                    profile=self.input.child_profile(step.executor),
                    continuation=self.input.continuation,
                    workspace=self.workspace,
                    max_steps=self.input.max_steps_per_agent,
                    steps_per_run=self.input.steps_per_run,
                    llm=self.input.agent_llm,
                    budget=given,
                    approval=(self.input.approval or {}).get(step.executor),
                ),
                id=step.run_id,
                execution_timeout=max(self._time_left(), timedelta(seconds=1)),
                task_timeout=self.input.continuation.workflow_task_timeout() if self.input.continuation else None,
                static_summary=f"step {index + 1} · {step.executor}: {step.text}"[:200],
                search_attributes=search_attributes.for_child(step.executor),
            )
        except ChildWorkflowError as e:
            # A step that did not do its task fails with its whole result (workflows/run_failure.py).
            result = result_in(e, AgentRunResult)
            if result is None:
                self._block_failed_step(step, e)
        if result is not None:
            if workflow.cancellation_reason() is not None:
                # The child finished because the flow's cancellation reached it.
                raise asyncio.CancelledError()
            self.usage = self.usage + result.usage
            self.cost = add_cost(self.cost, result.cost)
            self.budget = raised_by(self.budget, given, result.raised_budget)
            outcome.state = result.state
            outcome.answer = clip(result.final_answer, ANSWER_LIMIT) if result.final_answer else result.final_answer
            if result.succeeded:
                step.status = StepStatus.COMPLETED
                step.notes = (result.final_answer or "done")[:NOTE_LIMIT]
            else:
                step.status = StepStatus.BLOCKED
                step.notes = f"{result.stop_reason.value}: {result.note or 'the agent did not finish'}"[:NOTE_LIMIT]
        outcome.status = step.status
        outcome.reason = None if step.status == StepStatus.COMPLETED else step.notes
        self.outcomes.append(outcome)
        self._publish()
        return step.status == StepStatus.COMPLETED

    @staticmethod
    def _block_failed_step(step: PlanStep, error: ChildWorkflowError) -> None:
        """A step whose run ended with no result: blocked, or the flow's
        cancellation goes on up."""
        if not is_cancellation(error):
            step.status, step.notes = StepStatus.BLOCKED, clip(f"the step's run failed: {root_message(error)}", NOTE_LIMIT)
        elif workflow.cancellation_reason() is None:
            # Only the step's run was cancelled: that step is blocked, not the whole flow.
            step.status, step.notes = StepStatus.BLOCKED, "cancelled: the step's run was cancelled"
        else:
            raise asyncio.CancelledError() from None

    # ---- planning, replanning, summary (one think each) ---------------------------

    async def _create_plan(self) -> None:
        system = prompts.PLAN_SYSTEM_PROMPT
        if len(self.input.agents) > 1:
            agents = "\n".join(f"- {a}: {self.input.profile_of(a).description}" for a in self.input.agents)
            system += fill(prompts.PLAN_AGENTS_SECTION, agents=agents, example_agent=self.input.agents[0])
        try:
            response = await self._think(
                "make the plan", system, fill(prompts.PLAN_REQUEST, task=self.input.task), with_planning_tool=True
            )
        except _ThinkFailed as e:
            raise _FlowEnded(FlowOutcome.ERROR, f"the planner's LLM call failed: {e}") from None
        plan, problem = plan_from_reply(self.plan.plan_id, self.input.task, self._calls(response))
        self.plan = plan or default_plan(self.plan.plan_id, self.input.task, problem)
        self._publish()

    async def _replan(self, blocked_index: int, reason: str, keep: int | None = None) -> bool:
        """Revise the steps after the first `keep` (default: after the blocked one)."""
        keep = blocked_index + 1 if keep is None else keep
        self.replans += 1
        request = fill(
            prompts.REPLAN_REQUEST,
            task=self.input.task,
            plan_status=self.plan.render(),
            step_number=blocked_index + 1,
            reason=reason,
        )
        try:
            response = await self._think(
                f"replan after step {blocked_index + 1}", prompts.REPLAN_SYSTEM_PROMPT, request, with_planning_tool=True
            )
        except _ThinkFailed:
            return False
        steps, problem = revised_steps(self.plan, blocked_index, self._calls(response), keep=keep)
        if steps is None:
            self.plan.notes = f"Replan {self.replans} changed nothing: {problem}."
            self._publish()
            return False
        self.plan.steps = self.plan.steps[:keep] + steps
        self.plan.notes = f"Revised after step {blocked_index + 1} was blocked (replan {self.replans})."
        self._publish()
        return True

    async def _finalize(self) -> None:
        answers = "\n".join(
            f"- step {o.index + 1} ({o.executor}, {o.status.value}): {o.answer or o.reason or ''}" for o in self.outcomes
        ) or "- (no step ran)"
        request = fill(prompts.FINALIZE_REQUEST, plan_status=self.plan.render(), step_answers=answers)
        try:
            response = await self._think(
                "summarise", prompts.FINALIZE_SYSTEM_PROMPT, request, with_planning_tool=False, reserve=False
            )
            self.summary = response.message.content
        except _ThinkFailed:
            self.summary = None
        if not self.summary:
            self.summary = f"{self.plan.render()}\n\nStep results:\n{answers}"

    async def _think(
        self, what: str, system: str, request: str, *, with_planning_tool: bool, reserve: bool = True
    ) -> ThinkResponse:
        """One think activity within the time left; raises _ThinkFailed."""
        if self._cancel_ends_flow():
            raise asyncio.CancelledError()
        budget = self._time_left(reserve=reserve)
        if budget <= timedelta(0):
            raise _ThinkFailed("no time was left")
        if self._budget_spent() is not None:
            raise _ThinkFailed("the budget was spent")
        options = scheduled(THINK_CONFIG, f"think · planning flow: {what}")
        options["schedule_to_close_timeout"] = budget
        try:
            response = await workflow.execute_activity(
                THINK,
                fit(
                    ThinkRequest(
                        llm=self.input.llm,
                        system_prompt=system,
                        messages=[user_message(request)],
                        tools=[planning_tool.SCHEMA] if with_planning_tool else None,
                        tool_choice=ToolChoice.REQUIRED if with_planning_tool else ToolChoice.NONE,
                    )
                ),
                result_type=ThinkResponse,
                **options,
            )
        except ActivityError as e:
            if is_cancellation(e):
                raise asyncio.CancelledError() from None
            workflow.logger.warning("planning flow: %s failed: %s", what, root_message(e))
            raise _ThinkFailed(clip(root_message(e), NOTE_LIMIT)) from None
        self.usage = self.usage + response.usage
        self.cost = add_cost(self.cost, run_cost(self.input.budget, self.input.llm, response.usage))
        return response

    # ---- helpers ------------------------------------------------------------------

    @staticmethod
    def _calls(response: ThinkResponse) -> list[tuple[str, str]]:
        return [(c.function.name, c.function.arguments) for c in response.message.tool_calls or []]

    def _budget_spent(self) -> str | None:
        """The note when the flow's budget is spent (no think or step run
        starts then), else None."""
        ceiling = ceiling_reached(self.budget, self.usage, self.cost)
        if ceiling is None:
            return None
        after = f"step {self.outcomes[-1].index + 1}" if self.outcomes else "planning"
        return ceiling_note(ceiling, after, self.usage, self.cost)

    def _time_left(self, reserve: bool = True) -> timedelta:
        limit = self.input.timeout_seconds - FINISH_MARGIN_SECONDS - (FINALIZE_RESERVE_SECONDS if reserve else 0)
        return self.started + timedelta(seconds=limit) - workflow.now()

    def _result(self, outcome: FlowOutcome, note: str | None) -> PlanningFlowResult:
        if outcome == FlowOutcome.CANCELLED:
            for step in self.plan.steps:
                if step.status == StepStatus.IN_PROGRESS:
                    step.status, step.notes = StepStatus.BLOCKED, "cancelled"
        state = {FlowOutcome.ERROR: AgentState.ERROR, FlowOutcome.CANCELLED: AgentState.CANCELLED}.get(
            outcome, AgentState.FINISHED
        ).value
        self._publish(note, state)
        return fit(
            PlanningFlowResult(
                outcome=outcome,
                plan=self.plan,
                steps=self.outcomes,
                summary=self.summary,
                note=note,
                replans=self.replans,
                usage=self.usage,
                cost=self.cost,
            )
        )

    def _publish(self, note: str | None = None, state: str = AgentState.RUNNING.value) -> None:
        """Current details (the plan, as markdown in the Web UI) and search attributes."""
        cost = "" if self.cost is None else f" · {money(self.cost)}"
        lines = [
            f"**planning flow** · {state} · {len(self.outcomes)} step runs · {self.usage.total_tokens} tokens{cost}"
        ]
        if self.running:
            lines.append(f"**running** step(s) {', '.join(str(i + 1) for i in sorted(self.running))}")
        budget = budget_text(self.budget, self.usage, self.cost)
        if budget is not None:
            lines.append(f"**budget** {budget} spent")
        if note:
            lines.append(f"**note** {note}")
        lines.append(f"```\n{self.plan.render()}\n```")
        workflow.set_current_details(clip("\n\n".join(lines), DETAILS_LIMIT))
        search_attributes.upsert(state, sum(1 for s in self.plan.steps if s.finished))

    @workflow.query(name="plan")
    def plan_query(self) -> Plan:
        return fit(self.plan)

    @workflow.query
    def step_outcomes(self) -> list[StepOutcome]:
        return fit(self.outcomes)
