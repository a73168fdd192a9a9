"""The starter's command line: an argument list becomes one immutable command.

The first argument names the command when it is exactly one of COMMANDS;
anything else is a run's arguments (`python starter.py "task"` is `run
"task"`), and a task that is itself a command name, or one word that looks
like a misspelt one (`lsit`), goes after `run`. Every complaint is a one-line
UsageError.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import shlex
from dataclasses import dataclass
from typing import ClassVar, Sequence

from agent_model.approval import ApprovalMode
from agent_model.flow import DEFAULT_FLOW_TIMEOUT_SECONDS, DEFAULT_PARALLEL_STEPS, FINALIZE_RESERVE_SECONDS, MAX_PARALLEL_STEPS
from agent_model.profiles import BUILTIN_PROFILES, get_profile
from config.mcp_config import is_http_url
from runtime.user_errors import UsageError
from runtime.worker_options import add_worker_arguments

RUN_PAGE_PORT = 8239
"""`ui`'s port unless --port names another."""

# ---- the commands --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Run:
    """Start a run, of one agent or a PlanningFlow, and follow it to its end."""

    name: ClassVar[str] = "run"
    task: str
    agent: str = "manus"
    flow: str | None = None
    agents: tuple[str, ...] = ("manus",)
    """The agents the run uses: its one agent, or the flow's executors (the first is primary)."""
    max_steps: int | None = None
    steps_per_run: int | None = None
    timeout: float = DEFAULT_FLOW_TIMEOUT_SECONDS
    parallel: int = DEFAULT_PARALLEL_STEPS
    """With --flow: how many plan steps that need nothing unfinished run at once."""
    run_id: str | None = None
    detach: bool = False
    worker: str = "auto"
    config: str | None = None
    llm: str | None = None
    """The config's [llm.NAME] for every think of the run; None: each agent's own."""
    mcp_servers: tuple[str, ...] | None = None
    """`mcp`: the configured MCP servers the run uses; None: the agent's own."""
    mcp_command: tuple[str, ...] = ()
    mcp_url: str | None = None
    """`mcp`: one more server, given on the command line (run_mcp.py's form):
    served only by this starter's own worker (runtime/ad_hoc_mcp.py)."""
    max_tokens: int | None = None
    """The run's token budget (a flow's: its planner and all its steps together)."""
    max_cost: float | None = None
    """The run's cost budget in USD, at the config's prices of its LLMs."""
    ask_at_budget: bool | None = None
    """--(no-)ask-at-budget: ask for a higher ceiling instead of ending; None: [budget] ask_at_ceiling."""
    approve: ApprovalMode | None = None
    """--approve: which calls wait for a decision; None: the config's [approval] mode."""
    stream: bool = True
    """--no-stream: do not show the streamed thought while following ([live] print decides otherwise)."""


@dataclass(frozen=True, kw_only=True)
class Attach:
    """Follow an existing run to its end."""

    name: ClassVar[str] = "attach"
    run_id: str
    worker: str = "auto"
    config: str | None = None
    stream: bool = True


