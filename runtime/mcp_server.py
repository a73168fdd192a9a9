"""durable-manus as an MCP server: `python starter.py mcp-server`.

Any MCP client (a desktop assistant, an IDE) can start agent runs and
planning flows here, follow them, answer their questions, cancel them and
read their results. The tools only talk to Temporal: a run is a workflow that
outlives this server, the client and the conversation; a worker carries it
out (`python worker.py`, or this server's own with --with-worker).

The transport is stdio unless --http HOST:PORT asks for streamable HTTP (at
http://HOST:PORT/mcp). In stdio mode stdout is the protocol channel, so
everything else this process says goes to stderr. Over HTTP every request
must carry the server's bearer token (runtime/mcp_token.py); stdio needs
none, since only the process that started the server can speak on it.

Each tool's failure (no such run, no server to reach, a refused answer) is a
tool error of one line; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Awaitable, Callable, Literal

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowFailureError

from agent_model.budget import MAX_COST_CEILING, MAX_TOKENS_CEILING
from agent_model.flow import DEFAULT_FLOW_TIMEOUT_SECONDS, FINALIZE_RESERVE_SECONDS, PlanningFlowResult
from agent_model.plan import Plan
from agent_model.profiles import BUILTIN_PROFILES
from agent_model.run import AgentRunResult, AgentStatus, HumanQuestion
from agent_model.session import MESSAGE_LIMIT
from agent_model.state import AgentState
from config.settings import Settings, load_settings
from runtime import follow_up, run_control
from runtime.web_ui_link import run_link
from runtime.failure_line import failure_line as shared_failure_line
from runtime.in_process_worker import InProcessWorker
from runtime.listen_probe import listen_problem
from runtime.mcp_http_record import recorded_while_serving
from runtime.mcp_token import RequireBearer, load_or_create_token, token_path
from runtime.run_control import StepsPage, one_line
from runtime.run_list import LIST_LIMIT, recent_runs
from runtime.run_start import (
    check_task_fits, flow_llms, report_worker_for_detached, run_budget, run_llms, start_agent_run, start_planning_flow,
)
from runtime.server_choice import connect_for
from runtime.user_errors import RunControlError, RunEnded, UsageError
from workflows import search_attributes
from agent_model.approval_desk import REASON_CHARS, ApprovalAction, PendingApproval
from runtime.approvals import deliver_decision, who_decides
from workflows.agent import AgentWorkflow


SERVER_NAME = "durable-manus"
TASK_LIMIT = 100_000
"""Characters of a task."""
ID_LIMIT = 200
"""Characters of a run id."""
TEXT_LIMIT = 100_000
"""Characters of an answer."""
MAX_STEPS_LIMIT = 10_000
"""Bounds of a client's step and budget arguments (agent_model/budget.py for tokens and cost):
far above any real run, so only nonsense is refused."""
MaxTokens = Annotated[
    int | None,
    Field(ge=1, le=MAX_TOKENS_CEILING, description="end the run gracefully once it has used this many tokens"),
]
MaxCost = Annotated[
    float | None,
    Field(
        gt=0, le=MAX_COST_CEILING, allow_inf_nan=False,
        description="end the run gracefully once it has cost this many US dollars (at the config's LLM prices)",
    ),
]
MAX_FLOW_AGENTS = 8
MAX_FLOW_TIMEOUT_SECONDS = 7 * 24 * 3600.0
MAX_RESULT_WAIT_SECONDS = 300
LIST_MAX = 100
STEPS_PAGE_BYTES = 64 * 1024
"""JSON bytes of step records one run_steps answer carries (a query answer may
hold a megabyte, too much for a model's context at once)."""
CANCEL_WAIT_SECONDS = 10.0
"""How long cancel_run waits for the run to end before saying it has not yet."""

INSTRUCTIONS = """\
Durable agent runs on Temporal. start_run (one agent) or start_flow (a plan
carried out step by step) returns a run id at once; the run goes on without
this conversation. Follow it with run_status and run_steps, answer with
answer_question when run_status shows a pending question, decide a gated
tool call with decide_call when it shows a pending approval, wait for the end
with run_result (wait_seconds), stop it with cancel_run. send_message goes on
with a run (finished or idle) in the same conversation, as its next turn. list_runs shows the
recent runs. A worker process must be running for runs to make progress:
start_run says whether one is."""

if TYPE_CHECKING:
    AgentName = str
else:  # built at run time, so the tools' schemas list the profiles as an enum
    AgentName = Literal[tuple(BUILTIN_PROFILES)]
RunId = Annotated[
    str, Field(min_length=1, max_length=ID_LIMIT, description="the run id that start_run, start_flow or list_runs gave")
]
Task = Annotated[
    str, Field(min_length=1, max_length=TASK_LIMIT, description="what the agent should do, in plain words")
]


class Runs:
    """What the tools share: the settings, and the Temporal client once one
    connects (at the first tool that needs it, so that the server starts and
    lists its tools even while Temporal is down)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: Client | None = None
        self._connecting = asyncio.Lock()

    async def client(self, may_start_server: bool = False) -> Client:
        """The client; starting a run may start the embedded Temporal server,
        as `starter.py run` does, reading runs never does."""
        async with self._connecting:
            if self._client is None:
                self._client = await connect_for("mcp-server", may_start_server, sys.stderr, self.settings.encryption)
            return self._client


# ---- errors ----------------------------------------------------------------------------

def failure_line(error: Exception) -> str:
    return shared_failure_line(error, "an MCP tool")


def one_line_errors(tool: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """The tool, with every failure turned into a one-line tool error."""

    @functools.wraps(tool)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return await tool(*args, **kwargs)
        except ToolError:
            raise
        except Exception as e:
            raise ToolError(failure_line(e)) from None

    return guarded


def sendable(text: str, what: str) -> str:
    """The text, unless Temporal could not carry it (a lone surrogate is valid
    JSON but not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"{what} is not valid UTF-8 text") from None
    return text


def run_id_of(value: str) -> str:
    value = sendable(value, "the run id").strip()
    if not value:
        raise ToolError("the run id is empty")
    return value


def task_of(value: str) -> str:
    value = sendable(value, "the task")
    if not value.strip():
        raise ToolError("the task is empty")
    return value


# ---- what the tools say ----------------------------------------------------------------


def question_of(question: HumanQuestion | None, run_id: str) -> dict[str, str] | None:
    return None if question is None else {"id": question.id, "text": question.text, "run_id": run_id}


def approval_of(waiting: PendingApproval | None, run_id: str) -> dict[str, str] | None:
    if waiting is None:
        return None
    return {"id": waiting.id, "tool": waiting.tool, "arguments": waiting.arguments, "reason": waiting.reason, "run_id": run_id}


def agent_result_fields(result: AgentRunResult) -> dict[str, Any]:
    return {
        "kind": "agent",
        "agent": result.agent,
        "state": result.state.value,
        "stop_reason": result.stop_reason.value,
        "succeeded": result.succeeded,
        "steps_taken": result.steps_taken,
        "tokens": result.usage.total_tokens,
        "cost_usd": result.cost,
        "final_answer": result.final_answer,
        "note": result.note,
        "workspace_directory": result.directory,
    }


def step_runs(plan: Plan) -> list[dict[str, Any]]:
    return [
        {"step": i + 1, "status": s.status.value, "executor": s.executor, "run_id": s.run_id}
        for i, s in enumerate(plan.steps)
        if s.run_id
    ]


def flow_result_fields(result: PlanningFlowResult) -> dict[str, Any]:
    return {
        "kind": "flow",
        "state": result.outcome.value,
        "succeeded": result.succeeded,
        "replans": result.replans,
        "tokens": result.usage.total_tokens,
        "cost_usd": result.cost,
        "summary": result.summary,
        "note": result.note,
        "plan": result.plan.render(),
        "step_runs": step_runs(result.plan),
    }


def result_fields(result: AgentRunResult | PlanningFlowResult) -> dict[str, Any]:
    return flow_result_fields(result) if isinstance(result, PlanningFlowResult) else agent_result_fields(result)


def kind_of(description: WorkflowExecutionDescription) -> str:
    return "flow" if run_control.is_flow(description) else "agent"


async def ended_fields(
    client: Client,
    run_id: str,
    description: WorkflowExecutionDescription,
    failure: WorkflowFailureError | None = None,
) -> dict[str, Any]:
    """A closed run: its result, or how it ended without one (`failure`, when
    already known, saves asking for the result again)."""
    if failure is None:
        try:
            return result_fields(await run_control.finished_result(client, run_id, description))
        except RunEnded as e:
            note = str(e)
    else:
        note = await run_control.ended_line(client, run_id, failure, description)
    step = description.typed_search_attributes.get(search_attributes.AGENT_STEP)
    return {"kind": kind_of(description), "state": run_control.closed_state(description), "step": step, "note": note}


async def running_agent_status(
    client: Client, run_id: str, description: WorkflowExecutionDescription
) -> dict[str, Any]:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    try:
        status: AgentStatus = await run_control.query(handle, AgentWorkflow.status)
    except RunControlError as e:
        # No worker answered: what the run last published is all there is to say.
        attributes = description.typed_search_attributes
        return {
            "kind": "agent",
            "agent": attributes.get(search_attributes.AGENT_NAME),
            "state": attributes.get(search_attributes.AGENT_STATE) or AgentState.RUNNING.value,
            "step": attributes.get(search_attributes.AGENT_STEP),
            "max_steps": None,
            "pending_question": None,
            "note": str(e),
        }
    return {
        "kind": "agent",
        "agent": status.agent,
        "state": status.state.value,
        "step": status.step,
        "max_steps": status.max_steps,
        "steps_recorded": status.steps_recorded,
        "tokens": status.usage.total_tokens,
        "cost_usd": status.cost,
        "pending_question": question_of(status.pending_question, run_id),
        "pending_approval": approval_of(status.pending_approval, run_id),
        "note": status.note,
    }


async def running_flow_status(client: Client, run_id: str) -> dict[str, Any]:
    try:
        plan: Plan = await run_control.query(client.get_workflow_handle(run_id), "plan", result_type=Plan)
    except RunControlError as e:
        no_worker: dict[str, Any] = {"plan": None, "step_runs": [], "pending_question": None, "note": str(e)}
        return {"kind": "flow", "state": AgentState.RUNNING.value, **no_worker}
    pending = None
    working = run_control.working_step(plan)
    if working is not None:
        try:
            handle, question = await run_control.waiting_question(client, working)
            pending = question_of(question, handle.id)
        except RunControlError:
            pass  # it asks nothing, or no worker answers for it
    return {
        "kind": "flow",
        "state": AgentState.RUNNING.value,
        "plan": plan.render(),
        "step_runs": step_runs(plan),
        "pending_question": pending,
        "note": None,
    }


def steps_answer(run_id: str, since: int, page: StepsPage) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "since": since,
        "steps": [record.model_dump(mode="json") for record in page.records],
        "next_since": page.records[-1].step if page.records else since,
        "more": page.more,
    }


