"""`python starter.py ui`: serve the run page until Ctrl-C.

Like `run`, it uses the server that server_choice.py picks (the embedded one,
started when nothing answers and none is configured) and makes sure a worker
serves the task queue (a background one when none is live, --worker auto), so
runs started from the page make progress. It prints the page's link once:
the link carries the token, which is new at every start and kept nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any, TextIO

from config.settings import load_settings
from runtime.listen_probe import listen_problem
from runtime.command_line import RunPage
from runtime.in_process_worker import InProcessWorker, refuse_unrunnable_worker, worker_command
from runtime.run_page.app import RunPageApp
from runtime.run_page.guard import LOOPBACK_HOSTS, Guard, url_host
from runtime.run_page.http_server import HttpServer
from runtime.run_page.page_link import page_recorded
from runtime.server_choice import connect_for, embedded_server_missing

STOPPED_LINE = "ui: the run page stopped; the runs go on"


def stopped_line(worker: InProcessWorker | None) -> str:
    """What Ctrl-C leaves behind: the runs, and a worker unless it ran in this process."""
    if worker is not None and worker.running:
        return (
            "ui: the run page stopped, and with it this process's worker (--worker always): open runs wait "
            f"for a worker (start one with: {worker_command(worker.settings)})"
        )
    return STOPPED_LINE


class PortTaken(Exception):
    """The page cannot listen where asked; the message is the one line to print."""


def taken_line(host: str, port: int, error: OSError) -> str:
    return (
        f"ui: cannot listen on {url_host(host)}:{port}: {error.strerror or error}; "
        "another program (another `ui`?) has it: choose another with --port N"
    )


def check_can_listen(host: str, port: int) -> None:
    """Fail in one line now, before a server or a worker is started."""
    if (problem := listen_problem(host, port)) is not None:
        raise PortTaken(taken_line(host, port, problem))


async def serve(command: RunPage, out: TextIO | None = None, following: Any = None) -> int:
    """Serve until cancelled (Ctrl-C); `following` (runtime/commands.py Following) is
    given this command's worker, for the line Ctrl-C prints."""
    out = out or sys.stdout
    try:
        check_can_listen(command.host, command.port)
    except PortTaken as e:
        print(str(e), file=sys.stderr)
        return 1
    settings = load_settings(command.config)
    refuse_unrunnable_worker(settings, command.worker, embedded_server_missing())
    client = await connect_for(command.name, True, out, settings.encryption)
    async with contextlib.AsyncExitStack() as stack:
        worker = InProcessWorker(client, settings, stack, out)
        if following is not None:
            following.worker = worker
        await worker.prepare(command.worker)
        guard = Guard(command.host, command.port)
        app = RunPageApp(client, settings, guard, worker.start_unless_answered)
        server = HttpServer(app.handle, app.finish)
        try:
            await server.listen(command.host, command.port)
        except OSError as e:
            print(taken_line(command.host, command.port, e), file=sys.stderr)
            return 1
        stack.push_async_callback(server.close)
        stack.enter_context(page_recorded(command.host, command.port, client))
        if command.host not in LOOPBACK_HOSTS:
            print(
                f"ui: listening on {command.host}, not a loopback address: plain HTTP carries the token "
                "unencrypted, so keep it to networks you trust (or put TLS in front)",
                file=sys.stderr,
            )
        print(
            f"ui: the run page serves at {guard.origin} for the runs of {client.service_client.config.target_host} "
            f"(namespace {client.namespace}); open it with this link, which carries its token (new at each start):\n"
            f"  {guard.token_link()}\n"
            "ui: Ctrl-C stops the page; the runs go on",
            file=out,
            flush=True,
        )
        await asyncio.Event().wait()  # until Ctrl-C cancels this task
    return 0