@dataclass(frozen=True, kw_only=True)
class ListRuns:
    """The recent runs, one line each."""

    name: ClassVar[str] = "list"
    limit: int = 20
    state: str | None = None
    """running, waiting, finished, failed or cancelled (agent_model/outcome_words.py StateClass)."""
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Show:
    """A run's transcript."""

    name: ClassVar[str] = "show"
    run_id: str
    worker: str = "auto"
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Result:
    """A finished run's result."""

    name: ClassVar[str] = "result"
    run_id: str
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Answer:
    """Answer the question a run waits on."""

    name: ClassVar[str] = "answer"
    run_id: str
    text: str
    worker: str = "auto"
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Approve:
    """Approve the gated call a run waits on (with --edit: with new arguments)."""

    name: ClassVar[str] = "approve"
    run_id: str
    call: str | None = None
    """The call's id (`<step>.<n>`); None: the one waiting."""
    edit: str | None = None
    """New arguments, a JSON object."""
    worker: str = "auto"
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Reject:
    """Reject the gated call a run waits on; the model gets the reason."""

    name: ClassVar[str] = "reject"
    run_id: str
    call: str | None = None
    reason: str = ""
    worker: str = "auto"
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Cancel:
    """Cancel a run."""

    name: ClassVar[str] = "cancel"
    run_id: str
    worker: str = "auto"
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Rewind:
    """Run a run again from the end of step `to_step`, and follow it."""

    name: ClassVar[str] = "rewind"
    run_id: str
    to_step: int
    detach: bool = False
    worker: str = "auto"
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Fork:
    """Start a new run from the state (and files) of a run at the end of step `from_step`, and follow it."""

    name: ClassVar[str] = "fork"
    run_id: str
    """The origin: an agent run, or a flow's step run."""
    from_step: int
    task: str | None = None
    """Replaces the origin's task (its first user message)."""
    message: str | None = None
    """A user message added after the step."""
    llm: str | None = None
    new_id: str | None = None
    detach: bool = False
    worker: str = "auto"
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Chat:
    """Talk to a run turn by turn: one follow-up, or the prompt loop in a terminal (runtime/chat.py)."""

    name: ClassVar[str] = "chat"
    run_id: str | None = None
    """The run to go on with; None: a new session (asks for its task)."""
    message: str | None = None
    """The follow-up; None: the prompt loop (in a terminal)."""
    agent: str = "manus"
    max_steps: int | None = None
    steps_per_run: int | None = None
    llm: str | None = None
    new_id: str | None = None
    """--id: the workflow id of a new session."""
    max_tokens: int | None = None
    max_cost: float | None = None
    approve: ApprovalMode | None = None
    worker: str = "auto"
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class ServeWorker:
    """worker.py's main with these arguments (checked against its options when parsed)."""

    name: ClassVar[str] = "worker"
    argv: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class StartServer:
    """Start the embedded Temporal server, detached."""

    name: ClassVar[str] = "server"
    config: str | None = None
    """Read for [encryption]: with a key file the Web UI is pointed at the codec server."""


@dataclass(frozen=True, kw_only=True)
class McpServe:
    """Serve MCP tools that start and control runs (runtime/mcp_server.py)."""

    name: ClassVar[str] = "mcp-server"
    http: tuple[str, int] | None = None
    """(host, port) for streamable HTTP; None: stdio."""
    worker: bool = False
    """Run a worker in this process for as long as the server runs."""
    show_token: bool = False
    """With http: print the bearer token clients must send (it is printed anyway when new)."""
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class Keygen:
    """Make a payload key file, or add a new current key to one (runtime/keygen.py)."""

    name: ClassVar[str] = "keygen"
    path: str


@dataclass(frozen=True, kw_only=True)
class CodecServe:
    """Decode and encode payloads for the Web UI and the temporal CLI (runtime/codec_server.py)."""

    name: ClassVar[str] = "codec-server"
    port: int | None = None
    """None: [encryption] codec_port."""
    config: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunPage:
    """Serve the run page (runtime/run_page/): runs, transcripts, live steps, answers and approvals."""

    name: ClassVar[str] = "ui"
    port: int = RUN_PAGE_PORT
    host: str = "127.0.0.1"
    worker: str = "auto"
    config: str | None = None


Command = (
    Run | Attach | ListRuns | Show | Result | Answer | Approve | Reject | Cancel | Rewind | Fork | ServeWorker
    | StartServer | McpServe | Chat | Keygen | CodecServe | RunPage
)
COMMANDS = {
    c.name: c
    for c in (
        Run, Attach, ListRuns, Show, Result, Answer, Approve, Reject, Cancel, Rewind, Fork, ServeWorker, StartServer,
        McpServe, Chat, Keygen, CodecServe, RunPage,
    )
}
COMMANDS["mcp"] = Run
"""`mcp` is a run of the mcp agent (parse_command builds it)."""
FOLLOWS_A_RUN = (Run, Attach, Rewind, Fork, Chat)
"""Commands that follow a run to its end. Only they may start the embedded
server (a new run goes there, an existing one lives there), and their
interruptions say how to resume."""

