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
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_model.agent_loop import unknown_tool
    from agent_model.human import HumanQuestion
    from agent_model.messages import Message, ToolCall, user_message
    from agent_model.plan import PlanBook
    from agent_model.profiles import AgentProfile
    from agent_model.prompting import fill
    from agent_model.run_state import RunState
    from agent_model.tool_arguments import parse_arguments
    from agent_model.tool_io import ToolRequest, ToolResult, observation_text, produced_text
    from agent_model.tool_spec import ToolCallContext, ToolOutcome, ToolSpec, scheduled
    from agent_model.tool_terms import BadToolTerms
    from agent_model.usage import TokenUsage
    from prompts import agent_notes
    from tools import TOOLS, activity_options, activity_summary, offered_definitions, own_activity_options, used_by
    from agent_model.state import AgentState, StopReason
    from workflows.run_ending import RunEnded, cancel_requested, is_cancellation, root_message

Slot = TypeVar("Slot", bound=BaseModel)


class RunTools:
    def __init__(self, state: RunState, workspace: str, publish: Callable[[], None]) -> None:
        self.state, self.workspace, self.publish = state, workspace, publish
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
        try:
            if spec.handler is not None:
                return await spec.handler(self, arguments)
            return await self._run_activity(spec, call, arguments, limit)
        except (asyncio.CancelledError, ActivityError) as e:
            return self._tool_failed(name, e)
        except BadToolTerms as e:
            return ToolOutcome(f"Error: {name} cannot run: its terms in this run's input are invalid ({e}).", error=True)

    async def _run_activity(self, spec: ToolSpec, call: ToolCall, arguments: dict[str, Any], limit: int) -> ToolOutcome:
        assert spec.activity is not None
        state = spec.state
        request = ToolRequest(workspace=self.workspace, arguments=arguments, call_id=call.id, observe_limit=limit)
        if state is not None and state.into_request is not None:
            request = state.into_request(self.slot(spec.name, state.model), request)
        result = await workflow.execute_activity(
            spec.name,
            request,
            result_type=ToolResult,
            **scheduled(activity_options(self.profile, spec), activity_summary(spec.name, arguments)),
        )
        if state is not None and state.from_result is not None:
            self.keep(spec.name, state.from_result(self.slot(spec.name, state.model), result))
        after: tuple[Message, ...] = ()
        if result.base64_image:
            after = (user_message(agent_notes.TOOL_IMAGE_NOTE, base64_image=result.base64_image),)
        return ToolOutcome(
            produced_text(result, observation_text(result)),
            result.error,
            message=result.message,
            stored_digest=result.stored_digest,
            after=after,
        )

    def _tool_failed(self, name: str, error: BaseException) -> ToolOutcome:
        """The observation of a tool whose activity failed or was cancelled; a
        cancellation of the run itself escapes."""
        if isinstance(error, asyncio.CancelledError) or is_cancellation(error):
            # A cancelled activity's result and the cancellation may come together.
            if not cancel_requested():
                raise error
            return ToolOutcome(fill(agent_notes.TOOL_CANCELLED_OBSERVATION, tool=name), error=True)
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