# ---- the tools -------------------------------------------------------------------------


class RunTools:
    """The MCP tools, over one Runs."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    async def _started(self, client: Client, handle: Any, kind: str) -> dict[str, Any]:
        report = io.StringIO()
        taken = await report_worker_for_detached(client, self.runs.settings, handle, report)
        return {
            "run_id": handle.id,
            "kind": kind,
            "web_ui": await run_link(client, handle),
            "worker_running": taken,
            "worker": one_line(report.getvalue()),
        }

    async def start_run(
        self,
        task: Task,
        agent: Annotated[AgentName, Field(description="the agent profile; manus is the general one")] = "manus",
        max_steps: Annotated[
            int | None, Field(ge=1, le=MAX_STEPS_LIMIT, description="override the agent's step limit")
        ] = None,
        max_tokens: MaxTokens = None,
        max_cost: MaxCost = None,
    ) -> dict[str, Any]:
        """Start a durable agent run on a task and return its run id and Web UI
        link at once, without waiting for it. It says whether a worker is
        running to carry the run out; without one the run waits at step 0."""
        task = task_of(task)
        check_task_fits(self.runs.settings, task, (agent,))
        run_budget(self.runs.settings, run_llms(agent, None), max_tokens, max_cost)
        client = await self.runs.client(may_start_server=True)
        handle = await start_agent_run(
            client, self.runs.settings, task, agent=agent, max_steps=max_steps, steps_per_run=None, run_id=None,
            max_tokens=max_tokens, max_cost=max_cost,
        )
        return await self._started(client, handle, "agent")

    async def start_flow(
        self,
        task: Task,
        agents: Annotated[
            list[AgentName],
            Field(
                min_length=1, max_length=MAX_FLOW_AGENTS,
                description="the agents that carry out the plan's steps; the first takes untagged steps",
            ),
        ] = ["manus"],  # noqa: B006 (pydantic copies defaults)
        timeout_seconds: Annotated[
            float,
            Field(
                gt=FINALIZE_RESERVE_SECONDS, le=MAX_FLOW_TIMEOUT_SECONDS,
                description="the whole flow's time bound in seconds",
            ),
        ] = DEFAULT_FLOW_TIMEOUT_SECONDS,
        max_tokens: MaxTokens = None,
        max_cost: MaxCost = None,
    ) -> dict[str, Any]:
        """Start a durable planning flow: a plan is made for the task, then each
        step is carried out by an agent run of its own. Returns the flow's run
        id and Web UI link at once, and whether a worker is running."""
        task = task_of(task)
        chosen = tuple(dict.fromkeys(agents))
        check_task_fits(self.runs.settings, task, chosen)
        run_budget(self.runs.settings, flow_llms(chosen, None), max_tokens, max_cost)
        client = await self.runs.client(may_start_server=True)
        handle = await start_planning_flow(
            client, self.runs.settings, task, agents=chosen, timeout=timeout_seconds,
            max_steps=None, steps_per_run=None, run_id=None, max_tokens=max_tokens, max_cost=max_cost,
        )
        return await self._started(client, handle, "flow")

    async def run_status(self, run_id: RunId) -> dict[str, Any]:
        """A run's state: for an agent run its step, step limit and the question
        it waits on (pending_question, answer it with answer_question); for a
        flow its plan and the runs of its steps; once ended, its outcome."""
        run_id = run_id_of(run_id)
        client = await self.runs.client()
        description = await run_control.describe(client, run_id)
        if not run_control.is_running(description):
            fields = await ended_fields(client, run_id, description)
        elif run_control.is_flow(description):
            fields = await running_flow_status(client, run_id)
        else:
            fields = await running_agent_status(client, run_id, description)
        return {"run_id": run_id, **fields}

    async def run_steps(
        self,
        run_id: RunId,
        since: Annotated[
            int, Field(ge=0, le=10**9, description="return the steps after this step number (0: from the first)")
        ] = 0,
    ) -> dict[str, Any]:
        """An agent run's step records after step `since`: the model's thought,
        each tool call with its observation, tokens. One bounded page: when
        `more` is true, ask again with since=next_since."""
        run_id = run_id_of(run_id)
        client = await self.runs.client()
        page = await run_control.steps_page(client, run_id, since, limit=STEPS_PAGE_BYTES)
        return steps_answer(run_id, since, page)

    async def answer_question(
        self,
        run_id: RunId,
        text: Annotated[str, Field(min_length=1, max_length=TEXT_LIMIT, description="the answer")],
    ) -> dict[str, Any]:
        """Answer the question a run waits on (run_status shows it as
        pending_question). For a flow, the question of its running step."""
        run_id = run_id_of(run_id)
        text = sendable(text, "the answer")
        client = await self.runs.client()
        answered, question = await run_control.deliver_answer(client, run_id, text)
        return {"accepted": True, "run_id": answered, "question_id": question.id, "question": question.text}

    async def decide_call(
        self,
        run_id: RunId,
        action: Annotated[
            Literal["approve", "reject", "edit"],
            Field(description="approve, reject (the agent is told the reason) or edit (approve with new arguments)"),
        ],
        call_id: Annotated[
            str | None, Field(max_length=20, description="the call's id (pending_approval.id); default: the one waiting")
        ] = None,
        reason: Annotated[str, Field(max_length=REASON_CHARS, description="reject: why")] = "",
        arguments: Annotated[
            str | None, Field(max_length=TEXT_LIMIT, description="edit: the arguments to run the call with, a JSON object")
        ] = None,
    ) -> dict[str, Any]:
        """Decide the tool call a run waits to run (run_status shows it as
        pending_approval, with its arguments and why it is gated). For a flow,
        the call of its running step."""
        run_id = run_id_of(run_id)
        client = await self.runs.client()
        decided, waiting = await deliver_decision(
            client, run_id, call_id, ApprovalAction(action), reason=sendable(reason, "the reason"),
            arguments=None if arguments is None else sendable(arguments, "the arguments"),
            decided_by=who_decides("mcp"),
        )
        return {"accepted": True, "run_id": decided, "call_id": call_id or waiting.id, "action": action}

    async def send_message(
        self,
        run_id: RunId,
        text: Annotated[str, Field(min_length=1, max_length=MESSAGE_LIMIT, description="the follow-up message")],
        wait_seconds: Annotated[
            float, Field(ge=0, le=MAX_RESULT_WAIT_SECONDS, description="wait up to this long for the turn's answer")
        ] = 30,
    ) -> dict[str, Any]:
        """Send a follow-up to an agent run: it goes on in the same
        conversation (memory, files, plan) as its next turn. An idle session
        starts the turn at once, a working one queues it; a run that ended goes
        on in a new execution. Returns the turn's answer if it came within
        wait_seconds, else that it is working (see run_status, run_steps)."""
        run_id = run_id_of(run_id)
        text = sendable(text, "the message")
        client = await self.runs.client()
        delivery = await follow_up.deliver(client, self.runs.settings, run_id, text)
        outcome = await follow_up.turn_within(delivery, wait_seconds)
        answer: dict[str, Any] = {"run_id": run_id, "turn": delivery.turn, "reply": delivery.reply}
        if outcome is None:
            return {**answer, "finished": False, "note": f"turn {delivery.turn} is working; see run_status or run_steps"}
        if isinstance(outcome, AgentRunResult):
            return {**answer, "finished": True, **agent_result_fields(outcome)}
        return {
            **answer, "finished": True, "state": outcome.state.value if outcome.state else None,
            "stop_reason": outcome.stop_reason.value if outcome.stop_reason else None, "answer": outcome.answer,
            "note": outcome.note, "steps": [outcome.first_step, outcome.last_step],
        }

    async def cancel_run(self, run_id: RunId) -> dict[str, Any]:
        """Cancel a run (a flow cancels its running step too). The run ends
        as cancelled; what it did so far stays readable."""
        run_id = run_id_of(run_id)
        client = await self.runs.client()
        report = io.StringIO()
        ended = await run_control.cancel(client, run_id, report, wait_seconds=CANCEL_WAIT_SECONDS)
        return {"run_id": run_id, "ended": ended, "report": one_line(report.getvalue())}

    async def run_result(
        self,
        run_id: RunId,
        wait_seconds: Annotated[
            float,
            Field(ge=0, le=MAX_RESULT_WAIT_SECONDS, description="wait up to this long for a running run to end"),
        ] = 0,
    ) -> dict[str, Any]:
        """A run's result once it has ended: the final answer (a flow's summary),
        state and stop reason. A run still going is reported as still running,
        after waiting up to wait_seconds for it to end."""
        run_id = run_id_of(run_id)
        client = await self.runs.client()
        description = await run_control.describe(client, run_id)
        failure = None
        if run_control.is_running(description) and wait_seconds > 0:
            handle = client.get_workflow_handle(run_id, result_type=run_control.result_type(description))
            ended = await run_control.result_within(handle, wait_seconds, run_control.result_type(description))
            if isinstance(ended, WorkflowFailureError):
                failure = ended  # ended without a result: described below
            elif ended is not None:
                return {"run_id": run_id, "finished": True, **result_fields(ended)}
            description = await run_control.describe(client, run_id)
        if run_control.is_running(description):
            waited = f" after waiting {wait_seconds:g} s" if wait_seconds > 0 else ""
            return {
                "run_id": run_id,
                "finished": False,
                "kind": kind_of(description),
                "state": AgentState.RUNNING.value,
                "note": f"still running{waited}; see its progress with run_status",
            }
        return {"run_id": run_id, "finished": True, **await ended_fields(client, run_id, description, failure)}

    async def list_runs(
        self, limit: Annotated[int, Field(ge=1, le=LIST_MAX, description="how many runs, newest first")] = LIST_LIMIT
    ) -> dict[str, Any]:
        """The recent agent runs and flows, newest first, one per run id: id,
        agent (or flow), task, state, status in words (running, waits for an
        answer, waits for approval, finished, gave up, error, ...), step
        reached, when started."""
        client = await self.runs.client()
        rows = await recent_runs(client, limit)
        return {
            "runs": [
                {
                    "run_id": row.run_id,
                    "agent": row.kind,
                    "state": row.state,
                    "status": row.status,
                    "task": row.task[:TASK_LIMIT],
                    "step": row.step,
                    "started": row.started.isoformat(),
                }
                for row in rows
            ]
        }


class RunServer(MCPServer):
    """MCPServer whose tool errors are one line: the SDK's own (bad arguments)
    lose their multi-line pydantic form and every message its prefix."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # a crash: the SDK logs it and says only which tool
        except ToolError as e:
            raise ToolError(tool_error_line(e)) from None


