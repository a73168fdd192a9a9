"""What a tool is, as data: its schema, how it runs, its Web UI summary line,
the state it keeps across calls and what the workflow does with that state at
fixed points of a step. Every tool file in tools/ declares one SPEC.

Pure: the workflow imports tool files for their specs, so a tool file imports
only pure modules at its top; whatever runs on the worker (processes, files)
reaches the tool's activity through the worker's resources when the worker
calls the spec's `build` (typed in the tool file, which may know the worker).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

from agent_model.approval import GateFacts
from agent_model.approval_desk import ApprovalRecord
from agent_model.errors import BAD_TOOL_ARGUMENTS_ERROR
from agent_model.messages import Message
from agent_model.plan import PlanBook
from agent_model.profiles import AgentProfile
from agent_model.tool_io import ToolRequest, ToolResult
from agent_model.usage import TokenUsage

Slot = TypeVar("Slot", bound=BaseModel)


@dataclass(frozen=True)
class ToolCallContext:
    """Where a workflow tool's call belongs."""

    workspace: str
    """The run directory's name."""
    step: int
    index: int
    """The call's place in its reply, from 0."""
    call_id: str
    tool: str
    """The function name the model called (an MCP tool's mcp_<server>_<tool>)."""
    llm: str
    """The profile's LLM, for a tool that asks the model (extract_content)."""
    observe_limit: int


@dataclass(frozen=True)
class Timeout:
    seconds: float
    why: str
    """One line: what this bound must outlast, or what it detects."""

    @property
    def delta(self) -> timedelta:
        return timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class Retries:
    maximum_attempts: int
    why: str
    """One line: what a retry can fix, and what it costs."""
    initial_seconds: float = 1.0
    """The server rounds retry intervals up to whole seconds."""
    backoff: float = 2.0
    maximum_interval_seconds: float | None = None
    non_retryable: tuple[str, ...] = ()
    """Error types that fail the same way every time."""

    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            initial_interval=timedelta(seconds=self.initial_seconds),
            backoff_coefficient=self.backoff,
            maximum_interval=None if self.maximum_interval_seconds is None else timedelta(seconds=self.maximum_interval_seconds),
            maximum_attempts=self.maximum_attempts,
            non_retryable_error_types=list(self.non_retryable) or None,
        )


@dataclass(frozen=True)
class Cancellation:
    kind: ActivityCancellationType
    why: str
    """One line: what must be over before a cancelled run may end."""


WAIT_FOR_THE_CALL = Cancellation(
    ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    "a cancelled run ends only once the call has stopped (its processes killed, its server call or "
    "browser action over): nothing the run started outlives it",
)
CLOSED_WITHOUT_IT = Cancellation(
    ActivityCancellationType.TRY_CANCEL,
    "kept for runs begun before cancel-waits-for-workspace: their cancelled run closed at once, the call "
    "left open in its history (the Web UI shows it running under the closed run)",
)


def activity_config(
    *,
    start_to_close: Timeout,
    retries: Retries,
    cancellation: Cancellation,
    heartbeat: Timeout | None = None,
    schedule_to_start: Timeout | None = None,
) -> workflow.ActivityConfig:
    """How an activity is scheduled (the SDK's keyword arguments of
    execute_activity); every bound is given with its reason."""
    config = workflow.ActivityConfig(
        start_to_close_timeout=start_to_close.delta,
        retry_policy=retries.policy(),
        cancellation_type=cancellation.kind,
    )
    if heartbeat is not None:
        config["heartbeat_timeout"] = heartbeat.delta
    if schedule_to_start is not None:
        config["schedule_to_start_timeout"] = schedule_to_start.delta
    return config


TOOL_HEARTBEAT = Timeout(
    4,
    "tool activities heartbeat every second: three missed beats (the worker's event loop stalled at "
    "most ~0.35 s, a full GC ~0.4 s, with 200 runs on 2 cores: BENCHMARKS.md P4) mean a dead or "
    "frozen worker; the retry starts 1 s later on a live one",
)
TOOL_RETRIES_AFTER_A_LOST_WORKER = Retries(
    3,
    "tool failures come back as results, so a retry only follows a lost worker and the call runs "
    "again (the lesser evil); malformed arguments fail the same way every time",
    initial_seconds=1,
    non_retryable=(BAD_TOOL_ARGUMENTS_ERROR,),
)


