"""Start an agent run and follow it to the end.

    python starter.py "task"                 # run the manus agent on a task
    python starter.py --agent swe "task"     # another agent
    python starter.py --detach "task"        # start it and print its id only
    python starter.py --attach ID            # follow an existing run (resume after a crash)
    python starter.py --flow planning --agents manus,data_analysis "task"
    python starter.py --answer ID "text"     # answer the run's waiting question
    python starter.py --cancel ID | --list | --show ID | --result ID
    python starter.py --rewind ID --to-step N   # re-run a run from the end of step N

Without TEMPORAL_ADDRESS and with nothing listening on 127.0.0.1:7233, the
embedded Temporal server is started (detached, SQLite under .data/). With no
live worker on the task queue, one runs inside this process until the run
ends; so it does when the run's next task waits a few seconds for a worker
that the task queue only seemed to have (--worker auto, the default).

Exit codes: 0 the run finished its task; 1 it ended otherwise (error,
cancellation, step limit, gave up, terminated, timed out); 2 bad input or
configuration; 3 lost the Temporal server while following (the run is safe;
re-attach); 130 stopped following with Ctrl-C (the run goes on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from datetime import timedelta

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Worker

from agent_model.profiles import BUILTIN_PROFILES, UnknownAgent, get_profile
from activities.token_count import count_prompt_tokens
from activities.tools.registry import schemas
from activities.tools.sandbox import SandboxUnavailable
from agent_model.flow import DEFAULT_FLOW_TIMEOUT_SECONDS, FINALIZE_RESERVE_SECONDS, PlanningFlowInput, PlanningFlowResult
from agent_model.messages import user_message
from agent_model.run import AgentRunInput, AgentRunResult
from config.settings import DEFAULT_TASK_QUEUE, ConfigError, Settings, load_settings
from runtime.cli import cli_runtime, exit_now
from runtime.connection import DEFAULT_ADDRESS, TemporalUnreachable, address_is_explicit, connect, connect_config
from runtime.connection import is_unreachable, port_answers
from runtime.embedded_server import start_embedded_server, web_ui_url
from runtime import run_control
from runtime.follow import ServerLost, Stall, Watch, follow, follow_flow
from runtime.run_control import RunControlError, RunEnded
from runtime.task_queue import live_workers, picked_up
from runtime.worker_factory import GRACEFUL_SHUTDOWN, build_worker, check_worker_settings, harden_worker_process
from workflows import search_attributes
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow

SUMMARY_LENGTH = 120
"""Characters of the task shown as the run's summary in the Web UI."""


