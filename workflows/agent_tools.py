"""The tools of one agent run, as its workflow drives them.

Every tool goes through the registry (tools/): a call is dispatched to the
spec that answers its name, and the hooks of the tools the run uses (their
part of the next-step prompt, work before a think, the definitions they add,
work at run end) are called at fixed points. Nothing here names a tool.
RunTools is also what the tools that run in the workflow see of the run
(agent_model/tool_spec.py WorkflowTools).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from agent_model.agent_loop import unknown_tool
    from agent_model.approval import ApprovalPolicy, GateFacts, TimeoutAction, gate_reason
    from agent_model.approval_desk import SHOWN_ARGUMENTS_CHARS, ApprovalAction, ApprovalRecord, PendingApproval
    from agent_model.human import HumanQuestion
    from agent_model.messages import Message, ToolCall, user_message
    from agent_model.plan import PlanBook
    from agent_model.profiles import AgentProfile
    from agent_model.payload import clip
    from agent_model.prompting import fill
    from agent_model.run_state import RunState
    from agent_model.tool_arguments import parse_arguments
    from agent_model.tool_io import ToolRequest, ToolResult, observation_text, produced_text
    from agent_model.tool_spec import ToolCallContext, ToolOutcome, ToolSpec, scheduled
    from agent_model.tool_terms import BadToolTerms, reads_only
    from agent_model.usage import TokenUsage
    from prompts import agent_notes
    from tools import TOOLS, activity_options, activity_summary, offered_definitions, own_activity_options, used_by
    from agent_model.state import AgentState, StopReason
    from workflows.run_ending import RunEnded, cancel_requested, is_cancellation, root_message

Slot = TypeVar("Slot", bound=BaseModel)

SILENT_WORKER_TIMEOUTS = (TimeoutType.HEARTBEAT, TimeoutType.SCHEDULE_TO_START)
"""How an attempt ends when its worker died, froze or was cut off from the
server; a start-to-close timeout is the call's own (it ran too long)."""


class LostCall(Exception):
    """A call whose workers went silent more often than the run allows."""

    def __init__(self, times: int) -> None:
        super().__init__(f"its worker was lost {times} times")
        self.times = times


def worker_went_silent(error: ActivityError) -> bool:
    cause = error.cause
    return isinstance(cause, TimeoutError) and cause.type in SILENT_WORKER_TIMEOUTS


