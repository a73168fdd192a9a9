"""Start an agent run and follow it to the end, or control the runs there are.

    python starter.py "task"                       # run the manus agent on a task (short for: run "task")
    python starter.py run --agent swe "task"       # another agent ("run" may be left out here too)
    python starter.py run --detach "task"          # start it and print its id only
    python starter.py run --flow planning --agents manus,data_analysis "task"
    python starter.py attach ID                    # follow an existing run (resume after a crash)
    python starter.py list | show ID | result ID   # recent runs, a transcript, a finished run's result
    python starter.py answer ID "text"             # answer the run's waiting question
    python starter.py cancel ID
    python starter.py rewind ID --to-step N        # re-run a run from the end of step N
    python starter.py worker                       # a worker, as `python worker.py` (same options)
    python starter.py server                       # start the embedded Temporal server, detached
    python starter.py mcp-server [--http HOST:PORT] [--with-worker]   # MCP tools for the runs (stdio by default)
    python starter.py keygen PATH                  # a payload key file, or a new key in one ([encryption] key_file)
    python starter.py codec-server [--port 8238]   # decode encrypted payloads for the Web UI and the temporal CLI
    python starter.py ui [--port N]                # the run page in a browser (docs/run-page.md)

Which command: when the first argument is exactly one of the command names,
it is the command; anything else is a run's arguments. A task that is itself a
command name goes after `run`: `python starter.py run list`.

run, attach, rewind and ui start the embedded Temporal server (detached, SQLite
under .data/) when TEMPORAL_ADDRESS is unset and nothing listens on
127.0.0.1:7233. list, show, result, answer and cancel never start a server:
with none to reach they say so in one line. With no live worker on the task
queue, one is started in the background (worker.py --idle-exit, detached like
the embedded server, its log in .data/): it outlives this command and exits
once no run has been open on the queue for DURABLE_MANUS_WORKER_IDLE_EXIT
seconds; so it is when the run's next task waits a few seconds for a worker
that the task queue only seemed to have (--worker auto, the default).
--worker always runs the worker inside this process until the command ends.

Exit codes: 0 the run finished its task; 1 it ended otherwise (error,
cancellation, step limit, gave up, terminated, timed out); 2 bad input or
configuration; 3 lost the Temporal server while following (the run is safe;
re-attach); 130 stopped following with Ctrl-C (the last line says where the run goes on).
"""

from __future__ import annotations

import sys

from runtime.cli import exit_now, pipe_safe
from runtime.command_line import ServeWorker, parse_command
from runtime.terminal_text import inert
from runtime.user_errors import USER_ERRORS, UsageError


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, then import only what the command needs: --help and
    bad input never load the worker stack, and only `worker` does."""
    try:
        command = parse_command(sys.argv[1:] if argv is None else argv)
    except USER_ERRORS as e:
        print(f"starter: {inert(e)}", file=sys.stderr)
        return 2
    if isinstance(command, ServeWorker):
        import worker

        return worker.main(list(command.argv))
    from runtime.commands import run_command

    return run_command(command)


if __name__ == "__main__":
    exit_now(pipe_safe(main))
