"""One step of an agent run: think, then act on the reply.

Memory gets, in order: the next-step prompt, the reply, one tool message per
call (as its activity finished it, when it did), then what the calls add after
them (images, the workflow's own notes), then any reminder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_model import agent_loop
    from agent_model.activity_specs import THINK, THINK_CONFIG
    from agent_model.budget import Budget, run_cost
    from agent_model.call_groups import call_groups
    from agent_model.agent_loop import (
        Reply,
        ReplyKind,
        dropped_calls_note,
        dropped_calls_reminder,
        next_step_message,
        observed,
        over_the_per_reply_limit,
        read_reply,
        stuck_hint_due,
    )
    from agent_model.llm_io import ThinkResponse
    from agent_model.messages import Message, ToolCall, user_message
    from agent_model.profiles import AgentProfile
    from agent_model.prompting import fill
    from agent_model.records import StepRecord, ToolCallRecord
    from agent_model.run import observe_limit
    from agent_model.run_state import RunState
    from agent_model.state import AgentState, StopReason
    from agent_model.errors import CONTEXT_MISSING_ERROR, REPLY_TOO_LARGE_ERROR, TOKEN_LIMIT_ERROR
    from agent_model.think_context import ContextSync
    from agent_model.tool_terms import BadToolTerms
    from agent_model.tool_spec import RunEnds, ToolOutcome, scheduled
    from agent_model.trace_attributes import (
        STOP_REASON,
        TOOL_ARGUMENTS,
        TOOL_RESULT,
        step_attributes,
        step_end_attributes,
        step_span_name,
        tool_attributes,
        tool_end_attributes,
        tool_span_name,
    )
    from prompts import agent_notes
    from workflows.agent_tools import RunTools, worker_went_silent
    from workflows.run_ending import Cancelled, RunEnded, cancel_requested, stop_if_cancelled
    from workflows.tracing import WorkflowSpan, workflow_span

NOT_RUN_AFTER_THE_END = "Not run: the run ended with an earlier call."


@dataclass
class Observed:
    """One call's result as its step keeps it, and whether it ends the run."""

    message: Message
    record: ToolCallRecord
    outcome: ToolOutcome
    ends: RunEnded | None = None