class UsageError(Exception):
    """Bad input; the message is one line for the user."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run a durable-manus agent on a task.")
    parser.add_argument("task", nargs="?", help="what the agent should do")
    parser.add_argument("--agent", default="manus", help=f"agent profile ({', '.join(BUILTIN_PROFILES)}); default manus")
    parser.add_argument("--max-steps", type=int, help="override the agent's step limit (each agent's, in a flow)")
    parser.add_argument(
        "--steps-per-run",
        type=int,
        help="go on in a new Temporal execution every N steps (default: when the history grows large)",
    )
    parser.add_argument("--flow", choices=("planning",), help="run a PlanningFlow: plan, then one child agent run per step")
    parser.add_argument(
        "--agents", default="manus", help="with --flow: executor agents, comma-separated; the first is primary (default manus)"
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_FLOW_TIMEOUT_SECONDS,
        help=f"with --flow: the flow's time bound in seconds (default {DEFAULT_FLOW_TIMEOUT_SECONDS:.0f})",
    )
    parser.add_argument("--config", help="config file (default: config/config.toml or $DURABLE_MANUS_CONFIG)")
    parser.add_argument("--id", dest="run_id", help="workflow id for the new run (default: generated)")
    parser.add_argument("--detach", action="store_true", help="start the run, print its id and exit")
    commands = parser.add_mutually_exclusive_group()
    commands.add_argument("--attach", metavar="ID", help="follow an existing run to its end")
    commands.add_argument("--answer", nargs=2, metavar=("ID", "TEXT"), help="answer the question a run is waiting on")
    commands.add_argument("--cancel", metavar="ID", help="cancel a run (a flow cancels its running step too)")
    commands.add_argument("--list", action="store_true", help="recent runs: id, agent or flow, state, step, age")
    commands.add_argument("--show", metavar="ID", help="a run's transcript: thoughts, tool calls, observations, tokens")
    commands.add_argument("--result", metavar="ID", help="a finished run's result")
    commands.add_argument("--rewind", metavar="ID", help="start a run again from the end of step --to-step")
    parser.add_argument("--to-step", type=int, help="with --rewind: keep steps 1..N, re-run the rest (0 = all)")
    parser.add_argument(
        "--worker",
        choices=("auto", "always", "never"),
        default="auto",
        help="run an in-process worker: auto = when no live worker serves the run (default)",
    )
    return parser.parse_args(argv)


def command_of(args: argparse.Namespace) -> str:
    for name in ("attach", "answer", "cancel", "list", "show", "result", "rewind"):
        if getattr(args, name):
            return name
    return "run"


ARGUMENT_NAMES = {"task": "the task", "run_id": "--id"}
"""How an argument is named in messages, where its option name is not its dest."""


def not_utf8(args: argparse.Namespace) -> str | None:
    """The first argument that is not valid UTF-8 (it cannot be sent to Temporal), named."""
    for name, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return ARGUMENT_NAMES.get(name, f"--{name.replace('_', '-')}")
    return None


def validate(args: argparse.Namespace) -> None:
    bad = not_utf8(args)
    if bad is not None:
        raise UsageError(f"{bad} is not valid UTF-8 text")
    command = command_of(args)
    if command == "rewind" and args.to_step is None:
        raise UsageError("--rewind needs --to-step N")
    if args.to_step is not None and command != "rewind":
        raise UsageError("--to-step goes with --rewind")
    if command != "run":
        if args.task:
            raise UsageError(f"give either a task or --{command}, not both")
        return
    if not args.task or not args.task.strip():
        raise UsageError('the task is empty; usage: python starter.py "what the agent should do"')
    get_profile(args.agent)  # UnknownAgent is a ValueError with a clear message
    if args.steps_per_run is not None and args.steps_per_run < 1:
        raise UsageError("--steps-per-run must be at least 1")
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    if args.flow:
        args.agents = [a.strip() for a in args.agents.split(",") if a.strip()]
        if not args.agents:
            raise UsageError("--agents needs at least one agent")
        for agent in args.agents:
            get_profile(agent)
        if args.timeout <= FINALIZE_RESERVE_SECONDS:
            raise UsageError(f"--timeout must be more than {FINALIZE_RESERVE_SECONDS:.0f} s (kept for the summary)")


EXISTING_SERVER_WAIT = 5.0
"""Seconds to wait for a server that should already be up."""
NEW_SERVER_WAIT = 30.0
"""Seconds to wait for the embedded server we just started."""


def ensure_server(out) -> float:
    """Start the embedded server when no server is configured and none answers;
    returns how long to wait for the server to answer."""
    if address_is_explicit() or port_answers(DEFAULT_ADDRESS):
        return EXISTING_SERVER_WAIT
    directory = start_embedded_server()
    print(
        f"Started the embedded Temporal server (data in {directory}, Web UI http://127.0.0.1:8233); "
        "it keeps running after this command.",
        file=out,
    )
    return NEW_SERVER_WAIT


async def start_run(client: Client, settings: Settings, args: argparse.Namespace) -> WorkflowHandle:
    registered = await run_control.search_attributes_registered(client)
    agent_name = search_attributes.FLOW_AGENT_NAME if args.flow else args.agent
    attributes = search_attributes.initial(agent_name) if registered else None
    summary = " ".join(args.task.split())
    if len(summary) > SUMMARY_LENGTH:
        summary = summary[: SUMMARY_LENGTH - 1] + "…"
    if args.flow:
        return await client.start_workflow(
            PlanningFlowWorkflow.run,
            PlanningFlowInput(
                task=args.task,
                agents=args.agents,
                timeout_seconds=args.timeout,
                max_steps_per_agent=args.max_steps,
                steps_per_run=args.steps_per_run,
            ),
            id=args.run_id or f"flow-{uuid.uuid4().hex[:12]}",
            task_queue=settings.task_queue,
            # Temporal's bound; the flow ends itself a little before it, with a result.
            execution_timeout=timedelta(seconds=args.timeout),
            static_summary=f"planning flow: {summary}",
            search_attributes=attributes,
        )
    started = await client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=args.task, agent=args.agent, max_steps=args.max_steps, steps_per_run=args.steps_per_run),
        id=args.run_id or f"{args.agent}-{uuid.uuid4().hex[:12]}",
        task_queue=settings.task_queue,
        static_summary=summary,
        search_attributes=attributes,
    )
    # Not bound to the first execution: queries and the result follow the run
    # when it continues as new.
    return client.get_workflow_handle(
        started.id, first_execution_run_id=started.first_execution_run_id, result_type=AgentRunResult
    )


async def existing_run(client: Client, args: argparse.Namespace) -> WorkflowHandle:
    """The run named by --attach; sets args.flow when it is a PlanningFlow."""
    description = await run_control.describe(client, args.attach)
    if run_control.is_flow(description):
        args.flow = "planning"
    return client.get_workflow_handle(args.attach, result_type=run_control.result_type(description))


def report_flow(result: PlanningFlowResult, out) -> int:
    print(f"\nflow {result.outcome.value}: {result.usage.total_tokens} tokens, {result.replans} replan(s)", file=out)
    if result.note:
        print(f"note: {result.note}", file=out)
    if result.summary:
        print(f"\n{result.summary}", file=out)
    return 0 if result.succeeded else 1


def report(result: AgentRunResult, out) -> int:
    print(f"\n{result.state.value} ({result.stop_reason.value}) after {result.steps_taken} steps, "
          f"{result.usage.total_tokens} tokens", file=out)
    if result.note:
        print(f"note: {result.note}", file=out)
    if result.final_answer:
        print(f"\n{result.final_answer}", file=out)
    return 0 if result.succeeded else 1


WORKER_COMMANDS = {"run", "attach", "rewind", "answer", "show", "cancel"}
"""Commands that need a worker to make progress or answer queries and updates."""
PICKUP_SECONDS = 3.0
"""With --detach, how long to watch for a worker taking the new run."""
WORKER_STOP_SECONDS = GRACEFUL_SHUTDOWN.total_seconds() + 10
"""Longest wait for the in-process worker to stop: its activities' grace
period, and time to report them to the server."""
EXIT_SERVER_LOST = 3


def worker_command(settings: Settings) -> str:
    """The command that starts a worker for this starter's task queue."""
    queue = settings.task_queue
    return "python worker.py" if queue == DEFAULT_TASK_QUEUE else f"TEMPORAL_TASK_QUEUE={queue} python worker.py"


