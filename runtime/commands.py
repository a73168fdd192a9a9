"""Carry out a parsed starter command (every one but `worker`, which is worker.py's)
and turn what goes wrong into one line and an exit code."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from agent_model.flow import PlanningFlowResult
from agent_model.outcome_words import StateClass, agent_outcome, flow_outcome
from agent_model.run import AgentRunResult
from config.settings import Settings, load_settings
from runtime.ad_hoc_mcp import with_ad_hoc_server
from runtime import approvals, fork, run_control, run_list
from agent_model.approval_desk import ApprovalAction
from runtime.command_line import (
    FOLLOWS_A_RUN, Answer, Approve, Attach, Cancel, Chat, CodecServe, Command, Fork, Keygen, ListRuns, McpServe, Reject,
    Result, Rewind, Run, RunPage, ServeWorker, Show, StartServer,
)
from runtime.connection import connect_config, is_unreachable
from runtime.web_ui_link import run_link
from runtime.follow import ServerLost, Watch, follow, follow_flow
from runtime.in_process_worker import InProcessWorker, refuse_unrunnable_worker
from agent_model.budget import spent_text
from runtime.run_start import (
    check_task_fits, flow_llms, report_worker_for_detached, run_budget, run_llms, start_agent_run, start_planning_flow,
)
from runtime.server_choice import connect_for, embedded_server_missing, start_server
from runtime.terminal_text import inert, print_ending
from runtime.user_errors import USER_ERRORS, RunEnded, UsageError, encrypted_without_key


@dataclass
class Following:
    """The run a command follows, once known: the lines that say how to resume name it."""

    run_id: str | None = None
    worker: InProcessWorker | None = None
    """The command's worker: it says what becomes of the run on Ctrl-C."""



def report_flow(result: PlanningFlowResult, out) -> int:
    spent = f"{spent_text(result.usage, result.cost)}, {result.replans} replan(s)"
    print_ending(f"flow {flow_outcome(result).sentence()} ({spent})", result.note, result.summary, out)
    return 0 if result.succeeded else 1


def report(result: AgentRunResult, out) -> int:
    steps = f"{result.steps_taken} step{'' if result.steps_taken == 1 else 's'}"
    spent = f"{steps}, {spent_text(result.usage, result.cost)}"
    print_ending(f"{agent_outcome(result).sentence()} ({spent})", result.note, result.final_answer, out)
    return 0 if result.succeeded else 1


async def run_handle(
    client: Client, settings: Settings, command: Run | Attach | Rewind | Fork, out
) -> tuple[WorkflowHandle, bool]:
    """The run the command follows (started, rewound, forked or found), and whether it is a PlanningFlow."""
    if isinstance(command, Run):
        if command.flow:
            flow = await start_planning_flow(
                client, settings, command.task, agents=command.agents, timeout=command.timeout,
                max_steps=command.max_steps, steps_per_run=command.steps_per_run, run_id=command.run_id, llm=command.llm,
                max_tokens=command.max_tokens, max_cost=command.max_cost,
                approve=command.approve, ask_at_budget=command.ask_at_budget, parallel=command.parallel,
            )
            return flow, True
        return await start_agent_run(
            client, settings, command.task, agent=command.agent, mcp_servers=command.mcp_servers,
            max_steps=command.max_steps, steps_per_run=command.steps_per_run, run_id=command.run_id, llm=command.llm,
            max_tokens=command.max_tokens, max_cost=command.max_cost,
            approve=command.approve, ask_at_budget=command.ask_at_budget,
        ), False
    if isinstance(command, Fork):
        handle = await fork.start_fork(
            client, settings, command.run_id, command.from_step, task=command.task, message=command.message,
            llm=command.llm, run_id=command.new_id,
        )
        print(f"forked {command.run_id} at step {command.from_step}", file=out)
        return handle, False
    if isinstance(command, Rewind):
        await run_control.rewind(client, command.run_id, command.to_step, out)
    description = await run_control.describe(client, command.run_id)
    handle = client.get_workflow_handle(command.run_id, result_type=run_control.result_type(description))
    return handle, run_control.is_flow(description)