# ---- the command line ----------------------------------------------------------------

RULE = """\
Which command: when the first argument is exactly one of the names above, it
is the command; anything else is a run's arguments, so
`python starter.py "task"` means `python starter.py run "task"`. A task that
is itself a command name goes after `run`: python starter.py run list
Each command's own options: python starter.py COMMAND --help

list, show, result, answer, approve, reject and cancel never start a Temporal server: with
none to reach they say so in one line (exit 2). run, attach, rewind, fork, chat and ui start
the embedded one when TEMPORAL_ADDRESS is unset and nothing answers on
127.0.0.1:7233; `server` starts it alone.

Exit codes: 0 the run finished its task; 1 it ended otherwise; 2 bad input or
configuration; 3 lost the Temporal server while following; 130 Ctrl-C."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose complaints are one-line UsageErrors (exit 2)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see: python {self.prog} --help)")


def add_worker_mode(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--worker", choices=("auto", "always", "never"), default="auto",
        help="auto (default): when no live worker serves the run, start one in the background that outlives "
        "this command; always: run one in this process (it stops with the command); never: none",
    )


def add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="config file (default: config/config.toml or $DURABLE_MANUS_CONFIG)")


def add_no_stream(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-stream", dest="stream", action="store_false",
        help="do not show the thought the model streams while a step thinks (default: shown on a terminal, "
        "when the run's worker is on this machine; [live] print)",
    )


def add_new_run_options(parser: argparse.ArgumentParser, flow: bool) -> None:
    """--max-steps, --llm and --id, which every command that starts a run takes
    (checked by check_new_run_options); `flow`: the command may start a flow."""
    in_flow = " (each agent's, in a flow)" if flow else ""
    parser.add_argument("--max-steps", type=int, help=f"override the agent's step limit{in_flow}")
    in_flow = " (a flow's planner and agents too)" if flow else ""
    parser.add_argument(
        "--llm", metavar="NAME", help=f"the config's [llm.NAME] for every think of the run{in_flow}; default: [llm]"
    )
    parser.add_argument("--id", dest="run_id", metavar="ID", help="workflow id for the new run (default: generated)")
    parser.add_argument(
        "--approve", choices=[mode.value for mode in ApprovalMode], type=str.lower,
        help="which tool calls wait for your decision: risky (the built-in set and [approval] rules), all, "
        "or none; default: [approval] mode, which is none unless set",
    )


def add_budget_options(parser: argparse.ArgumentParser, flow: bool) -> None:
    """--max-tokens and --max-cost (checked by check_budget_options)."""
    whole = " (a flow's planner and all its steps together)" if flow else ""
    parser.add_argument(
        "--max-tokens", type=int, metavar="N",
        help=f"end the run gracefully once it has used N tokens{whole}",
    )
    parser.add_argument(
        "--max-cost", type=float, metavar="USD",
        help=f"end the run gracefully once it has cost USD dollars{whole}, at the prices of [llm] "
        "price_per_million_input/_output",
    )
    parser.add_argument(
        "--ask-at-budget", action=argparse.BooleanOptionalAction, default=None,
        help="at a ceiling, ask for a higher one (answer in the terminal or with `answer`) instead of ending; "
        "default: [budget] ask_at_ceiling, which is off unless set",
    )


def check_budget_options(args: argparse.Namespace) -> None:
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    if args.max_cost is not None and not (math.isfinite(args.max_cost) and args.max_cost > 0):
        raise UsageError("--max-cost must be a positive number of US dollars, e.g. 0.50")


def check_task(task: str | None, usage: str) -> None:
    if not task or not task.strip():
        raise UsageError(f"the task is empty; usage: {usage}")


def check_new_run_options(args: argparse.Namespace) -> None:
    """The options add_new_run_options adds, checked."""
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    if args.llm is not None and not args.llm.strip():
        raise UsageError("--llm needs the name of an [llm.NAME] section")


def add_run_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("task", nargs="?", help="what the agent should do")
    run.add_argument("--agent", default="manus", help=f"agent profile ({', '.join(BUILTIN_PROFILES)}); default manus")
    add_new_run_options(run, flow=True)
    add_budget_options(run, flow=True)
    run.add_argument(
        "--steps-per-run", type=int,
        help="go on in a new Temporal execution every N steps (default: when the history grows large)",
    )
    run.add_argument("--flow", choices=("planning",), help="run a PlanningFlow: plan, then one child agent run per step")
    run.add_argument(
        "--agents", default="manus", help="with --flow: executor agents, comma-separated; the first is primary (default manus)"
    )
    run.add_argument(
        "--timeout", type=float, default=DEFAULT_FLOW_TIMEOUT_SECONDS,
        help=f"with --flow: the flow's time bound in seconds (default {DEFAULT_FLOW_TIMEOUT_SECONDS:.0f})",
    )
    run.add_argument(
        "--parallel", type=int, default=DEFAULT_PARALLEL_STEPS, metavar="N",
        help=f"with --flow: run up to N plan steps at once when the plan says they need nothing unfinished "
        f"(default {DEFAULT_PARALLEL_STEPS}; 1: one step at a time)",
    )
    add_config(run)
    run.add_argument("--detach", action="store_true", help="start the run, print its id and exit")
    add_worker_mode(run)
    add_no_stream(run)


def build_parser() -> Parser:
    parser = Parser(
        prog="starter.py",
        usage="%(prog)s [run] [options] TASK\n       %(prog)s COMMAND [options] [ARGS]",
        description="Run a durable-manus agent on a task, or control the runs there are.",
        epilog=RULE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", prog="starter.py")
    add_run_options(commands.add_parser("run", help="start a run and follow it to its end (the default command)"))
    attach = commands.add_parser("attach", help="follow an existing run to its end")
    attach.add_argument("run_id", metavar="ID")
    add_worker_mode(attach)
    add_config(attach)
    add_no_stream(attach)
    add_list_options(commands.add_parser("list", help="recent runs: id, agent or flow, state, step, age, task"))
    show = commands.add_parser("show", help="a run's transcript: thoughts, tool calls, observations, tokens")
    show.add_argument("run_id", metavar="ID")
    add_worker_mode(show)
    add_config(show)
    result = commands.add_parser("result", help="a finished run's result (exit code as for the run)")
    result.add_argument("run_id", metavar="ID")
    add_config(result)
    answer = commands.add_parser("answer", help="answer the question a run (or a flow's step) waits on")
    answer.add_argument("run_id", metavar="ID")
    answer.add_argument("text", metavar="TEXT")
    add_worker_mode(answer)
    add_config(answer)
    approve = commands.add_parser("approve", help="approve the tool call a run (or a flow's step) waits to run")
    approve.add_argument("run_id", metavar="ID")
    approve.add_argument("call", metavar="CALL", nargs="?", help="the call's id, e.g. 3.1 (default: the one waiting)")
    approve.add_argument("--edit", metavar="JSON", help="run the call with these arguments instead (a JSON object)")
    add_worker_mode(approve)
    add_config(approve)
    reject = commands.add_parser("reject", help="reject the tool call a run waits to run; the model gets the reason")
    reject.add_argument("run_id", metavar="ID")
    reject.add_argument("words", metavar="[CALL] REASON", nargs="*", help="the call's id (default: the one waiting), then why")
    add_worker_mode(reject)
    add_config(reject)
    cancel = commands.add_parser("cancel", help="cancel a run (a flow cancels its running step too)")
    cancel.add_argument("run_id", metavar="ID")
    add_worker_mode(cancel)
    add_config(cancel)
    rewind = commands.add_parser("rewind", help="run a run again from the end of step N, and follow it")
    rewind.add_argument("run_id", metavar="ID")
    rewind.add_argument("--to-step", type=int, required=True, metavar="N", help="keep steps 1..N, re-run the rest (0 = all)")
    rewind.add_argument("--detach", action="store_true", help="rewind, print the run's id and exit")
    add_worker_mode(rewind)
    add_config(rewind)
    add_fork_options(commands.add_parser(
        "fork", help="start a new run from a run's state and files at the end of step N, and follow it"
    ))
    add_chat_options(commands.add_parser(
        "chat", help="talk to a run turn by turn: send a follow-up, or (in a terminal) open a session"
    ))
    add_worker_arguments(commands.add_parser("worker", help="run a worker, as python worker.py (same options)"))
    add_config(commands.add_parser("server", help="start the embedded Temporal server, detached, unless it runs already"))
    mcp = commands.add_parser("mcp-server", help="serve MCP tools to start, follow, answer and cancel runs (stdio)")
    mcp.add_argument(
        "--http", type=host_port, metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    mcp.add_argument(
        "--with-worker", dest="worker", action="store_true", help="also run a worker in this process while serving"
    )
    mcp.add_argument(
        "--show-token", action="store_true",
        help="with --http: print the bearer token that clients must send (printed anyway when first made)",
    )
    add_config(mcp)
    keygen = commands.add_parser(
        "keygen", help="write a payload key file (0600), or add a new current key to one; [encryption] key_file names it"
    )
    keygen.add_argument("path", metavar="PATH", help="the key file, e.g. .data/keys.json")
    codec = commands.add_parser(
        "codec-server", help="decode encrypted payloads for the Web UI and temporal --codec-endpoint (127.0.0.1)"
    )
    codec.add_argument("--port", type=int, metavar="N", help="the port (default: [encryption] codec_port, 8238)")
    add_config(codec)
    add_mcp_run_options(commands.add_parser(
        "mcp", help="run the mcp agent with MCP servers: configured ones, or one given by command or URL (as run_mcp.py)"
    ))
    ui = commands.add_parser(
        "ui", help="serve the run page: runs, transcripts, live steps, answers, approvals (docs/run-page.md)"
    )
    ui.add_argument("--port", type=int, default=RUN_PAGE_PORT, metavar="N", help=f"port to listen on (default {RUN_PAGE_PORT})")
    ui.add_argument(
        "--host", default="127.0.0.1", metavar="HOST",
        help="address to listen on (default 127.0.0.1; every request needs the page's token, whatever the address)",
    )
    add_worker_mode(ui)
    add_config(ui)
    return parser


def add_fork_options(fork: argparse.ArgumentParser) -> None:
    fork.add_argument("run_id", metavar="ID", help="the run to fork: an agent run or a flow's step run")
    fork.add_argument("--from-step", type=int, required=True, metavar="N", help="start from the end of step N (0: the start)")
    what = fork.add_mutually_exclusive_group()
    what.add_argument("--task", help="replace the task (the first user message)")
    what.add_argument("--message", help="add this user message after step N")
    fork.add_argument("--llm", metavar="NAME", help="the config's [llm.NAME] for the fork's thinks; default: the origin's")
    fork.add_argument("--id", dest="new_id", metavar="ID", help="workflow id for the new run (default: generated)")
    fork.add_argument("--detach", action="store_true", help="start the fork, print its id and exit")
    add_worker_mode(fork)
    add_config(fork)


def fork_command(args: argparse.Namespace) -> Fork:
    if args.from_step < 0:
        raise UsageError("--from-step must be 0 or more")
    for option, text in (("--task", args.task), ("--message", args.message), ("--llm", args.llm), ("--id", args.new_id)):
        if text is not None and not text.strip():
            raise UsageError(f"{option} is empty")
    return Fork(**{k: v for k, v in vars(args).items() if k != "command"})


def add_list_options(runs: argparse.ArgumentParser) -> None:
    runs.add_argument("--limit", type=int, default=20, metavar="N", help="at most N runs, newest first (default 20)")
    runs.add_argument(
        "--state", choices=LIST_STATES, type=str.lower,
        help="only runs that are running (waiting ones too), waiting for you, finished their task, failed "
        "(gave up, error, a limit) or were cancelled",
    )
    add_config(runs)


LIST_STATES = ("running", "waiting", "finished", "failed", "cancelled")
LIST_MAX = 1000
"""The longest list: runtime/run_list.py reads at most this many executions."""


def add_mcp_run_options(mcp: argparse.ArgumentParser) -> None:
    mcp.add_argument("task", help="what the agent should do")
    mcp.add_argument(
        "--mcp-server", dest="mcp_server", action="append", default=[], metavar="ID",
        help="a server of mcp.json (repeatable); default: all of them unless --command or --url is given",
    )
    mcp.add_argument("--command", dest="server_command", metavar="CMD", help='start a stdio MCP server for this run, e.g. "npx -y @scope/server"')
    mcp.add_argument("--url", metavar="URL", help="connect this run to an MCP server over HTTP (a URL ending in /sse: SSE)")
    add_new_run_options(mcp, flow=False)
    add_budget_options(mcp, flow=False)
    add_config(mcp)


def add_chat_options(chat: argparse.ArgumentParser) -> None:
    chat.add_argument("run_id", metavar="ID", nargs="?", help="the run to go on with (default: a new session)")
    chat.add_argument("message", metavar="MESSAGE", nargs="?", help="the follow-up (default: ask, in a terminal)")
    chat.add_argument("--agent", default="manus", help="a new session's agent profile; default manus")
    chat.add_argument("--max-steps", type=int, help="a new session's step limit per turn")
    chat.add_argument("--steps-per-run", type=int, help="a new session goes on in a new Temporal execution every N steps")
    chat.add_argument("--llm", metavar="NAME", help="a new session's [llm.NAME] for every think")
    chat.add_argument("--id", dest="new_id", metavar="ID", help="workflow id for a new session (default: generated)")
    chat.add_argument(
        "--approve", choices=[mode.value for mode in ApprovalMode], type=str.lower,
        help="a new session's gated calls: risky, all or none; default: [approval] mode",
    )
    add_budget_options(chat, flow=False)
    add_config(chat)
    add_worker_mode(chat)


def chat_command(args: argparse.Namespace) -> Chat:
    if args.run_id is not None and not args.run_id.strip():
        raise UsageError("the run id is empty")
    if args.message is not None and not args.message.strip():
        raise UsageError('the message is empty; usage: python starter.py chat ID "message"')
    new = args.run_id is None
    given = [name for name, value in (
        ("--agent", args.agent != "manus"), ("--max-steps", args.max_steps), ("--steps-per-run", args.steps_per_run),
        ("--llm", args.llm), ("--id", args.new_id), ("--approve", args.approve), ("--max-tokens", args.max_tokens),
        ("--max-cost", args.max_cost),
    ) if value]
    if not new and given:
        raise UsageError(f"{given[0]} is for a new session (chat without ID); an existing run keeps its own")
    get_profile(args.agent)
    for option, value in (("--max-steps", args.max_steps), ("--steps-per-run", args.steps_per_run)):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be at least 1")
    check_budget_options(args)
    return Chat(
        run_id=args.run_id, message=args.message, agent=args.agent, max_steps=args.max_steps,
        steps_per_run=args.steps_per_run, llm=args.llm, new_id=args.new_id, max_tokens=args.max_tokens,
        max_cost=args.max_cost, approve=approve_mode(args), worker=args.worker, config=args.config,
    )


def host_port(value: str) -> tuple[str, int]:
    """--http's HOST:PORT (an IPv6 host in brackets: [::1]:8000)."""
    host, colon, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8000)")
    return host, int(port)