def tool_error_line(error: ToolError) -> str:
    cause = error.__cause__
    if isinstance(cause, ValidationError):
        problems = [
            f"{'.'.join(str(part) for part in problem['loc']) or 'arguments'}: {problem['msg']}"
            for problem in cause.errors()
        ]
        return one_line("invalid arguments: " + "; ".join(problems))
    return one_line(str(cause if isinstance(cause, ToolError) else error))


READING = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
STARTING = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
ANSWERING = ToolAnnotations(read_only_hint=False, destructive_hint=False)
CANCELLING = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)


def build_server(runs: Runs) -> RunServer:
    server = RunServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")
    tools = RunTools(runs)
    for method, title, hints in (
        (tools.start_run, "Start an agent run", STARTING),
        (tools.start_flow, "Start a planning flow", STARTING),
        (tools.run_status, "A run's status", READING),
        (tools.run_steps, "A run's steps", READING),
        (tools.answer_question, "Answer a run's question", ANSWERING),
        (tools.decide_call, "Approve, reject or edit a run's gated tool call", ANSWERING),
        (tools.send_message, "Send a follow-up message to a run", ANSWERING),
        (tools.cancel_run, "Cancel a run", CANCELLING),
        (tools.run_result, "A run's result", READING),
        (tools.list_runs, "Recent runs", READING),
    ):
        server.add_tool(one_line_errors(method), name=method.__name__, title=title, annotations=hints)
    return server