async def execute(command: Command, following: Following | None = None, out: TextIO | None = None) -> int:
    """Carry out one command (not `worker`, which is worker.py's); returns the exit code.
    `out` defaults to sys.stdout as it is at the call."""
    out = out or sys.stdout
    if isinstance(command, ServeWorker):
        raise UsageError("`worker` runs worker.py's main, not a command of this process")
    if isinstance(command, Keygen):
        from runtime.keygen import keygen

        return keygen(command.path, out)
    if isinstance(command, CodecServe):
        from runtime import codec_server

        return await codec_server.serve(load_settings(command.config), command.port, out)
    if isinstance(command, StartServer):
        return await start_server(out, load_settings(command.config).encryption)
    if isinstance(command, McpServe):
        try:
            from runtime import mcp_server  # here: no other command needs the MCP SDK
        except ModuleNotFoundError as e:
            raise UsageError(f"mcp-server needs the MCP SDK ({e}): pip install mcp") from None
        return await mcp_server.serve(command.config, command.http, command.worker, command.show_token)
    if isinstance(command, RunPage):
        from runtime.run_page import serve  # here: only `ui` needs the page

        return await serve.serve(command, out, following)
    settings = load_settings(command.config)
    if isinstance(command, FOLLOWS_A_RUN):
        for note in settings.notes:  # config keys of OpenManus's that are not used here
            print(f"config: {note}", file=sys.stderr)
    if isinstance(command, Run):
        settings, mcp_servers = with_ad_hoc_server(settings, command)
        command = replace(command, mcp_servers=mcp_servers)
        if command.agent == "mcp" and not command.mcp_servers and not settings.mcp_servers:
            # Not an error: the workers' mcp.json may have servers this machine's has not.
            print(
                "starter: no MCP server is configured here (config/mcp.json); the run gets the workers' "
                "servers, if any (or give --command CMD or --url URL)",
                file=sys.stderr,
            )
        check_task_fits(settings, command.task, command.agents, command.llm)
        # Refuses --max-cost without prices before any server is reached; the start resolves it again.
        llms = flow_llms(command.agents, command.llm) if command.flow else run_llms(command.agent, command.llm)
        run_budget(settings, llms, command.max_tokens, command.max_cost)
    if isinstance(command, Chat):
        chat_without_terminal_is_refused(command)
    if isinstance(command, FOLLOWS_A_RUN) and not (isinstance(command, (Run, Rewind, Fork)) and command.detach):
        refuse_unrunnable_worker(settings, command.worker, embedded_server_missing())
    client = await connect_for(command.name, isinstance(command, FOLLOWS_A_RUN), out, settings.encryption)
    if isinstance(command, ListRuns):
        state = StateClass(command.state) if command.state else None
        await run_list.list_runs(client, out, command.limit, state)
        return 0
    if isinstance(command, Result):
        result = await run_control.finished_result(client, command.run_id)
        return report_flow(result, out) if isinstance(result, PlanningFlowResult) else report(result, out)

    detach = isinstance(command, (Run, Rewind, Fork)) and command.detach
    async with contextlib.AsyncExitStack() as stack:
        worker = InProcessWorker(client, settings, stack, out if isinstance(command, FOLLOWS_A_RUN) else None)
        if following is not None:
            following.worker = worker
        if not detach:
            await worker.prepare(command.worker)
        if isinstance(command, (Answer, Approve, Reject, Show, Cancel)):
            await worker.start_unless_answered(command.run_id)
            if isinstance(command, Answer):
                await run_control.answer(client, command.run_id, command.text, out)
            elif isinstance(command, Approve):
                action = ApprovalAction.APPROVE if command.edit is None else ApprovalAction.EDIT
                await approvals.decide(client, command.run_id, command.call, action, "", command.edit, out)
            elif isinstance(command, Reject):
                await approvals.decide(client, command.run_id, command.call, ApprovalAction.REJECT, command.reason, None, out)
            elif isinstance(command, Show):
                await fork.show_origin(client, command.run_id, out)
                await run_control.show(client, command.run_id, out)
                await approvals.show_pending(client, command.run_id, out)
            else:
                await run_control.cancel(client, command.run_id, out)
            return 0

        if isinstance(command, Chat):
            return await run_chat(client, settings, command, worker, out)
        handle, is_flow = await run_handle(client, settings, command, out)
        if following is not None:
            following.run_id = handle.id
        print(f"run {handle.id}\nWeb UI: {await run_link(client, handle)}", file=out, flush=True)
        from runtime.run_page.page_link import page_link_for  # here: list and show import nothing of activities/

        page = page_link_for(client, handle.id)
        if page is not None:
            print(f"run page: {page}", file=out, flush=True)
        if isinstance(command, Run):  # the gates a user gets without asking, said before the first call
            print(settings.approval.policy_for(command.agents[0], command.approve).summary(), file=out, flush=True)
        if detach:
            await report_worker_for_detached(client, settings, handle, out)
            return 0
        watch = Watch(client, worker.on_stall, lost_retry_seconds=settings.server_wait_seconds)
        live = live_root(settings, command)
        if is_flow:
            return report_flow(await follow_flow(client, handle, out, watch=watch, live_root=live), out)
        return report(await follow(handle, out, watch=watch, live_root=live), out)


