"""AgentWorkflow: the think/act loop of one agent, durable step by step.

Layers, top to bottom: `run` (the loop and how it ends) -> `_step` (think, then
act) -> `_act` (one tool call). Everything with I/O is an activity; memory and
state live here and are rebuilt by replay after a crash.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.workflow import ActivityCancellationType
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from activities.llm import REPLY_TOO_LARGE_ERROR, THINK_OPTIONS, TOKEN_LIMIT_ERROR
    from activities.tools import ask_human, planning, terminate
    from activities.tools.registry import TOOLS, activity_summary, schemas
    from activities.workspace import PREPARE_WORKSPACE_OPTIONS, workspace_name_for
    from agent_model.llm_io import ThinkResponse
    from agent_model.memory import Memory
    from agent_model.messages import Message, ToolCall, ToolChoice, tool_message, user_message
    from agent_model.payload import DETAILS_LIMIT, clip, fit, newest_within
    from agent_model.plan import PlanBook, PlanningError, run_command
    from agent_model.profiles import AgentProfile, UnknownAgent, get_profile
    from agent_model.prompting import fill
    from agent_model.run import (
        NOTE_LIMIT,
        OBSERVATION_LIMIT,
        AgentRunInput,
        AgentRunResult,
        AgentStatus,
        HumanAnswer,
        HumanQuestion,
        StepRecord,
        ToolCallRecord,
        fit_result,
        records_page,
    )
    from agent_model.state import AgentState, StopReason
    from agent_model.stuck import is_stuck, reply_signature
    from agent_model.think_context import CONTEXT_MISSING_ERROR, ContextSync
    from agent_model.tool_arguments import parse_arguments
    from agent_model.tool_io import ToolRequest, ToolResult
    from agent_model.usage import TokenUsage
    from prompts import agent_notes
    from workflows import search_attributes


def root_message(error: BaseException) -> str:
    while error.__cause__ is not None:
        error = error.__cause__
    return str(error) or error.__class__.__name__


def is_cancellation(error: BaseException) -> bool:
    while error is not None:
        if isinstance(error, (CancelledError, asyncio.CancelledError)):
            return True
        error = error.__cause__
    return False


class _RunEnded(Exception):
    """Raised inside the loop to end the run with a reason."""

    def __init__(self, reason: StopReason, note: str | None = None) -> None:
        self.reason, self.note = reason, note


@workflow.defn
class AgentWorkflow:
    @workflow.init
    def __init__(self, run: AgentRunInput) -> None:
        self.input = run
        self.profile: AgentProfile | None = None
        self.state = AgentState.IDLE
        self.step = 0
        self.memory = Memory()
        self.records: list[StepRecord] = []
        self.usage = TokenUsage()
        self.directory = ""
        self.shell_cwd: str | None = None
        self.final_answer: str | None = None
        self.pending: HumanQuestion | None = None
        self.answer_text: str | None = None
        self.hinted: set[str] = set()
        self.plans = PlanBook()
        self.workspace = run.workspace or workspace_name_for(workflow.info().workflow_id)
        self.context = ContextSync(key=f"{workflow.info().workflow_id}/{workflow.info().run_id}")

    # ---- the loop -----------------------------------------------------------

    @workflow.run
    async def run(self, run: AgentRunInput) -> AgentRunResult:
        self.state = AgentState.RUNNING
        try:
            self.profile = self._resolve_profile(run)
            self.memory = Memory(max_messages=self.profile.max_memory_messages)
            self.directory = await workflow.execute_activity(
                "prepare_workspace",
                self.workspace,
                result_type=str,
                summary=f"prepare workspace {self.workspace}",
                **PREPARE_WORKSPACE_OPTIONS,
            )
            self.memory.add(user_message(run.task))
            self._publish_details()
            while self.step < self.profile.max_steps:
                self.step += 1
                await self._step()
            raise _RunEnded(
                StopReason.MAX_STEPS, fill(agent_notes.MAX_STEPS_NOTE, max_steps=self.profile.max_steps)
            )
        except _RunEnded as end:
            return self._finish(AgentState.FINISHED, end.reason, end.note)
        except UnknownAgent as e:
            return self._finish(AgentState.ERROR, StopReason.ERROR, str(e))
        except asyncio.CancelledError:
            return self._finish(AgentState.CANCELLED, StopReason.CANCELLED, "the run was cancelled")
        except ActivityError as e:
            if is_cancellation(e):
                return self._finish(AgentState.CANCELLED, StopReason.CANCELLED, "the run was cancelled")
            return self._finish(AgentState.ERROR, StopReason.ERROR, root_message(e))

    def _resolve_profile(self, run: AgentRunInput) -> AgentProfile:
        profile = run.profile or get_profile(run.agent)
        updates: dict = {}
        if run.max_steps is not None:
            updates["max_steps"] = run.max_steps
        if run.tool_choice is not None:
            updates["tool_choice"] = run.tool_choice
        return profile.model_copy(update=updates) if updates else profile

    def _finish(self, state: AgentState, reason: StopReason, note: str | None) -> AgentRunResult:
        self.state = state
        note = clip(note, NOTE_LIMIT) if note else note
        if self.final_answer is None and reason.succeeded:
            self.final_answer = self._last_assistant_text()
        if note and self.records:
            self.records[-1].note = note
        self._publish_details(note)
        return fit_result(
            AgentRunResult(
                agent=self.profile.name if self.profile else self.input.agent,
                state=state,
                stop_reason=reason,
                final_answer=self.final_answer,
                note=note,
                steps_taken=self.step,
                steps=self.records,
                usage=self.usage,
                directory=self.directory or None,
            )
        )

    # ---- one step: think, then act -------------------------------------------

    async def _step(self) -> None:
        profile = self.profile
        assert profile is not None
        if profile.next_step_prompt:
            self.memory.add(user_message(self._fill(profile.next_step_prompt)))

        response = await self._think()
        reply = response.message
        record = StepRecord(step=self.step, thought=reply.content, usage=response.usage)
        if response.finish_reason == "content_filter" and not reply.tool_calls:
            # Asking again gets the same verdict; going on without a reply helps nobody.
            self.records.append(record)
            raise _RunEnded(StopReason.CONTENT_FILTERED, agent_notes.CONTENT_FILTER_NOTE)
        self.memory.add(reply)
        try:
            await self._act_on(reply, record)
        finally:
            # Published whole: followers never see a step that is half done.
            self.records.append(record)
            self._publish_details()
        self._hint_if_stuck(reply)

    async def _act_on(self, reply: Message, record: StepRecord) -> None:
        profile = self.profile
        assert profile is not None
        calls = reply.tool_calls or []
        if not calls:
            if profile.tool_choice == ToolChoice.REQUIRED:
                self.memory.add(user_message(agent_notes.TOOL_REQUIRED_REMINDER))
                return
            if profile.tool_choice == ToolChoice.NONE or profile.finish_on_answer:
                self.final_answer = reply.content
                raise _RunEnded(StopReason.ANSWERED)
            return

        images: list[str] = []
        ended: _RunEnded | None = None
        for index, call in enumerate(calls):
            if ended is not None:
                observation, error = "Not run: the run ended with an earlier call.", True
            elif profile.max_tool_calls_per_step and index >= profile.max_tool_calls_per_step:
                observation = f"Error: only {profile.max_tool_calls_per_step} tool call(s) per reply; this one was not run."
                error = True
            else:
                try:
                    observation, error, image = await self._act(call, index)
                    if call.function.name in profile.special_tools and not error:
                        ended = _RunEnded(StopReason.TERMINATED)
                        self.final_answer = self.final_answer or observation
                except _RunEnded as end:
                    observation, error, image, ended = f"The run ends ({end.reason.value}).", False, None, end
                if image:
                    images.append(image)
            observation = clip(observation, min(profile.max_observe or OBSERVATION_LIMIT, OBSERVATION_LIMIT))
            record.tool_calls.append(
                ToolCallRecord(
                    id=call.id,
                    name=call.function.name,
                    arguments=call.function.arguments,
                    observation=observation,
                    error=error,
                )
            )
            self.memory.add(tool_message(observation, call.id, call.function.name))
        for image in images:
            self.memory.add(user_message("Image produced by the tool above.", base64_image=image))
        if ended is not None:
            raise ended

    async def _think(self) -> ThinkResponse:
        profile = self.profile
        assert profile is not None
        while True:
            request = self.context.build(
                llm=profile.llm,
                system_prompt=self._fill(profile.system_prompt) or None,
                window=self.memory.numbered_window(),
                tools=schemas(profile.tools) or None,
                tool_choice=profile.tool_choice,
            )
            complete = self.context.is_complete(request)
            try:
                response = await workflow.execute_activity(
                    "think",
                    request,
                    result_type=ThinkResponse,
                    summary=f"think {self.step}/{profile.max_steps} · {profile.name}",
                    # A cancelled run ends only once the call is really abandoned.
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    **THINK_OPTIONS,
                )
                break
            except ActivityError as e:
                cause = e.cause
                if isinstance(cause, ApplicationError) and cause.type == CONTEXT_MISSING_ERROR and not complete:
                    self.context.forget()  # that worker lost the window: send all of it
                    continue
                if isinstance(cause, ApplicationError) and cause.type == TOKEN_LIMIT_ERROR:
                    raise _RunEnded(
                        StopReason.TOKEN_LIMIT, fill(agent_notes.TOKEN_LIMIT_NOTE, detail=cause.message)
                    ) from None
                if isinstance(cause, ApplicationError) and cause.type == REPLY_TOO_LARGE_ERROR:
                    raise _RunEnded(
                        StopReason.REPLY_TOO_LARGE, fill(agent_notes.REPLY_TOO_LARGE_NOTE, detail=cause.message)
                    ) from None
                raise
        self.context.confirm(request)
        self.usage = self.usage + response.usage
        return response

    def _hint_if_stuck(self, reply: Message) -> None:
        profile = self.profile
        assert profile is not None
        signature = reply_signature(reply)
        if signature in self.hinted or not is_stuck(self.memory.messages, profile.duplicate_threshold):
            return
        self.hinted.add(signature)
        self.memory.add(user_message(agent_notes.STUCK_HINT))
        if self.records:
            self.records[-1].note = "stuck: the same reply repeated; a hint was added"

    # ---- one tool call ---------------------------------------------------------

    async def _act(self, call: ToolCall, index: int) -> tuple[str, bool, str | None]:
        """(observation, is_error, image) for one tool call. Tool failures of any
        kind are observations; only cancellation escapes."""
        profile = self.profile
        assert profile is not None
        name = call.function.name
        if name not in profile.tools or name not in TOOLS:
            available = ", ".join(profile.tools)
            return f"Error: unknown tool '{name}'. Available tools: {available}.", True, None
        arguments, error = parse_arguments(name, call.function.arguments)
        if arguments is None:
            return error, True, None

        if name == terminate.NAME:
            status = str(arguments.get("status", "success"))
            answer = arguments.get("answer")
            if isinstance(answer, str) and answer.strip():
                self.final_answer = answer
            raise _RunEnded(StopReason.GAVE_UP if status == "failure" else StopReason.TERMINATED)
        if name == ask_human.NAME:
            return await self._ask_human(str(arguments.get("inquire", "")), index), False, None
        if name == planning.NAME:
            try:
                return run_command(self.plans, arguments), False, None
            except PlanningError as e:
                return f"Error: {e}", True, None
        if TOOLS[name].runs_in_workflow:  # create_chat_completion
            return str(arguments.get("response", "")), False, None

        request = ToolRequest(
            workspace=self.workspace,
            arguments=arguments,
            cwd=self.shell_cwd if name == "bash" else None,
        )
        try:
            result = await workflow.execute_activity(
                name,
                request,
                result_type=ToolResult,
                summary=activity_summary(name, arguments),
                # A cancelled run ends only once the tool's processes are dead.
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                **TOOLS[name].activity_options,
            )
        except ActivityError as e:
            if is_cancellation(e):
                raise
            return f"Error: {name} failed: {root_message(e)}", True, None
        if result.cwd:
            self.shell_cwd = result.cwd
        output = result.output or "(no output)"
        return (f"Error: {output}" if result.error else output), result.error, result.base64_image

    async def _ask_human(self, question: str, index: int) -> str:
        profile = self.profile
        assert profile is not None
        if not question.strip():
            return "Error: ask_human needs a non-empty `inquire`."
        self.pending = HumanQuestion(id=f"{self.step}.{index + 1}", text=question)
        self.answer_text = None
        self._publish_details()
        try:
            await workflow.wait_condition(
                lambda: self.answer_text is not None,
                timeout=timedelta(seconds=profile.human_timeout_seconds),
                timeout_summary="waiting for the user's answer",
            )
        except asyncio.TimeoutError:
            return fill(agent_notes.HUMAN_TIMEOUT_OBSERVATION, seconds=int(profile.human_timeout_seconds))
        finally:
            self.pending = None
        return f"The user answered: {self.answer_text}"

    # ---- helpers -----------------------------------------------------------------

    def _fill(self, template: str) -> str:
        plan_status = self.plans.get(None).render() if self.plans.active else "No plan yet."
        return fill(template, directory=self.directory, plan_status=plan_status)

    def _last_assistant_text(self) -> str | None:
        for message in reversed(self.memory.messages):
            if message.role.value == "assistant" and message.content:
                return message.content
        return None

    def _publish_details(self, note: str | None = None) -> None:
        """Current details (markdown, shown in the Web UI) and search attributes."""
        profile = self.profile
        lines = [
            f"**agent** {profile.name if profile else self.input.agent}",
            f"**state** {self.state.value}",
            f"**step** {self.step}/{profile.max_steps if profile else '?'}",
            f"**tokens** {self.usage.total_tokens} "
            f"({self.usage.prompt_tokens} prompt, {self.usage.completion_tokens} completion)",
        ]
        last = self.records[-1].tool_calls[-1] if self.records and self.records[-1].tool_calls else None
        if last is not None:
            outcome = " ".join(last.observation.split())[:120]
            lines.append(f"**last tool** `{last.name}` {'failed' if last.error else 'ok'}: {outcome}")
        if self.pending is not None:
            lines.append(f"**waiting for the user** (question {self.pending.id}): {self.pending.text}")
        if note:
            lines.append(f"**note** {note}")
        workflow.set_current_details(clip("  \n".join(lines), DETAILS_LIMIT))
        search_attributes.upsert(self.state.value, self.step, self._agent_step_interval())

    @staticmethod
    def _agent_step_interval() -> int:
        # Runs started by a version that published AgentStep every step must keep
        # doing so when replayed, or their upsert events no longer match.
        if workflow.patched(search_attributes.AGENT_STEP_INTERVAL_PATCH):
            return search_attributes.AGENT_STEP_INTERVAL
        return 1

    # ---- queries and updates -------------------------------------------------------

    @workflow.query
    def status(self) -> AgentStatus:
        return AgentStatus(
            agent=self.profile.name if self.profile else self.input.agent,
            state=self.state,
            step=self.step,
            max_steps=self.profile.max_steps if self.profile else 0,
            steps_recorded=len(self.records),
            usage=self.usage,
            pending_question=self.pending,
        )

    @workflow.query
    def steps(self, since: int = 0) -> list[StepRecord]:
        """Records from index `since` on, as many as fit in one answer: ask
        again from `since + len(answer)` for the rest."""
        return records_page(self.records, since)

    @workflow.query
    def memory_messages(self) -> list[Message]:
        """The newest messages of the window that fit in one answer."""
        return newest_within(self.memory.messages)

    @workflow.query
    def plan_book(self) -> PlanBook:
        return fit(self.plans)

    @workflow.query
    def pending_question(self) -> HumanQuestion | None:
        return self.pending

    @workflow.update
    async def answer(self, answer: HumanAnswer) -> str:
        self.answer_text = answer.text
        return f"answer to question {answer.question_id} received"

    @answer.validator
    def _validate_answer(self, answer: HumanAnswer) -> None:
        if self.pending is None:
            raise ValueError("no question is waiting for an answer")
        if answer.question_id != self.pending.id:
            raise ValueError(
                f"question {answer.question_id} is not the one waiting (question {self.pending.id})"
            )
        if not answer.text.strip():
            raise ValueError("the answer is empty")
