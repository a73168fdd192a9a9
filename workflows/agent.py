"""AgentWorkflow: the think/act loop of one agent, durable step by step.

Layers, top to bottom: `run` (the loop and how it ends) -> `_step` (think, then
act) -> `_act` (one tool call). Everything with I/O is an activity; memory and
state live here and are rebuilt by replay after a crash.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.workflow import ActivityCancellationType
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from agent_model.activity_specs import (
        PREPARE_WORKSPACE,
        PREPARE_WORKSPACE_CONFIG,
        REPLY_TOO_LARGE_ERROR,
        THINK,
        THINK_CONFIG,
        TOKEN_LIMIT_ERROR,
    )
    from agent_model.llm_io import ThinkResponse
    from agent_model.continuation import (
        carried_plans,
        carried_run_ids,
        compact_records,
        continued_input,
        current_limits,
        should_continue_as_new,
    )
    from agent_model.human import QuestionClosed, QuestionDesk
    from agent_model.memory import Memory
    from agent_model import agent_loop
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
        unknown_tool,
    )
    from agent_model.messages import Message, ToolCall, user_message
    from agent_model.payload import DETAILS_LIMIT, clip, fit, newest_within
    from agent_model.plan import PlanBook
    from agent_model.profiles import AgentProfile, UnknownAgent
    from agent_model.prompting import fill
    from agent_model.run import (
        NOTE_LIMIT,
        AgentRunInput,
        AgentRunResult,
        AgentStatus,
        CarriedState,
        HumanAnswer,
        HumanQuestion,
        StepRecord,
        fit_result,
        observe_limit,
        records_page,
        resolved_profile,
    )
    from agent_model.state import AgentState, StopReason
    from agent_model.think_context import ContextSync
    from agent_model.errors import CONTEXT_MISSING_ERROR, QUESTION_CLOSED_ERROR
    from agent_model.tool_arguments import parse_arguments
    from agent_model.tool_io import ToolRequest, ToolResult, observation_text
    from agent_model.browser import BrowserState
    from agent_model.mcp import (
        CALL_TOOL_ACTIVITY,
        LIST_TOOLS_ACTIVITY,
        MCP_CALL_TOOL,
        MCP_LIST_TOOLS,
        McpCallRequest,
        McpCallResult,
        McpListRequest,
        McpTool,
        McpToolList,
        schema_for,
    )
    from prompts import mcp as mcp_words
    from agent_model.tool_spec import RunEnds, ToolCallContext
    from agent_model.workspace_names import workspace_name_for
    from agent_model.usage import TokenUsage
    from prompts import agent_notes
    from tools import TOOLS, activity_summary, schemas
    from tools.browser_use import close_session
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

    def __init__(self, reason: StopReason, note: str | None = None, state: AgentState = AgentState.FINISHED) -> None:
        self.reason, self.note, self.state = reason, note, state


class _Cancelled(Exception):
    """Raised inside the loop once a requested cancellation stops the run."""


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
        self.note: str | None = None
        self.desk = QuestionDesk()
        self.empty_replies = 0
        """Empty replies in a row."""
        self.hinted: set[str] = set()
        self.plans = PlanBook()
        self.browser = BrowserState()
        """The run's browser (tools/browser_use.py): tabs, and the worker that holds the live page."""
        self._mcp_tools: list[McpTool] = []
        self._mcp_definitions: list[dict[str, Any]] = []
        """The function definitions of _mcp_tools, built when they are assigned."""
        self._mcp_stale = False
        """A server said its tools changed: list them again before the next think."""
        self._call_index = 0
        """Index in its reply of the tool call being handled in the workflow."""
        self._call_id = ""
        self._observe_limit = 0
        self.workspace = run.workspace or workspace_name_for(workflow.info().workflow_id)
        self.context = ContextSync(key=f"{workflow.info().workflow_id}/{workflow.info().run_id}")
        self.steps_before = 0
        """Steps taken by earlier executions of this run (continue-as-new)."""
        self.earlier_runs: list[str] = []
        self.limits = run.continuation or current_limits()
        """Continue-as-new thresholds: the run's own, or (older inputs) this code's."""
        if run.carried is not None:
            self._resume(run.carried)

    @property
    def mcp_tools(self) -> list[McpTool]:
        """The tools of the run's MCP servers, as the model was last shown them."""
        return self._mcp_tools

    @mcp_tools.setter
    def mcp_tools(self, tools: list[McpTool]) -> None:
        # Every think sends the definitions: build them once per listing.
        self._mcp_tools = tools
        self._mcp_definitions = [schema_for(tool) for tool in tools]

    def _resume(self, carried: CarriedState) -> None:
        """Take up where the previous execution of this run stopped."""
        self.profile = carried.profile
        self.directory = carried.directory
        self.step = self.steps_before = carried.step
        self.memory = carried.memory
        self.context = carried.context
        self.plans = carried.plans
        self.usage = carried.usage
        self.shell_cwd = carried.shell_cwd
        self.hinted = set(carried.hinted)
        self.empty_replies = carried.empty_replies
        self.records = carried.records
        self.earlier_runs = carried.earlier_runs
        self.browser = carried.browser
        self.mcp_tools = carried.mcp_tools
        self._mcp_stale = carried.mcp_stale

    # ---- the loop -----------------------------------------------------------

    @workflow.run
    async def run(self, run: AgentRunInput) -> AgentRunResult:
        self.state = AgentState.RUNNING
        try:
            if run.carried is None:
                # As the starter resolved it; older inputs name a built-in one.
                self.profile = resolved_profile(run)
                self.memory = Memory.for_profile(self.profile)
                self.directory = await workflow.execute_activity(
                    PREPARE_WORKSPACE,
                    self.workspace,
                    result_type=str,
                    summary=f"prepare workspace {self.workspace}",
                    **PREPARE_WORKSPACE_CONFIG.options(),
                )
                self.memory.add(user_message(run.task))
                if self.profile.mcp_servers:
                    await self._list_mcp_tools()
            self._publish_details()
            while self.step < self.profile.max_steps:
                if self._cancel_ends_run():
                    raise _Cancelled()
                if self._time_to_continue_as_new(run):
                    await self._continue_as_new(run)
                self.step += 1
                await self._step()
            raise _RunEnded(
                StopReason.MAX_STEPS, fill(agent_notes.MAX_STEPS_NOTE, max_steps=self.profile.max_steps)
            )
        except _RunEnded as end:
            ending = (end.state, end.reason, end.note)
        except UnknownAgent as e:
            ending = (AgentState.ERROR, StopReason.ERROR, str(e))
        except (_Cancelled, asyncio.CancelledError):
            ending = (AgentState.CANCELLED, StopReason.CANCELLED, agent_notes.CANCELLED_NOTE)
        except ActivityError as e:
            if is_cancellation(e):
                ending = (AgentState.CANCELLED, StopReason.CANCELLED, agent_notes.CANCELLED_NOTE)
            else:
                ending = (AgentState.ERROR, StopReason.ERROR, root_message(e))
        # Only runs that opened a browser schedule this, so older histories replay.
        await close_session(self.browser)
        if self._cancel_ends_run():
            # Whatever else ended the loop, the run was asked to stop. The state
            # stays readable by queries, which replay the closed run.
            self._finish(AgentState.CANCELLED, StopReason.CANCELLED, agent_notes.CANCELLED_NOTE)
            raise CancelledError(agent_notes.CANCELLED_NOTE)
        return self._finish(*ending)

    def _time_to_continue_as_new(self, run: AgentRunInput) -> bool:
        info = workflow.info()
        return should_continue_as_new(
            suggested=info.is_continue_as_new_suggested(),
            history_events=info.get_current_history_length(),
            history_bytes=info.get_current_history_size(),
            steps_this_run=self.step - self.steps_before,
            steps_per_run=run.steps_per_run,
            limits=self.limits,
        )

    async def _continue_as_new(self, run: AgentRunInput) -> None:
        """Go on in a new execution with this one's state (raises ContinueAsNewError)."""
        assert self.profile is not None
        # An answer being handled must finish here, not be lost with this execution.
        await workflow.wait_condition(workflow.all_handlers_finished)
        carried = CarriedState(
            profile=self.profile,
            directory=self.directory,
            step=self.step,
            memory=self.memory,
            context=self.context,
            plans=carried_plans(self.plans, self.limits),
            usage=self.usage,
            shell_cwd=self.shell_cwd,
            hinted=sorted(self.hinted),
            empty_replies=self.empty_replies,
            records=compact_records(self.records, self.limits),
            earlier_runs=carried_run_ids(self.earlier_runs, workflow.info().run_id, self.limits),
            browser=self.browser,
            mcp_tools=self.mcp_tools,
            mcp_stale=self._mcp_stale,
        )
        workflow.continue_as_new(
            continued_input(run, carried, self.workspace, self.limits),
            # With worker versioning, a pinned run moves to the current version
            # here: the new execution starts from the carried state, with no
            # history for the new code to replay (README, "Deploying new code").
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    def _cancel_ends_run(self) -> bool:
        """True once a cancellation was requested: nothing new starts, even if
        the call in flight completes, and the run ends CANCELED. Remembered by
        the SDK even when the call in flight then completed."""
        return workflow.cancellation_reason() is not None

    def _finish(self, state: AgentState, reason: StopReason, note: str | None) -> AgentRunResult:
        self.state = state
        note = clip(note, NOTE_LIMIT) if note else note
        self.note = note
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
        if self._mcp_stale:
            await self._list_mcp_tools()
        prompt = next_step_message(profile, self.directory, self.plans, self.browser)
        if prompt is not None:
            self.memory.add(prompt)

        response = await self._think()
        reply = read_reply(response, profile)
        record = StepRecord(step=self.step, thought=response.message.content, usage=response.usage)
        if reply.kind == ReplyKind.CONTENT_FILTERED:
            self.records.append(record)
            raise _RunEnded(StopReason.CONTENT_FILTERED, agent_notes.CONTENT_FILTER_NOTE)
        if reply.kind == ReplyKind.EMPTY:
            self._empty_reply(record, response.finish_reason)
            return
        self.empty_replies = 0
        if reply.dropped:
            record.note = dropped_calls_note(reply)
        self._remember_produced(reply.message, response.stored_digest)
        try:
            await self._act_on(reply, record)
        finally:
            # Published whole: followers never see a step that is half done.
            self.records.append(record)
            self._publish_details()
        if reply.dropped:
            self.memory.add(dropped_calls_reminder(reply))
        self._hint_if_stuck(reply.message)

    def _empty_reply(self, record: StepRecord, finish_reason: str | None) -> None:
        """No answer and no action: remind the model once; a second empty reply
        in a row ends the run in ERROR. The reply itself stays out of memory
        (an assistant message without content or tool calls is invalid)."""
        self.empty_replies += 1
        self.records.append(record)
        if self.empty_replies > 1:
            raise _RunEnded(
                StopReason.EMPTY_REPLY,
                fill(agent_notes.EMPTY_REPLY_NOTE, finish_reason=finish_reason or "none"),
                AgentState.ERROR,
            )
        record.note = agent_notes.EMPTY_REPLY_STEP_NOTE
        self.memory.add(user_message(agent_notes.EMPTY_REPLY_REMINDER))
        self._publish_details()

    async def _act_on(self, reply: Reply, record: StepRecord) -> None:
        profile = self.profile
        assert profile is not None
        if reply.kind != ReplyKind.ACT:
            if self._cancel_ends_run():
                raise _Cancelled()
            if reply.kind == ReplyKind.TOOL_REQUIRED:
                self.memory.add(user_message(agent_notes.TOOL_REQUIRED_REMINDER))
            elif reply.kind == ReplyKind.ANSWER:
                self.final_answer = reply.message.content
                raise _RunEnded(StopReason.ANSWERED)
            return
        calls = reply.message.tool_calls or []

        images: list[Message] = []
        ended: _RunEnded | _Cancelled | None = None
        limit = observe_limit(profile)
        for index, call in enumerate(calls):
            stored_digest = None
            if ended is None and self._cancel_ends_run():
                ended = _Cancelled()
            if isinstance(ended, _Cancelled):
                observation, error = agent_notes.NOT_RUN_CANCELLED, True
            elif ended is not None:
                observation, error = "Not run: the run ended with an earlier call.", True
            elif (refusal := over_the_per_reply_limit(profile, index)) is not None:
                observation, error = refusal, True
            else:
                try:
                    observation, error, image, stored_digest = await self._act(call, index, limit)
                    if call.function.name in profile.special_tools and not error:
                        ended = _RunEnded(StopReason.TERMINATED)
                        self.final_answer = self.final_answer or observation
                except _RunEnded as end:
                    observation, error, image, ended = f"The run ends ({end.reason.value}).", False, None, end
                if image is not None:
                    images.append(image)
            message, call_record = observed(call, observation, error, limit)
            record.tool_calls.append(call_record)
            self._remember_produced(message, stored_digest)
        for image in images:
            self.memory.add(image)
        if ended is None and self._cancel_ends_run():
            ended = _Cancelled()
        if ended is not None:
            raise ended

    async def _think(self) -> ThinkResponse:
        profile = self.profile
        assert profile is not None
        while True:
            if self._cancel_ends_run():
                raise _Cancelled()
            system_prompt = agent_loop.system_prompt(profile, self.directory, self.plans)
            tools = [*schemas(profile.tools), *self._mcp_definitions] or None
            # A complete resend of this request must fit in one payload.
            self.memory.reserve(system_prompt, tools)
            window = self.memory.numbered_window()
            request = self.context.build(
                llm=profile.llm,
                system_prompt=system_prompt,
                window=window,
                tools=tools,
                tool_choice=profile.tool_choice,
            )
            if any(message.image_file for _, message in window):
                request.workspace = self.workspace  # where the worker finds the screenshots
            complete = self.context.is_complete(request)
            try:
                response = await workflow.execute_activity(
                    THINK,
                    request,
                    result_type=ThinkResponse,
                    summary=f"think {self.step}/{profile.max_steps} · {profile.name}",
                    # A cancelled run ends only once the call is really abandoned.
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    **THINK_CONFIG.options(),
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
        signature = stuck_hint_due(self.memory, reply, self.hinted, profile.duplicate_threshold)
        if signature is None:
            return
        self.hinted.add(signature)
        self.memory.add(user_message(agent_notes.STUCK_HINT))
        if self.records:
            self.records[-1].note = "stuck: the same reply repeated; a hint was added"

    # ---- one tool call ---------------------------------------------------------

    async def _act(self, call: ToolCall, index: int, limit: int) -> tuple[str, bool, Message | None, str | None]:
        """(observation, is_error, image message, stored digest) for one tool
        call. Tool failures of any kind are observations; only cancellation escapes."""
        profile = self.profile
        assert profile is not None
        name = call.function.name
        mcp_tool = next((tool for tool in self.mcp_tools if tool.function_name == name), None)
        unknown = None if mcp_tool is not None else unknown_tool(profile, name, TOOLS)
        if unknown is not None:
            return unknown, True, None, None
        arguments, error = parse_arguments(name, call.function.arguments)
        if arguments is None:
            return error, True, None, None
        if mcp_tool is not None:
            return await self._call_mcp(mcp_tool, call, arguments, limit)

        spec = TOOLS[name]
        if spec.handler is not None:
            self._call_index, self._call_id, self._observe_limit = index, call.id, limit
            try:
                outcome = await spec.handler(self, arguments)
            except RunEnds as end:
                if end.answer is not None:
                    self.final_answer = end.answer
                raise _RunEnded(StopReason.GAVE_UP if end.gave_up else StopReason.TERMINATED) from None
            except (asyncio.CancelledError, ActivityError) as e:  # from the activities a handler schedules
                return self._tool_failed(name, e)
            image = (
                user_message(agent_notes.SCREENSHOT_NOTE, image_file=outcome.image_file)
                if outcome.image_file else None
            )
            return outcome.observation, outcome.error, image, outcome.stored_digest

        request = ToolRequest(
            workspace=self.workspace,
            arguments=arguments,
            cwd=self.shell_cwd if name == "bash" else None,
            call_id=call.id,
            observe_limit=limit,
        )
        try:
            result = await workflow.execute_activity(
                name,
                request,
                result_type=ToolResult,
                summary=activity_summary(name, arguments),
                # A cancelled run ends only once the tool's processes are dead.
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                **spec.activity.options(),
            )
        except (asyncio.CancelledError, ActivityError) as e:
            return self._tool_failed(name, e)
        if result.cwd:
            self.shell_cwd = result.cwd
        image = (
            user_message("Image produced by the tool above.", base64_image=result.base64_image)
            if result.base64_image else None
        )
        return observation_text(result), result.error, image, result.stored_digest

    async def _call_mcp(
        self, tool: McpTool, call: ToolCall, arguments: dict[str, Any], limit: int
    ) -> tuple[str, bool, None, str | None]:
        """One call of an MCP server's tool, as an activity: the tool's own
        errors are observations, a lost server is retried by the activity."""
        request = McpCallRequest(
            server=tool.server, tool=tool.name, arguments=arguments, call_id=call.id, observe_limit=limit,
            function_name=tool.function_name,
        )
        try:
            result = await workflow.execute_activity(
                CALL_TOOL_ACTIVITY,
                request,
                result_type=McpCallResult,
                summary=f"{tool.server}: {tool.name}"[:80],
                **MCP_CALL_TOOL.options(),
            )
        except (asyncio.CancelledError, ActivityError) as e:
            return self._tool_failed(call.function.name, e)
        if result.tools_changed:
            self._mcp_stale = True
        return observation_text(result), result.error, None, result.stored_digest

    async def _list_mcp_tools(self) -> None:
        """The tools of the profile's MCP servers, listed by a worker that has them."""
        profile = self.profile
        assert profile is not None
        servers = [] if "*" in profile.mcp_servers else list(profile.mcp_servers)
        listed = await workflow.execute_activity(
            LIST_TOOLS_ACTIVITY,
            McpListRequest(servers=servers),
            result_type=McpToolList,
            summary="list the MCP servers' tools",
            **MCP_LIST_TOOLS.options(),
        )
        changed = self._mcp_stale
        self.mcp_tools, self._mcp_stale = listed.tools, False
        if listed.problems:
            self.memory.add(user_message(fill(mcp_words.SERVERS_UNREACHABLE, problems="\n".join(listed.problems))))
        elif changed:
            self.memory.add(user_message(mcp_words.TOOLS_CHANGED))

    def _tool_failed(self, name: str, error: BaseException) -> tuple[str, bool, None, None]:
        """The observation of a tool whose activity failed or was cancelled; a
        cancellation of the run itself escapes."""
        if isinstance(error, asyncio.CancelledError) or is_cancellation(error):
            # A cancelled activity's result and the cancellation may come together.
            if not self._cancel_ends_run():
                raise error
            return fill(agent_notes.TOOL_CANCELLED_OBSERVATION, tool=name), True, None, None
        return f"Error: {name} failed: {root_message(error)}", True, None, None

    @property
    def call(self) -> ToolCallContext:
        """For tools that run in the workflow (agent_model/tool_spec.py WorkflowTools)."""
        assert self.profile is not None
        return ToolCallContext(
            workspace=self.workspace,
            step=self.step,
            index=self._call_index,
            call_id=self._call_id,
            llm=self.profile.llm,
            observe_limit=self._observe_limit,
        )

    def spent(self, usage: TokenUsage) -> None:
        self.usage = self.usage + usage

    async def ask_user(self, question: str) -> str:
        """For the ask_human tool (agent_model/tool_spec.py WorkflowTools)."""
        return await self._ask_human(question, self._call_index)

    async def _ask_human(self, question: str, index: int) -> str:
        profile = self.profile
        assert profile is not None
        seconds = int(profile.human_timeout_seconds)
        self.desk.ask(HumanQuestion(id=f"{self.step}.{index + 1}", text=question))
        self._publish_details()
        try:
            await workflow.wait_condition(
                lambda: self.desk.answer is not None,
                timeout=timedelta(seconds=profile.human_timeout_seconds),
                timeout_summary="waiting for the user's answer",
            )
        except asyncio.TimeoutError:
            # An answer accepted in this same activation was confirmed to its
            # sender already, so it is the outcome; any later one is refused.
            answer = self.desk.close(fill(agent_notes.HUMAN_TIMEOUT_REASON, seconds=seconds))
            if answer is None:
                return fill(agent_notes.HUMAN_TIMEOUT_OBSERVATION, seconds=seconds)
        except asyncio.CancelledError:
            answer = self.desk.close(agent_notes.CANCELLED_NOTE)
            if not self._cancel_ends_run():
                raise
            if answer is None:
                return agent_notes.HUMAN_CANCELLED_OBSERVATION
        return f"The user answered: {self.desk.answer}"

    # ---- helpers -----------------------------------------------------------------

    def _remember_produced(self, message: Message, stored_digest: str | None) -> None:
        """Adds an activity's message to memory; if its worker stored it, the
        next think names it instead of carrying it."""
        self.context.produced(self.memory.add(message), message, stored_digest)


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
        if self.steps_before:
            lines.append(
                f"**continued** after step {self.steps_before}, in execution {len(self.earlier_runs) + 1} of this run"
            )
        if self.desk.pending is not None:
            lines.append(f"**waiting for the user** (question {self.desk.pending.id}): {self.desk.pending.text}")
        if note:
            lines.append(f"**note** {note}")
        workflow.set_current_details(clip("  \n".join(lines), DETAILS_LIMIT))
        search_attributes.upsert(self.state.value, self.step, search_attributes.AGENT_STEP_INTERVAL)

    # ---- queries and updates -------------------------------------------------------

    @workflow.query
    def status(self) -> AgentStatus:
        return AgentStatus(
            agent=self.profile.name if self.profile else self.input.agent,
            state=self.state,
            step=self.step,
            max_steps=self.profile.max_steps if self.profile else 0,
            steps_recorded=self.records[-1].step if self.records else 0,
            usage=self.usage,
            pending_question=self.desk.pending,
            note=self.note,
        )

    @workflow.query
    def steps(self, since: int = 0) -> list[StepRecord]:
        """Records of the steps after step `since`, as many as fit in one
        answer: ask again from the last one's step for the rest. A long run
        keeps only its newest records (agent_model/continuation.py)."""
        first = self.records[0].step if self.records else 1
        return records_page(self.records, max(0, since - first + 1))

    @workflow.query
    def memory_messages(self) -> list[Message]:
        """The newest messages of the window that fit in one answer."""
        return newest_within(self.memory.messages)

    @workflow.query
    def plan_book(self) -> PlanBook:
        return fit(self.plans)

    @workflow.query
    def pending_question(self) -> HumanQuestion | None:
        return self.desk.pending

    @workflow.update
    async def answer(self, answer: HumanAnswer) -> str:
        try:
            return self.desk.accept(answer)
        except QuestionClosed as e:  # the validator, in the same step, refuses these first
            raise ApplicationError(str(e), type=QUESTION_CLOSED_ERROR, non_retryable=True) from None

    @answer.validator
    def _validate_answer(self, answer: HumanAnswer) -> None:
        refusal = self.desk.refusal(answer)
        if refusal is not None:
            raise ValueError(refusal)