class Stepper:
    def __init__(
        self, state: RunState, tools: RunTools, publish: Callable[[], None], budget: Budget | None = None
    ) -> None:
        self.state, self.tools, self.publish = state, tools, publish
        self.budget = budget
        """The run's budget, whose prices cost each step's think."""

    @property
    def profile(self) -> AgentProfile:
        assert self.state.profile is not None
        return self.state.profile

    async def step(self) -> None:
        state = self.state
        turn = state.session.turn if state.session else 1
        with workflow_span(
            step_span_name(state.step), f"step/{state.step}", step_attributes(state.step, turn), expected=(RunEnded,)
        ) as span:
            try:
                await self._step(span)
            except RunEnded as end:
                span.set({STOP_REASON: end.reason.value})
                if end.state == AgentState.ERROR:
                    span.fail(end.reason.value)
                raise

    async def _step(self, span: WorkflowSpan) -> None:
        state, profile = self.state, self.profile
        await self.tools.before_think()
        prompt = next_step_message(profile, state.directory, state.plans, self.tools.prompt_parts())
        if prompt is not None:
            state.memory.add(prompt)

        response = await self._think()
        span.set(step_end_attributes(response.usage, len(response.message.tool_calls or []), response.model))
        reply = read_reply(response, profile)
        record = StepRecord(
            step=state.step, turn=state.session.turn if state.session else 1, thought=response.message.content, usage=response.usage,
            cost=run_cost(self.budget, profile.llm, response.usage),
        )
        if reply.kind == ReplyKind.CONTENT_FILTERED:
            state.records.append(record)
            raise RunEnded(StopReason.CONTENT_FILTERED, agent_notes.CONTENT_FILTER_NOTE)
        if reply.kind == ReplyKind.EMPTY:
            self._empty_reply(record, response.finish_reason)
            return
        state.empty_replies = 0
        if reply.dropped:
            record.note = dropped_calls_note(reply)
        self._remember_produced(reply.message, response.stored_digest)
        try:
            await self._act_on(reply, record)
        except GeneratorExit:
            raise  # the worker dropped the run from its cache: it replays elsewhere, and nothing may publish now
        except BaseException:
            self._keep(record)
            raise
        self._keep(record)
        if reply.dropped:
            state.memory.add(dropped_calls_reminder(reply))
        self._hint_if_stuck(reply.message)

    def _keep(self, record: StepRecord) -> None:
        # Published whole: followers never see a step that is half done.
        self.state.records.append(record)
        self.publish()

    def _empty_reply(self, record: StepRecord, finish_reason: str | None) -> None:
        """No answer and no action: remind the model once; a second empty reply
        in a row ends the run in ERROR. The reply itself stays out of memory
        (an assistant message without content or tool calls is invalid)."""
        self.state.empty_replies += 1
        self.state.records.append(record)
        if self.state.empty_replies > 1:
            raise RunEnded(
                StopReason.EMPTY_REPLY,
                fill(agent_notes.EMPTY_REPLY_NOTE, finish_reason=finish_reason or "none"),
                AgentState.ERROR,
            )
        record.note = agent_notes.EMPTY_REPLY_STEP_NOTE
        self.state.memory.add(user_message(agent_notes.EMPTY_REPLY_REMINDER))
        self.publish()

    async def _think(self) -> ThinkResponse:
        state, profile = self.state, self.profile
        terms = profile.think_terms
        try:
            config = terms.config() if terms is not None else THINK_CONFIG
        except BadToolTerms as e:
            raise RunEnded(
                StopReason.ERROR, f"the run cannot think: its think terms in its input are invalid ({e})", AgentState.ERROR
            ) from None
        reschedules = terms.lost_worker_reschedules if terms is not None else 0
        lost = 0
        while True:
            stop_if_cancelled()
            system_prompt = agent_loop.system_prompt(profile, state.directory, state.plans)
            tools = self.tools.definitions() or None
            # A complete resend of this request must fit in one payload.
            state.memory.reserve(system_prompt, tools)
            window = state.memory.numbered_window()
            request = state.context.build(
                llm=profile.llm, system_prompt=system_prompt, window=window, tools=tools, tool_choice=profile.tool_choice
            )
            # Where the worker finds the screenshots and writes the live journal,
            # and the step the journal's events name; the model sees neither.
            request.workspace, request.step = self.tools.workspace, state.step
            complete = ContextSync.is_complete(request)
            try:
                summary = f"think {state.step}/{profile.max_steps} · {profile.name}"
                response = await workflow.execute_activity(
                    THINK,
                    request,
                    result_type=ThinkResponse,
                    **scheduled(config, summary if lost == 0 else f"{summary} (again: its worker was lost)"),
                )
                break
            except ActivityError as e:
                # A lost worker (or a server too busy to hear its beats) is not
                # the model's failure: the think starts over with its attempts whole.
                if worker_went_silent(e) and lost < reschedules and not cancel_requested():
                    lost += 1
                    continue
                cause = e.cause
                if not isinstance(cause, ApplicationError):
                    raise
                if cause.type == CONTEXT_MISSING_ERROR and not complete:
                    state.context.forget()  # that worker lost the window: send all of it
                    continue
                if cause.type == TOKEN_LIMIT_ERROR:
                    raise RunEnded(
                        StopReason.TOKEN_LIMIT, fill(agent_notes.TOKEN_LIMIT_NOTE, detail=cause.message)
                    ) from None
                if cause.type == REPLY_TOO_LARGE_ERROR:
                    raise RunEnded(
                        StopReason.REPLY_TOO_LARGE, fill(agent_notes.REPLY_TOO_LARGE_NOTE, detail=cause.message)
                    ) from None
                raise
        state.context.confirm(request)
        state.usage = state.usage + response.usage
        return response

    async def _act_on(self, reply: Reply, record: StepRecord) -> None:
        state, profile = self.state, self.profile
        if reply.kind != ReplyKind.ACT:
            stop_if_cancelled()
            if reply.kind == ReplyKind.TOOL_REQUIRED:
                state.memory.add(user_message(agent_notes.TOOL_REQUIRED_REMINDER))
            elif reply.kind == ReplyKind.ANSWER:
                state.final_answer = reply.message.content
                raise RunEnded(StopReason.ANSWERED)
            return

        after: list[Message] = []
        ended: RunEnded | Cancelled | None = None
        limit = observe_limit(profile)
        calls = reply.message.tool_calls or []
        marks = [
            over_the_per_reply_limit(profile, index) is None and self.tools.may_run_beside_others(call)
            for index, call in enumerate(calls)
        ]
        for group in call_groups(marks):
            if ended is None and cancel_requested():
                ended = Cancelled()
            if ended is None and len(group) > 1:
                seen = await self._together([(index, calls[index]) for index in group], limit)
            else:
                seen = []
                for index in group:
                    if ended is None and cancel_requested():
                        ended = Cancelled()
                    one = await self._observe(index, calls[index], limit, ended)
                    ended = ended or one.ends
                    seen.append(one)
            for one in seen:  # in the model's order, whichever call finished first
                record.tool_calls.append(one.record)
                self._remember_produced(one.message, one.outcome.stored_digest)
                after.extend(one.outcome.after)
        for message in after:
            state.memory.add(message)
        if ended is None and cancel_requested():
            ended = Cancelled()
        if ended is not None:
            raise ended

    async def _together(self, calls: list[tuple[int, ToolCall]], limit: int) -> list[Observed]:
        """Calls that may run beside each other, at once; a cancelled run
        cancels each and ends only once every one has ended, each with the
        observation it would have alone."""
        running = [asyncio.create_task(self._observe(index, call, limit, None)) for index, call in calls]
        try:
            await workflow.wait(running)
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            await workflow.wait(running)
            if not cancel_requested():
                raise
        return [task.result() for task in running]

    async def _observe(
        self, index: int, call: ToolCall, limit: int, ended: RunEnded | Cancelled | None
    ) -> Observed:
        """One call in its span: run, or the reason it is not (the run ended
        with an earlier call, was cancelled, the reply has too many calls)."""
        state, profile = self.state, self.profile
        name = call.function.name
        with workflow_span(
            tool_span_name(name),
            f"step/{state.step}/call/{index}",
            tool_attributes(name, call.id, state.step),
            content={TOOL_ARGUMENTS: call.function.arguments},
        ) as span:
            ran, ends = False, None
            if isinstance(ended, Cancelled):
                outcome = ToolOutcome(agent_notes.NOT_RUN_CANCELLED, error=True)
            elif ended is not None:
                outcome = ToolOutcome(NOT_RUN_AFTER_THE_END, error=True)
            elif (refusal := over_the_per_reply_limit(profile, index)) is not None:
                outcome = ToolOutcome(refusal, error=True)
            else:
                ran = True
                try:
                    outcome = await self.tools.act(call, index, limit)
                    if name in profile.special_tools and not outcome.error:
                        ends = RunEnded(StopReason.TERMINATED)
                        state.final_answer = state.final_answer or outcome.observation
                except RunEnds as end:
                    if end.answer is not None:
                        state.final_answer = end.answer
                    ends = RunEnded(StopReason.GAVE_UP if end.gave_up else StopReason.TERMINATED)
                    outcome = ToolOutcome(f"The run ends ({ends.reason.value}).")
            message, call_record = observed(call, outcome.observation, outcome.error, limit, outcome.message)
            call_record.approval = outcome.approval
            approval = outcome.approval.action.value if outcome.approval is not None else None
            span.set(tool_end_attributes(outcome.error, ran, approval))
            span.capture(TOOL_RESULT, message.content or "")
            return Observed(message, call_record, outcome, ends)

    def _hint_if_stuck(self, reply: Message) -> None:
        state = self.state
        signature = stuck_hint_due(state.memory, reply, state.hinted, self.profile.duplicate_threshold)
        if signature is None:
            return
        state.hinted.append(signature)
        state.memory.add(user_message(agent_notes.STUCK_HINT))
        if state.records:
            state.records[-1].note = "stuck: the same reply repeated; a hint was added"

    def _remember_produced(self, message: Message, stored_digest: str | None) -> None:
        """Adds an activity's message to memory; if its worker stored it, the
        next think names it instead of carrying it."""
        self.state.context.produced(self.state.memory.add(message), message, stored_digest)