def scheduled(config: workflow.ActivityConfig, summary: str, task_queue: str | None = None) -> workflow.ActivityConfig:
    """The keyword arguments of one execute_activity: the config, with the
    call's Web UI summary (and, for a worker's own queue, its task queue)."""
    call = workflow.ActivityConfig(**config)
    call["summary"] = summary
    if task_queue is not None:
        call["task_queue"] = task_queue
    return call


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call gave: the observation, and whether the call failed."""

    observation: str
    error: bool = False
    message: Message | None = None
    """The observation message exactly as memory takes it, when the activity
    that ran the call made it (and wrote it to the shared context store, with
    `stored_digest`); otherwise the workflow makes it from `observation`."""
    stored_digest: str | None = None
    after: tuple[Message, ...] = ()
    """Messages for memory after the reply's tool messages (the tool role can
    carry neither images nor notes of the workflow's own): a screenshot, a
    note that the browser session was restored."""
    approval: ApprovalRecord | None = None
    """The decision the call waited for at an approval gate, if it did."""


class RunEnds(Exception):
    """Raised by a workflow tool whose call ends the run (terminate)."""

    def __init__(self, gave_up: bool, answer: str | None) -> None:
        super().__init__("the run ends")
        self.gave_up, self.answer = gave_up, answer


class WorkflowTools(Protocol):
    """What the workflow offers the tools that run inside it and the hooks of
    stateful tools."""

    plans: PlanBook

    @property
    def call(self) -> ToolCallContext:
        """The step and call being handled, and where the run lives."""
        ...

    @property
    def profile(self) -> AgentProfile: ...

    def slot(self, tool: str, model: type[Slot]) -> Slot:
        """The tool's state in the run (agent_model/run_state.py)."""
        ...

    def keep(self, tool: str, value: BaseModel) -> None:
        """Replaces the tool's state in the run."""
        ...

    def note(self, text: str) -> None:
        """Adds a note for the model to memory (before the next think)."""
        ...

    def spent(self, usage: TokenUsage) -> None:
        """Adds the tokens of an LLM call a tool made to the run's usage."""
        ...

    def options(self, tool: str, key: str) -> workflow.ActivityConfig:
        """How one of a workflow tool's own activities (`ToolSpec.own_activities`)
        is scheduled, as the run started; raises BadToolTerms for unschedulable terms."""
        ...

    async def ask_user(self, question: str) -> str:
        """The observation for a question to the user (an answer, a timeout)."""
        ...


WorkflowHandler = Callable[[WorkflowTools, dict[str, Any]], Awaitable[ToolOutcome]]
"""A tool that runs in the workflow: no I/O, deterministic; it may raise RunEnds."""
Hook = Callable[[WorkflowTools], Awaitable[None]]


@dataclass(frozen=True)
class ToolState(Generic[Slot]):
    """A tool's own state in the run, and what the workflow does with it. The
    workflow calls these at fixed points for every tool the run uses, and
    names no tool itself."""

    model: type[Slot]
    """The slot's model; its defaults are the state before the first call."""
    prompt: Callable[[Slot], str | None] | None = None
    """Its part of the next-step prompt (the browser's page)."""
    before_think: Hook | None = None
    """Work before each think (MCP lists its servers' tools when they changed)."""
    definitions: Callable[[Slot], list[dict[str, Any]]] | None = None
    """Function definitions it adds to each think (MCP: its servers' tools)."""
    answers: Callable[[Slot, str], bool] | None = None
    """Function names besides its own that its handler takes (MCP's tools)."""
    into_request: Callable[[Slot, ToolRequest], ToolRequest] | None = None
    """An activity tool: its state's part of the request (bash: the shell's directory)."""
    from_result: Callable[[Slot, ToolResult], Slot] | None = None
    """An activity tool: its state after a call."""
    at_run_end: Hook | None = None
    """Work once the run is over, however it ended (the browser closes)."""
    gate_facts: Callable[[Slot, str], GateFacts] | None = None
    """What its state tells the approval gates about a call, by function name
    (the browser's open page, whether an MCP tool is read-only)."""