def parse_command(argv: Sequence[str]) -> Command:
    """The command an argument list means: the first argument names it when it
    is exactly a command name, else the arguments are a run's."""
    argv = list(argv)
    parser = build_parser()
    if argv[:1] in (["-h"], ["--help"]):
        parser.parse_args(argv[:1])  # prints the help and exits
    named = bool(argv) and argv[0] in COMMANDS
    if not named and argv and (meant := misspelt_command(argv[0])) is not None:
        raise UsageError(
            f"{argv[0]!r} is not a command; did you mean {meant}? "
            f"(a one-word task goes after run: python starter.py run {argv[0]})"
        )
    args, extra = parser.parse_known_args(argv if named else ["run", *argv])
    if extra:
        raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see: python starter.py {args.command} --help)")
    bad = not_utf8(args)
    if bad is not None:
        raise UsageError(f"{bad} is not valid UTF-8 text")
    command: Command
    if args.command == "run":
        command = new_run(args, named)
    elif args.command == "worker":
        command = ServeWorker(argv=tuple(argv[1:]))
    elif args.command == "mcp":
        command = mcp_run(args)
    elif args.command == "reject":
        command = reject_command(args)
    elif args.command == "fork":
        command = fork_command(args)
    elif args.command == "chat":
        command = chat_command(args)
    else:
        command = COMMANDS[args.command](**{k: v for k, v in vars(args).items() if k != "command"})
    if isinstance(command, (Approve, Reject)) and command.call is not None and not CALL_ID.fullmatch(command.call):
        raise UsageError(f"{command.call!r} is not a call id (<step>.<n>, e.g. 3.1; `show` lists the waiting one)")
    if isinstance(command, (Attach, Show, Result, Answer, Approve, Reject, Cancel, Rewind, Fork)) and not command.run_id.strip():
        raise UsageError("the run id is empty")
    if isinstance(command, ListRuns) and not 1 <= command.limit <= LIST_MAX:
        raise UsageError(f"--limit must be from 1 to {LIST_MAX}")
    if isinstance(command, Keygen) and not command.path.strip():
        raise UsageError("the key file's path is empty; usage: python starter.py keygen PATH")
    if isinstance(command, CodecServe) and command.port is not None and not 0 < command.port < 65536:
        raise UsageError("--port must be from 1 to 65535")
    if isinstance(command, RunPage) and not 0 < command.port < 65536:
        raise UsageError(f"--port must be from 1 to 65535, not {command.port}")
    if isinstance(command, RunPage) and not command.host.strip():
        raise UsageError("--host is empty")
    if isinstance(command, McpServe) and command.show_token and command.http is None:
        raise UsageError("--show-token goes with --http (over stdio no token is needed)")
    return command


