"""What a tool is, as data: its schema, how it runs, its Web UI summary line and
the worker resources it needs. Every tool file in tools/ declares one SPEC.

Pure: the workflow imports tool files for their specs, so a tool file imports
only pure modules at its top; whatever runs on the worker (processes, files)
reaches the tool's activity through WorkerResources (activities/
worker_resources.py) when the worker builds it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from temporalio.common import RetryPolicy

from agent_model.errors import BAD_TOOL_ARGUMENTS_ERROR

if TYPE_CHECKING:
    from activities.worker_resources import WorkerResources
    from agent_model.browser import BrowserState
    from agent_model.plan import PlanBook
    from agent_model.usage import TokenUsage


@dataclass(frozen=True)
class ToolCallContext:
    """Where a workflow tool's call belongs."""

    workspace: str
    """The run directory's name."""
    step: int
    index: int
    """The call's place in its reply, from 0."""
    call_id: str
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
class ActivityConfig:
    """How an activity is scheduled; every bound carries its reason."""

    start_to_close: Timeout
    retries: Retries
    heartbeat: Timeout | None = None
    schedule_to_start: Timeout | None = None
    """Only for a worker's own task queue: how long a task may wait there
    before its worker counts as gone."""

    def options(self) -> dict[str, Any]:
        """Keyword arguments of workflow.execute_activity."""
        options: dict[str, Any] = {
            "start_to_close_timeout": self.start_to_close.delta,
            "retry_policy": self.retries.policy(),
        }
        if self.heartbeat is not None:
            options["heartbeat_timeout"] = self.heartbeat.delta
        if self.schedule_to_start is not None:
            options["schedule_to_start_timeout"] = self.schedule_to_start.delta
        return options


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


class Needs(Enum):
    """Worker resources a tool's activity uses (activities/worker_resources.py)."""

    WORKSPACE = "the run directories under the workspace root"
    PROCESSES = "confined processes: the tool sandbox, limits, the run's tool lock"
    FILES = "file access beneath a run directory that follows no link out"
    WEB = "HTTP to checked public addresses, the search engines and their keys"
    BROWSER = "a confined Chromium per run, reached on the worker's own task queue"


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call gave: the observation, and whether the call failed."""

    observation: str
    error: bool = False
    image_file: str | None = None
    """An image the tool wrote, relative to the run directory (a screenshot):
    shown to the model, kept out of history."""
    stored_digest: str | None = None
    """Digest of the observation message an activity of the tool wrote to the
    shared context store (agent_model/think_context.py); ignored unless it
    matches the observation."""


class RunEnds(Exception):
    """Raised by a workflow tool whose call ends the run (terminate)."""

    def __init__(self, gave_up: bool, answer: str | None) -> None:
        super().__init__("the run ends")
        self.gave_up, self.answer = gave_up, answer


class WorkflowTools(Protocol):
    """What the workflow offers the tools that run inside it."""

    plans: PlanBook
    browser: BrowserState
    """The run's browser as its last action left it (tools/browser_use.py)."""

    @property
    def call(self) -> ToolCallContext:
        """The step and call being handled, and where the run lives."""
        ...

    def spent(self, usage: TokenUsage) -> None:
        """Adds the tokens of an LLM call a tool made to the run's usage."""
        ...

    async def ask_user(self, question: str) -> str:
        """The observation for a question to the user (an answer, a timeout)."""
        ...


WorkflowHandler = Callable[[WorkflowTools, dict[str, Any]], Awaitable[ToolOutcome]]
"""A tool that runs in the workflow: no I/O, deterministic; it may raise RunEnds."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    schema: dict[str, Any]
    """The function definition the model is given."""
    summary: Callable[[dict[str, Any]], str] = lambda arguments: ""
    """What the Web UI shows after the tool's name for one call's arguments."""
    activity: ActivityConfig | None = None
    """Set for a tool that runs as an activity (of the same name)."""
    handler: WorkflowHandler | None = None
    """Set for a tool that runs in the workflow."""
    needs: frozenset[Needs] = field(default_factory=frozenset)
    build: Callable[[WorkerResources], Callable[..., Awaitable[Any]]] | None = None
    """Worker side, for an activity tool: makes the activity from the worker's
    resources (the workflow never calls it)."""
    build_many: Callable[[WorkerResources], list[Callable[..., Awaitable[Any]]]] | None = None
    """Worker side, for a workflow tool whose handler schedules activities of
    its own (browser_use): makes them."""

    def __post_init__(self) -> None:
        if (self.activity is None) == (self.handler is None):
            raise ValueError(f"tool {self.name}: give exactly one of activity (a config) and handler")
        if (self.activity is None) != (self.build is None):
            raise ValueError(f"tool {self.name}: an activity tool needs build, a workflow tool none")
        if self.build_many is not None and self.handler is None:
            raise ValueError(f"tool {self.name}: build_many is for a workflow tool's own activities")
        if self.schema.get("function", {}).get("name") != self.name:
            raise ValueError(f"tool {self.name}: its schema names another function")

    @property
    def runs_in_workflow(self) -> bool:
        return self.handler is not None


def first_line_of(argument: str) -> Callable[[dict[str, Any]], str]:
    """A summary: the first line of one argument (a command, a program)."""

    def summary(arguments: dict[str, Any]) -> str:
        lines = str(arguments.get(argument, "")).strip().splitlines()
        return lines[0] if lines else ""

    return summary