def named_in_profile(spec: ToolSpec, profile: AgentProfile) -> bool:
    return spec.name in profile.tools


@dataclass(frozen=True)
class ToolSpec:
    name: str
    schema: dict[str, Any] | None
    """The function definition the model is given; None for a tool that only
    offers functions of its state (MCP)."""
    summary: Callable[[dict[str, Any]], str] = lambda arguments: ""
    """What the Web UI shows after the tool's name for one call's arguments."""
    activity: workflow.ActivityConfig | None = None
    """Set for a tool that runs as an activity (of the same name)."""
    handler: WorkflowHandler | None = None
    """Set for a tool that runs in the workflow."""
    state: ToolState[Any] | None = None
    """Set for a tool that keeps state across calls."""
    used_by: Callable[[ToolSpec, AgentProfile], bool] = named_in_profile
    """Whether a run with the profile uses the tool (its hooks run)."""
    on_own_queue: bool = False
    """Its activities hold a live session on their worker, so the worker also
    serves them on its own task queue (the browser)."""
    own_activities: dict[str, workflow.ActivityConfig] = field(default_factory=dict)
    """A workflow tool: how the activities its handler and hooks schedule run,
    by a key of its own (the starter writes them into the run's input)."""
    concurrent: bool = False
    """Its calls change nothing another call of the reply could see (a fetch, a
    search): consecutive calls of such tools run at once (agent_model/call_groups.py).
    Only for a stateless activity tool: a workflow tool's call owns RunTools.call."""
    changes_files: bool = False
    """Its calls may change the run directory: after each, the worker snapshots
    the directory for forks and rewinds (activities/workspace_snapshots.py)."""
    read_calls: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Of an activity tool: the calls that only read, as argument values (the
    editor: {"command": ("view",)}; see agent_model/tool_terms.py reads_only).
    No snapshot follows such a call, and new runs run it as a local activity
    (ToolTerms.local_reads)."""
    build: Callable[[Any], Callable[..., Awaitable[Any]]] | None = None
    """Worker side, for an activity tool: makes the activity from the worker's
    resources (the workflow never calls it)."""
    build_many: Callable[[Any], list[Callable[..., Awaitable[Any]]]] | None = None
    """Worker side, for a workflow tool whose handler schedules activities of
    its own (browser_use, MCP): makes them."""
    options: type[BaseModel] | None = None
    """The options a profile may give the tool (AgentProfile.tool_options),
    checked when a run starts and sent with each call (ToolRequest.options)."""
    schema_for: Callable[[Any], dict[str, Any]] | None = None
    """The function definition for a profile's options (an `options` instance),
    when they change what the model must be told."""

    def __post_init__(self) -> None:
        if (self.activity is None) == (self.handler is None):
            raise ValueError(f"tool {self.name}: give exactly one of activity (a config) and handler")
        if (self.activity is None) != (self.build is None):
            raise ValueError(f"tool {self.name}: an activity tool needs build, a workflow tool none")
        if self.build_many is not None and self.handler is None:
            raise ValueError(f"tool {self.name}: build_many is for a workflow tool's own activities")
        if self.schema is not None and self.schema.get("function", {}).get("name") != self.name:
            raise ValueError(f"tool {self.name}: its schema names another function")
        if self.concurrent and (self.activity is None or self.state is not None):
            raise ValueError(f"tool {self.name}: only a stateless activity tool may run beside others")
        if self.read_calls and (self.activity is None or self.state is not None):
            raise ValueError(f"tool {self.name}: only a stateless activity tool may run its reads locally")
        if self.schema is None and (self.state is None or self.state.answers is None):
            raise ValueError(f"tool {self.name}: a tool without a schema must answer functions of its state")

    @property
    def runs_in_workflow(self) -> bool:
        return self.handler is not None


def first_line_of(argument: str) -> Callable[[dict[str, Any]], str]:
    """A summary: the first line of one argument (a command, a program)."""

    def summary(arguments: dict[str, Any]) -> str:
        lines = str(arguments.get(argument, "")).strip().splitlines()
        return lines[0] if lines else ""

    return summary