def misspelt_command(first: str) -> str | None:
    """The command a first argument of one word seems to misspell (`lsit`):
    taken as a task, it would start a run, and the embedded server with it."""
    if first.startswith("-") or not first.isascii() or not first.isalpha():
        return None
    close = difflib.get_close_matches(first.lower(), [name for name in COMMANDS if len(name) > 3], n=1, cutoff=0.75)
    return close[0] if close else None


def not_utf8(args: argparse.Namespace) -> str | None:
    """The first argument that is not valid UTF-8 (it cannot be sent to Temporal), named."""
    new_run = args.command in ("run", "mcp")
    names = {
        "task": "the task",
        "text": "the answer",
        "message": "the message",
        "words": "the reason",
        "edit": "--edit",
        "run_id": "--id" if new_run else "the run id",
        "new_id": "--id",
        "message": "--message",
        "server_command": "--command",
    }
    for dest, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return names.get(dest, f"--{dest.replace('_', '-')}")
    return None


def new_run(args: argparse.Namespace, named: bool) -> Run:
    check_task(args.task, 'python starter.py "what the agent should do"')
    if not named and (meant := misspelt_command(args.task)) is not None and args.task not in COMMANDS:
        raise UsageError(
            f"{args.task!r} is not a command; did you mean {meant}? "
            f"(a one-word task goes after run: python starter.py run [options] {args.task})"
        )
    if not named and args.task in COMMANDS:
        raise UsageError(
            f"{args.task!r} after options is ambiguous: for the command put it first "
            f"(python starter.py {args.task} ...); for a task named so, write python starter.py run [options] {args.task}"
        )
    get_profile(args.agent)  # UnknownAgent is a ValueError with a clear message
    if args.steps_per_run is not None and args.steps_per_run < 1:
        raise UsageError("--steps-per-run must be at least 1")
    check_new_run_options(args)
    check_budget_options(args)
    agents = (args.agent,)
    if args.flow:
        agents = tuple(a.strip() for a in args.agents.split(",") if a.strip())
        if not agents:
            raise UsageError("--agents needs at least one agent")
        for agent in agents:
            get_profile(agent)
        if args.timeout <= FINALIZE_RESERVE_SECONDS:
            raise UsageError(f"--timeout must be more than {FINALIZE_RESERVE_SECONDS:.0f} s (kept for the summary)")
    if not 1 <= args.parallel <= MAX_PARALLEL_STEPS:
        raise UsageError(f"--parallel must be from 1 to {MAX_PARALLEL_STEPS}")
    return Run(
        task=args.task, agent=args.agent, flow=args.flow, agents=agents, max_steps=args.max_steps,
        steps_per_run=args.steps_per_run, timeout=args.timeout, parallel=args.parallel, run_id=args.run_id, detach=args.detach,
        worker=args.worker, config=args.config, llm=args.llm, max_tokens=args.max_tokens, max_cost=args.max_cost,
        approve=approve_mode(args), ask_at_budget=args.ask_at_budget, stream=args.stream,
    )