class InProcessWorker:
    """The worker this process runs for the command, if any.

    It starts at once when no worker is alive on the task queue (or with
    --worker always). When the task queue lists workers that may be alive, it
    is only made ready: it starts if the run's next task then waits for a
    worker (see Watch), because the list can name a worker that exited a minute
    ago, on another machine. Several workers on one queue are fine, so a wrong
    guess costs an idle worker, never a stuck run.
    """

    def __init__(self, client: Client, settings: Settings, stack: contextlib.AsyncExitStack) -> None:
        self.client, self.settings, self.stack = client, settings, stack
        self.worker: Worker | None = None
        self.unavailable: str | None = None
        """Why this process cannot run a worker, when it cannot."""
        self.running = False
        self.live: list[str] = []
        """Workers the task queue lists that may be alive."""

    def _build(self) -> Worker:
        self.settings.require_workspace_root()
        return build_worker(self.client, self.settings, check_worker_settings(self.settings))

    async def prepare(self, mode: str) -> None:
        """Checked before anything starts: a worker that is needed and cannot
        run is an error now, not a half-begun run."""
        if mode == "never":
            self.unavailable = "--worker never"
            return
        if mode == "auto":
            self.live = await live_workers(self.client, self.settings.task_queue)
        if mode == "always" or not self.live:
            self.worker = self._build()
            await self.start()
            return
        try:
            self.worker = self._build()
        except (ConfigError, SandboxUnavailable) as e:
            self.unavailable = str(e)

    async def start(self) -> bool:
        """Start the worker if it is ready and not running; True when it runs.
        It stops when the command's AsyncExitStack closes."""
        if not self.running and self.worker is not None:
            harden_worker_process()
            await self.worker.__aenter__()
            self.stack.push_async_exit(self._stop)
            self.running = True
        return self.running

    async def _stop(self, exc_type, exc, tb) -> bool:
        assert self.worker is not None
        if exc_type is ServerLost or is_unreachable(exc):
            return False  # a worker cannot hand its tasks back to a server that is gone
        try:
            await asyncio.wait_for(self.worker.__aexit__(exc_type, exc, tb), WORKER_STOP_SECONDS)
        except asyncio.TimeoutError:
            pass  # left behind: the process exits without waiting for it (see main)
        return False

    async def start_unless_answered(self, run_id: str) -> None:
        """For a command that needs a worker to answer for `run_id` now: start
        this one unless a live worker answers for the run."""
        if not self.running and self.worker is not None and not await run_control.worker_answers(self.client, run_id):
            await self.start()

    async def on_stall(self, run_id: str, waited: float) -> Stall | None:
        if self.running:
            return None
        if await self.start():
            listed = ", ".join(self.live[:3])
            return Stall(
                f"no worker took run {run_id}'s task within {waited:.0f} s (the task queue lists {listed}, which "
                "has probably exited); running one in this process",
                resolved=True,
            )
        if self.unavailable == "--worker never":
            fix = f"Start one with `{worker_command(self.settings)}`, or run this command without --worker never."
        else:
            fix = f"Start one with `{worker_command(self.settings)}` (this starter cannot run one: {self.unavailable})."
        return Stall(
            f"waiting for a worker: no worker has taken run {run_id}'s next task for {waited:.0f} s, and nothing "
            f"runs until one does. {fix}"
        )