class RunTools:
    def __init__(
        self, state: RunState, workspace: str, publish: Callable[[], None], approval: ApprovalPolicy | None = None
    ) -> None:
        self.state, self.workspace, self.publish = state, workspace, publish
        self.approval = approval
        """The run's approval gates (its input's); None: no call waits."""
        self._call: ToolCallContext | None = None
        self._used: list[ToolSpec] | None = None

    @property
    def profile(self) -> AgentProfile:
        assert self.state.profile is not None
        return self.state.profile

    @property
    def used(self) -> list[ToolSpec]:
        """The stateful tools the run uses, whose hooks run in its steps."""
        if self._used is None:
            self._used = [spec for spec in used_by(self.profile) if spec.state is not None]
        return self._used

    # ---- hooks at fixed points of a step ------------------------------------------

    async def before_think(self) -> None:
        for spec in self.used:
            if spec.state is not None and spec.state.before_think is not None:
                try:
                    await spec.state.before_think(self)
                except BadToolTerms as e:
                    raise RunEnded(
                        StopReason.ERROR, f"{spec.name} cannot run: its terms in this run's input are invalid ({e})",
                        AgentState.ERROR,
                    ) from None

    def prompt_parts(self) -> list[str]:
        parts = []
        for spec in self.used:
            if spec.state is not None and spec.state.prompt is not None:
                part = spec.state.prompt(self.slot(spec.name, spec.state.model))
                if part:
                    parts.append(part)
        return parts

    def definitions(self) -> list[dict[str, Any]]:
        """The function definitions of a think: the profile's tools, then what
        stateful tools add."""
        extra = [
            definition
            for spec in self.used
            if spec.state is not None and spec.state.definitions is not None
            for definition in spec.state.definitions(self.slot(spec.name, spec.state.model))
        ]
        return [*offered_definitions(self.profile), *extra]

    async def at_run_end(self) -> None:
        for spec in self.used:
            if spec.state is not None and spec.state.at_run_end is not None:
                await spec.state.at_run_end(self)

    # ---- one call -------------------------------------------------------------------

    def spec_for(self, name: str) -> ToolSpec | None:
        spec = TOOLS.get(name)
        if spec is not None and spec.schema is not None and name in self.profile.tools:
            return spec
        for spec in self.used:
            state = spec.state
            if state is not None and state.answers is not None and state.answers(self.slot(spec.name, state.model), name):
                return spec
        return None

    def may_run_beside_others(self, call: ToolCall) -> bool:
        """Whether the call may run at once with its reply's other such calls:
        the run's input marks its tool (an older input marks none), it is no
        special tool, and no approval gate holds it (a gated call waits for
        its decision alone)."""
        name = call.function.name
        terms = self.profile.tool_terms.get(name)
        if terms is None or not terms.concurrent or name in self.profile.special_tools:
            return False
        spec = self.spec_for(name)
        if spec is None or spec.activity is None or spec.state is not None:
            return False
        arguments, _ = parse_arguments(name, call.function.arguments)
        return arguments is not None and self._gate(spec, name, arguments) is None

    async def act(self, call: ToolCall, index: int, limit: int) -> ToolOutcome:
        """One tool call's outcome. Tool failures of any kind are observations;
        only cancellation of the run escapes (and RunEnds, from terminate)."""
        name = call.function.name
        spec = self.spec_for(name)
        if spec is None:
            return ToolOutcome(unknown_tool(self.profile, name, TOOLS) or "", error=True)
        arguments, error = parse_arguments(name, call.function.arguments)
        if arguments is None:
            return ToolOutcome(error or "", error=True)
        self._call = ToolCallContext(
            workspace=self.workspace,
            step=self.state.step,
            index=index,
            call_id=call.id,
            tool=name,
            llm=self.profile.llm,
            observe_limit=limit,
        )
        decided: ApprovalRecord | None = None
        gated_by = self._gate(spec, name, arguments)
        if gated_by is not None:
            decided, refused = await self._decision(call, index, gated_by)
            if refused is not None:
                return ToolOutcome(refused, error=True, approval=decided)
            if decided.arguments is not None:
                arguments = parse_arguments(name, decided.arguments)[0] or {}  # checked by the update's validator
        try:
            if spec.handler is not None:
                outcome = await spec.handler(self, arguments)
            else:
                outcome = await self._run_activity(spec, call, arguments, limit)
        except (asyncio.CancelledError, ActivityError, LostCall) as e:
            outcome = self._tool_failed(name, e)
        except BadToolTerms as e:
            outcome = ToolOutcome(f"Error: {name} cannot run: its terms in this run's input are invalid ({e}).", error=True)
        return outcome if decided is None else self._with_decision(outcome, decided, call)

    async def _run_activity(self, spec: ToolSpec, call: ToolCall, arguments: dict[str, Any], limit: int) -> ToolOutcome:
        assert spec.activity is not None
        state = spec.state
        terms = self.profile.tool_terms.get(spec.name)
        request = ToolRequest(
            workspace=self.workspace,
            arguments=arguments,
            call_id=call.id,
            observe_limit=limit,
            step=self.state.step,
            options=terms.options if terms is not None else {},
        )
        if state is not None and state.into_request is not None:
            request = state.into_request(self.slot(spec.name, state.model), request)
        result = await self._execute_outliving_lost_workers(spec, request, arguments)
        if state is not None and state.from_result is not None:
            self.keep(spec.name, state.from_result(self.slot(spec.name, state.model), result))
        after: tuple[Message, ...] = ()
        if result.base64_image:
            after = (user_message(agent_notes.TOOL_IMAGE_NOTE, base64_image=result.base64_image),)
        elif result.image_file:
            after = (user_message(fill(agent_notes.TOOL_IMAGE_FILE_NOTE, path=result.image_file), image_file=result.image_file),)
        return ToolOutcome(
            produced_text(result, observation_text(result)),
            result.error,
            message=result.message,
            stored_digest=result.stored_digest,
            after=after,
        )

    # ---- approval gates ---------------------------------------------------------------

    def _gate(self, spec: ToolSpec, name: str, arguments: dict[str, Any]) -> str | None:
        """Why the call must wait for a person's decision, or None."""
        if self.approval is None:
            return None
        state = spec.state
        facts = GateFacts()
        if state is not None and state.gate_facts is not None:
            facts = state.gate_facts(self.slot(spec.name, state.model), name)
        return gate_reason(self.approval, name, arguments, facts, exempt=self.profile.special_tools)

    async def _decision(self, call: ToolCall, index: int, gated_by: str) -> tuple[ApprovalRecord, str | None]:
        """Wait durably for the `decide` update on this call; the decision (a
        timeout's default action when nobody decides), and the observation
        when the call is not to run."""
        assert self.approval is not None
        desk, seconds = self.state.approvals, self.approval.timeout_seconds
        call_id = f"{self.state.step}.{index + 1}"
        desk.open(
            PendingApproval(
                id=call_id,
                tool=call.function.name,
                arguments=clip(call.function.arguments, SHOWN_ARGUMENTS_CHARS),
                reason=gated_by,
                since=workflow.now(),
                timeout_seconds=seconds,
            )
        )
        self.publish()
        shown = f"{seconds:g}"
        try:
            await workflow.wait_condition(
                lambda: desk.decision is not None,
                timeout=timedelta(seconds=seconds),
                timeout_summary=f"waiting for approval of call {call_id}",
            )
        except asyncio.TimeoutError:
            # A decision accepted in this same activation was confirmed to its sender: it stands.
            if desk.close(fill(agent_notes.APPROVAL_TIMEOUT_REASON, seconds=shown)) is None:
                default = self.approval.on_timeout
                action = ApprovalAction.APPROVE if default == TimeoutAction.APPROVE else ApprovalAction.REJECT
                record = ApprovalRecord(
                    call_id=call_id, gated_by=gated_by, action=action, decided_by="timeout", at=workflow.now(),
                    reason=fill(agent_notes.APPROVAL_TIMEOUT_REASON, seconds=shown),
                )
                refused = None if action == ApprovalAction.APPROVE else fill(
                    agent_notes.APPROVAL_TIMEOUT_REJECTED, seconds=shown
                )
                return record, refused
        except asyncio.CancelledError:
            decided = desk.close(agent_notes.CANCELLED_NOTE)
            if not cancel_requested():
                raise
            if decided is None:
                record = ApprovalRecord(
                    call_id=call_id, gated_by=gated_by, action=ApprovalAction.REJECT, decided_by="cancellation",
                    at=workflow.now(), reason=agent_notes.CANCELLED_NOTE,
                )
                return record, agent_notes.APPROVAL_CANCELLED_OBSERVATION
        decided = desk.decision
        assert decided is not None
        if decided.action == ApprovalAction.REJECT:
            reason = decided.reason or agent_notes.APPROVAL_NO_REASON
            return decided, fill(agent_notes.APPROVAL_REJECTED_OBSERVATION, reason=reason)
        return decided, None

    def _with_decision(self, outcome: ToolOutcome, decided: ApprovalRecord, call: ToolCall) -> ToolOutcome:
        """The outcome of a call that ran after its gate: the decision goes in its
        record, and an edit is told to the model (memory keeps the call it wrote)."""
        after = outcome.after
        if decided.arguments is not None:
            shown = json.dumps(parse_arguments(call.function.name, decided.arguments)[0], ensure_ascii=False)
            note = fill(
                agent_notes.APPROVAL_EDITED_NOTE,
                call_id=decided.call_id, tool=call.function.name, arguments=clip(shown, SHOWN_ARGUMENTS_CHARS),
            )
            after = (user_message(note), *after)
        return dataclasses.replace(outcome, approval=decided, after=after)

    async def _execute_outliving_lost_workers(
        self, spec: ToolSpec, request: ToolRequest, arguments: dict[str, Any]
    ) -> ToolResult:
        """The call's activity; scheduled again, with fresh attempts, as often
        as the run's terms say when its last attempt ended because its worker
        went silent: only the tool's own failures use up its retries."""
        terms = self.profile.tool_terms.get(spec.name)
        summary = activity_summary(spec.name, arguments)
        if terms is not None and terms.activity is not None and reads_only(terms.local_reads, arguments):
            # No worker of its own to lose: it runs in this workflow task's.
            local = terms.activity.local_config()
            local["summary"] = summary
            return await workflow.execute_local_activity(spec.name, request, result_type=ToolResult, **local)
        reschedules = terms.activity.lost_worker_reschedules if terms is not None and terms.activity is not None else 0
        lost = 0
        while True:
            try:
                return await workflow.execute_activity(
                    spec.name,
                    request,
                    result_type=ToolResult,
                    **scheduled(activity_options(self.profile, spec), summary if lost == 0 else f"{summary} (again: its worker was lost)"),
                )
            except ActivityError as e:
                if not worker_went_silent(e) or cancel_requested() or reschedules == 0:
                    raise
                lost += 1
                if lost > reschedules:
                    raise LostCall(lost) from e

    def _tool_failed(self, name: str, error: BaseException) -> ToolOutcome:
        """The observation of a tool whose activity failed or was cancelled; a
        cancellation of the run itself escapes."""
        if isinstance(error, asyncio.CancelledError) or is_cancellation(error):
            # A cancelled activity's result and the cancellation may come together.
            if not cancel_requested():
                raise error
            return ToolOutcome(fill(agent_notes.TOOL_CANCELLED_OBSERVATION, tool=name), error=True)
        if isinstance(error, LostCall):
            return ToolOutcome(fill(agent_notes.LOST_CALL_OBSERVATION, tool=name, times=str(error.times)), error=True)
        return ToolOutcome(f"Error: {name} failed: {root_message(error)}", error=True)

    # ---- what workflow tools see (WorkflowTools) ---------------------------------------

    @property
    def call(self) -> ToolCallContext:
        assert self._call is not None
        return self._call

    @property
    def plans(self) -> PlanBook:
        return self.state.plans

    @plans.setter
    def plans(self, plans: PlanBook) -> None:
        self.state.plans = plans

    def slot(self, tool: str, model: type[Slot]) -> Slot:
        return self.state.slot(tool, model)

    def keep(self, tool: str, value: BaseModel) -> None:
        self.state.keep(tool, value)

    def note(self, text: str) -> None:
        self.state.memory.add(user_message(text))

    def spent(self, usage: TokenUsage) -> None:
        self.state.usage = self.state.usage + usage

    def options(self, tool: str, key: str) -> workflow.ActivityConfig:
        return own_activity_options(self.profile, tool, key)

    async def ask_user(self, question: str) -> str:
        """ask_human: publish the question and wait durably for the answer update."""
        desk, seconds = self.state.desk, int(self.profile.human_timeout_seconds)
        desk.ask(HumanQuestion(id=f"{self.state.step}.{self.call.index + 1}", text=question))
        self.publish()
        try:
            await workflow.wait_condition(
                lambda: desk.answer is not None,
                timeout=timedelta(seconds=self.profile.human_timeout_seconds),
                timeout_summary="waiting for the user's answer",
            )
        except asyncio.TimeoutError:
            # An answer accepted in this same activation was confirmed to its
            # sender already, so it is the outcome; any later one is refused.
            if desk.close(fill(agent_notes.HUMAN_TIMEOUT_REASON, seconds=seconds)) is None:
                return fill(agent_notes.HUMAN_TIMEOUT_OBSERVATION, seconds=seconds)
        except asyncio.CancelledError:
            answer = desk.close(agent_notes.CANCELLED_NOTE)
            if not cancel_requested():
                raise
            if answer is None:
                return agent_notes.HUMAN_CANCELLED_OBSERVATION
        return f"The user answered: {desk.answer}"