CALL_ID = re.compile(r"\d{1,9}\.\d{1,3}")
"""A gated call's id: its step and its place in the reply."""


def reject_command(args: argparse.Namespace) -> Reject:
    """reject ID [CALL] REASON: a first word shaped like a call id is the call."""
    words = list(args.words)
    call = words.pop(0) if len(words) > 1 or words and CALL_ID.fullmatch(words[0]) else None
    if len(words) > 1:
        raise UsageError('give the reason as one argument, in quotes: python starter.py reject ID [CALL] "why"')
    return Reject(run_id=args.run_id, call=call, reason=words[0] if words else "", worker=args.worker, config=args.config)


def approve_mode(args: argparse.Namespace) -> ApprovalMode | None:
    return ApprovalMode(args.approve) if args.approve else None


def mcp_run(args: argparse.Namespace) -> Run:
    """`mcp`: a run of the mcp agent; its servers by id, command or URL."""
    check_task(args.task, 'python starter.py mcp "what the agent should do" [--mcp-server ID]')
    if args.server_command is not None and args.url is not None:
        raise UsageError("give --command or --url, not both")
    try:
        command = tuple(shlex.split(args.server_command)) if args.server_command is not None else ()
    except ValueError as e:
        raise UsageError(f"--command: {e}") from None
    if args.server_command is not None and not command:
        raise UsageError("--command is empty")
    if args.url is not None and not is_http_url(args.url):
        raise UsageError(f"--url must be an http(s) URL, not {args.url!r}")
    check_new_run_options(args)
    check_budget_options(args)
    servers = tuple(dict.fromkeys(args.mcp_server))
    ad_hoc = bool(command) or args.url is not None
    return Run(
        task=args.task, agent="mcp", agents=("mcp",), max_steps=args.max_steps, run_id=args.run_id,
        config=args.config, llm=args.llm, mcp_servers=servers if servers or ad_hoc else None,
        mcp_command=command, mcp_url=args.url, max_tokens=args.max_tokens, max_cost=args.max_cost,
        approve=approve_mode(args), ask_at_budget=args.ask_at_budget,
        # A server given on the command line exists only in this process's worker.
        worker="always" if ad_hoc else "auto",
    )