async def report_worker_for_detached(client: Client, settings: Settings, handle: WorkflowHandle, out) -> None:
    """Say whether a worker took the detached run, and if none did, how to get one."""
    live = await live_workers(client, settings.task_queue)
    if live:
        deadline = time.monotonic() + PICKUP_SECONDS
        while time.monotonic() < deadline:
            description = await handle.describe()
            if picked_up(description.raw_description):
                print(f"a worker is running ({', '.join(live[:3])}) and has taken the run", file=out)
                return
            await asyncio.sleep(0.2)
        why = f"no worker has taken the run within {PICKUP_SECONDS:.0f} s (the one the task queue lists has probably exited)"
    else:
        why = f"no worker is running for task queue {settings.task_queue}"
    print(
        f"{why}: the run waits at step 0 until one does. Start one with `{worker_command(settings)}`, "
        f"or follow the run with `python starter.py --attach {handle.id}`, which runs one in its process.",
        file=out,
    )


def check_task_fits(settings: Settings, args: argparse.Namespace) -> None:
    """Refuse a task that alone exceeds the model's input limit, before starting."""
    agents = args.agents if args.flow else [args.agent]
    for agent in agents:
        profile = get_profile(agent)
        llm = settings.llm_profile(profile.llm)
        if llm.max_input_tokens is None:
            continue
        needed = count_prompt_tokens(
            llm.model, [user_message(args.task)], profile.system_prompt, schemas(profile.tools)
        )
        if needed > llm.max_input_tokens:
            raise UsageError(
                f"the task needs {needed} input tokens with agent {agent}, over max_input_tokens "
                f"{llm.max_input_tokens} of {llm.model}; shorten it"
            )


async def main_async(args: argparse.Namespace, out=sys.stdout) -> int:
    settings = load_settings(args.config)
    command = command_of(args)
    if command == "run":
        check_task_fits(settings, args)
    client = await connect(wait_seconds=ensure_server(out), runtime=cli_runtime())
    if command == "list":
        await run_control.list_runs(client, out)
        return 0
    if command == "result":
        result = await run_control.finished_result(client, args.result)
        return report_flow(result, out) if isinstance(result, PlanningFlowResult) else report(result, out)

    async with contextlib.AsyncExitStack() as stack:
        worker = InProcessWorker(client, settings, stack)
        if command in WORKER_COMMANDS and not args.detach:
            await worker.prepare(args.worker)

        if command in ("answer", "show", "cancel"):
            run_id = args.answer[0] if command == "answer" else getattr(args, command)
            await worker.start_unless_answered(run_id)
            if command == "answer":
                await run_control.answer(client, args.answer[0], args.answer[1], out)
            elif command == "show":
                await run_control.show(client, args.show, out)
            else:
                await run_control.cancel(client, args.cancel, out)
            return 0

        if command == "rewind":
            await run_control.rewind(client, args.rewind, args.to_step, out)
            args.attach = args.rewind
        if args.attach:
            handle = await existing_run(client, args)
        else:
            handle = await start_run(client, settings, args)
        args.run_id = handle.id
        print(f"run {handle.id}\nWeb UI: {web_ui_url(handle.id, client.namespace)}", file=out, flush=True)
        if args.detach:
            await report_worker_for_detached(client, settings, handle, out)
            return 0
        watch = Watch(client, worker.on_stall)
        if args.flow:
            return report_flow(await follow_flow(client, handle, out, watch=watch), out)
        return report(await follow(handle, out, watch=watch), out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        validate(args)
        # Not asyncio.run: its clean-up would wait for every task left, and an
        # in-process worker whose server is gone may never end. The process
        # exits with os._exit (exit_now) right after this returns.
        return asyncio.Runner().run(main_async(args))
    except (
        UsageError, UnknownAgent, ConfigError, TemporalUnreachable, FileNotFoundError, RunControlError, SandboxUnavailable
    ) as e:
        print(f"starter: {e}", file=sys.stderr)
        return 2
    except RunEnded as e:
        print(f"starter: {e}", file=sys.stderr)
        return 1
    except ServerLost:
        return EXIT_SERVER_LOST  # the line saying so is out already
    except RPCError as e:
        if is_unreachable(e):
            target = args.run_id or args.attach
            again = f"; re-attach with `python starter.py --attach {target}`" if target else ""
            print(
                f"starter: lost the Temporal server at {connect_config()['target_host']} ({e.message}){again}",
                file=sys.stderr,
            )
            return EXIT_SERVER_LOST
        print(f"starter: Temporal refused the request: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        target = args.run_id or args.attach or "<run id>"
        print(f"\nstopped following; the run goes on. Resume with: python starter.py --attach {target}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    exit_now(main())