def live_root(settings: Settings, command: Command) -> Path | None:
    """The workspace root whose live journal the follower reads ([live] print,
    --no-stream); None: the thought is not shown. A journal is found only
    where the run's worker writes it, the same root on this machine (a worker
    started with the command may make the root after the run starts)."""
    wanted = getattr(command, "stream", True) and settings.live.print
    return settings.workspace_root if wanted else None


def chat_without_terminal_is_refused(command: Chat) -> None:
    if command.message is None and not sys.stdin.isatty():
        target = command.run_id or "ID"
        raise UsageError(
            f'chat without a message asks for it in a terminal, and this input is none: python starter.py chat {target} "message"'
        )


async def run_chat(client: Client, settings: Settings, command: Chat, worker: InProcessWorker, out: TextIO) -> int:
    """`chat`: one follow-up (exit 0 when its turn finished its task), or the prompt loop."""
    from runtime import chat  # here: only chat needs it

    watch = Watch(client, worker.on_stall, lost_retry_seconds=settings.server_wait_seconds)
    if command.run_id is not None:
        await worker.start_unless_answered(command.run_id)  # a closed run's state is read by replaying it
    if command.message is not None:
        assert command.run_id is not None
        done = await chat.send_and_follow(client, settings, command.run_id, command.message, out, watch, sys.stdin.isatty())
        print(chat.come_back_line(command.run_id, settings), file=out)
        return 0 if done else 1
    new_run = None
    if command.run_id is None:
        new_run = dict(
            agent=command.agent, max_steps=command.max_steps, steps_per_run=command.steps_per_run, run_id=command.new_id,
            llm=command.llm, max_tokens=command.max_tokens, max_cost=command.max_cost, approve=command.approve,
        )
    return await chat.conversation(client, settings, command.run_id, sys.stdin, out, watch, new_run)


EXIT_SERVER_LOST = 3


def run_command(command: Command) -> int:
    """Carry out `command`; its exit code, every failure said in one line on stderr."""
    following = Following(command.run_id) if isinstance(command, FOLLOWS_A_RUN) else None
    if isinstance(command, RunPage):
        following = Following()
    try:
        # Not asyncio.run: its clean-up would wait for every task left, and an
        # in-process worker whose server is gone may never end. The process
        # exits with os._exit (exit_now) right after this returns.
        return asyncio.Runner().run(execute(command, following))
    except USER_ERRORS as e:
        print(f"starter: {inert(e)}", file=sys.stderr)
        return 1 if isinstance(e, RunEnded) else 2
    except ServerLost:
        return EXIT_SERVER_LOST  # the line saying so is out already
    except RPCError as e:
        if is_unreachable(e):
            target = following.run_id if following else None
            again = f"; re-attach with `python starter.py attach {target}`" if target else ""
            print(
                f"starter: lost the Temporal server at {connect_config()['target_host']} ({e.message}){again}",
                file=sys.stderr,
            )
            return EXIT_SERVER_LOST
        print(f"starter: Temporal refused the request: {inert(e.message)}", file=sys.stderr)
        return 2
    except KeyError as e:
        refusal = encrypted_without_key(e)
        if refusal is None:
            raise
        print(f"starter: {refusal}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if isinstance(command, RunPage):
            from runtime.run_page.serve import stopped_line

            print(f"\n{stopped_line(following.worker if following else None)}", file=sys.stderr)
        elif following is None:
            print("\nstarter: interrupted", file=sys.stderr)
        else:
            target = following.run_id or "<run id>"
            if following.worker is None:
                line = f"stopped following; the run goes on. Resume with: python starter.py attach {target}"
            else:
                line = following.worker.interrupted_line(target)
            print(f"\n{line}", file=sys.stderr)
        return 130