LOOPBACK = ("127.0.0.1", "localhost", "::1")


STDIO_LINE = (
    "mcp-server: serving MCP on stdio, waiting for an MCP client to speak JSON-RPC on stdin; this is not a "
    "prompt: configure it as a client's stdio server (or use --http HOST:PORT); Ctrl-C stops it"
)


async def serve(config: str | None, http: tuple[str, int] | None, worker: bool, show_token: bool = False) -> int:
    """Serve MCP until the client goes (stdio) or the process is stopped (HTTP)."""
    settings = load_settings(config)
    runs = Runs(settings)
    async with contextlib.AsyncExitStack() as stack:
        if http is not None:
            check_can_listen(*http)
            # Before the worker starts, so that its web rules refuse this server.
            stack.enter_context(recorded_while_serving(*http))
        if worker:
            in_process = InProcessWorker(await runs.client(may_start_server=True), settings, stack)
            await in_process.prepare("always")
            print(f"mcp-server: a worker runs in this process on task queue {settings.task_queue}", file=sys.stderr)
        server = build_server(runs)
        if http is None:
            if sys.stdin.isatty():  # a person, not a client: say what this waits for (never on stdout, MCP's)
                print(STDIO_LINE, file=sys.stderr, flush=True)
            await server.run_stdio_async()
            return 0
        host, port = http
        path = token_path()
        token, created = load_or_create_token(path)
        if host not in LOOPBACK:
            print(
                f"mcp-server: listening on {host}, not a loopback address: plain HTTP carries the token "
                "unencrypted, so keep it to networks you trust (or put TLS in front)",
                file=sys.stderr,
            )
        shown = f"[{host}]" if ":" in host else host
        print(f"mcp-server: serving MCP at http://{shown}:{port}/mcp", file=sys.stderr)
        print(token_line(path, token, created or show_token), file=sys.stderr, flush=True)
        app = RequireBearer(server.streamable_http_app(host=host), token)
        try:
            await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve()
        except SystemExit:  # uvicorn's way to fail its start-up (it logged why)
            raise UsageError(f"could not serve HTTP on {shown}:{port}") from None
    return 0


def token_line(path: Path, token: str, show: bool) -> str:
    """How clients authenticate; the token itself when it is new or asked for."""
    if show:
        return f"mcp-server: clients must send the header 'Authorization: Bearer {token}' (the token is kept in {path})"
    return (
        f"mcp-server: clients must send the header 'Authorization: Bearer TOKEN' with the token kept in {path} "
        "(--show-token prints it)"
    )


def check_can_listen(host: str, port: int) -> None:
    """Fail in one line now, rather than in uvicorn's start-up, when the
    address cannot be listened on (taken, or not this machine's)."""
    if (problem := listen_problem(host, port)) is not None:
        raise UsageError(f"cannot listen on {host}:{port}: {problem.strerror or problem}")
