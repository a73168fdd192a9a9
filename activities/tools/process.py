"""Run a tool's child process with a timeout, resource limits and clipped output.

The child leads its own process group, so a timeout or a cancellation kills
everything it started, not just the child itself. (A grandchild that makes its
own session escapes this; containing that needs cgroups or a container.)
"""

from __future__ import annotations

import asyncio
import ctypes
import codecs
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_model.tool_io import ToolResult
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace

HEARTBEAT_INTERVAL = 2.0
"""Seconds between activity heartbeats while a child runs: well inside the
tools' 15 s heartbeat timeout, so a dead worker or a cancellation is seen fast."""

OUTPUT_DRAIN_GRACE = 0.5
"""Seconds to keep reading after the child exits. A background grandchild may
hold the output pipe open indefinitely; its later output is not collected."""

REAP_TIMEOUT = 5.0
"""Seconds to wait for a SIGKILLed child to be reaped (normally immediate)."""

GiB = 1024**3


@dataclass(frozen=True)
class ProcessLimits:
    """Resource limits applied to the child and everything it starts."""

    address_space_bytes: int = 2 * GiB
    """Virtual memory; large allocations fail (Python: MemoryError)."""
    cpu_seconds: int | None = None
    """CPU time; None means the run's timeout + 5 s."""
    file_size_bytes: int = GiB
    """Largest file the child may write."""
    open_files: int = 256
    """File descriptors per process."""
    processes: int = 512
    """RLIMIT_NPROC. It counts all processes of the user, not just the child's,
    and the kernel does not enforce it for root."""


@dataclass
class ProcessOutcome:
    output: str
    """stdout and stderr interleaved, clipped to max_output characters."""
    exit_code: int | None
    """Negative for death by signal; None if the process could not be reaped."""
    timed_out: bool


def _failure_note(outcome: ProcessOutcome, timeout: float) -> str | None:
    """One line saying why a run failed, for the model; None if it succeeded."""
    if outcome.timed_out:
        return f"Execution timed out after {timeout:g} s; the process was killed."
    if outcome.exit_code is None:
        return "The process could not be stopped."
    if outcome.exit_code < 0:
        return f"The process was killed by signal {_signal_name(-outcome.exit_code)}."
    if outcome.exit_code > 0:
        return f"Exit code: {outcome.exit_code}"
    return None


def _with_note(output: str, note: str) -> str:
    """Output followed by a note on its own line."""
    if output and not output.endswith("\n"):
        output += "\n"
    return output + note


def sandbox_env(run_dir: Path) -> dict[str, str]:
    """A minimal environment for tool processes, built from scratch so no worker
    secret (API keys, tokens) can leak into them."""
    tmp_dir = run_dir / ".tmp"
    tmp_dir.mkdir(exist_ok=True)
    interpreter_dir = os.path.dirname(sys.executable)
    worker_path = os.environ.get("PATH") or os.defpath
    return {
        # The worker's interpreter first, so `python` means the venv's.
        "PATH": os.pathsep.join([interpreter_dir, worker_path]),
        "HOME": str(run_dir),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": str(tmp_dir),
        "PYTHONUNBUFFERED": "1",
        "TERM": "dumb",
    }


async def run_limited(
    argv: list[str],
    *,
    cwd: Path,
    env: dict,
    stdin: bytes | None,
    timeout: float,
    limits: ProcessLimits,
    max_output: int,
    cgroup_procs: str | None = None,
) -> ProcessOutcome:
    """Run argv to completion or until `timeout` seconds pass.

    On timeout, and when the calling task is cancelled, the child's whole
    process group is killed and the child reaped before returning or
    re-raising. Children the program leaves running after a normal exit (e.g.
    a server started with `&`) are left alone.
    """
    loop = asyncio.get_running_loop()
    capture = _ClippedText(max_output)
    transport, protocol = await loop.subprocess_exec(
        lambda: _ChildProtocol(capture),
        *argv,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=_rlimit_setter(limits, timeout, cgroup_procs),
    )
    started = time.monotonic()
    group = transport.get_pid()  # a new session's leader: its pid is the group id
    finished = False
    try:
        if stdin is not None:
            stdin_pipe = transport.get_pipe_transport(0)
            stdin_pipe.write(stdin)  # buffered by the event loop, never blocks
            stdin_pipe.write_eof()
        timed_out = not await _wait_with_heartbeats(protocol.exited, started + timeout)
        if timed_out:
            _kill_group(group)
            await _wait_bounded(protocol.exited, REAP_TIMEOUT)
        await _wait_bounded(protocol.output_closed, OUTPUT_DRAIN_GRACE)
        finished = True
    finally:
        try:
            if not finished:  # cancelled, or something unexpected went wrong
                _kill_group(group)
                await _wait_bounded(protocol.exited, REAP_TIMEOUT)
        finally:
            transport.close()  # even if a second cancellation interrupts the wait
    return ProcessOutcome(
        output=capture.text(),
        exit_code=transport.get_returncode(),
        timed_out=timed_out,
    )


class _ChildProtocol(asyncio.SubprocessProtocol):
    """Collects output and signals exit. Unlike Process.wait(), `exited` fires
    when the child exits even if a grandchild still holds the output pipe."""

    def __init__(self, capture: _ClippedText) -> None:
        self.capture = capture
        self.exited = asyncio.Event()
        self.output_closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.capture.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.output_closed.set()

    def process_exited(self) -> None:
        self.exited.set()


class _ClippedText:
    """Decodes output as it arrives, keeping only the first and last halves of
    `limit` characters, so a chatty process cannot fill the worker's memory."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.head = ""
        self.tail = ""
        self.cut = 0

    def feed(self, data: bytes) -> None:
        self._add(self.decoder.decode(data))

    def text(self) -> str:
        self._add(self.decoder.decode(b"", final=True))
        if not self.cut:
            return self.head + self.tail
        return f"{self.head}\n[... {self.cut} characters cut ...]\n{self.tail}"

    def _add(self, text: str) -> None:
        room = self.head_limit - len(self.head)
        self.head += text[:room]
        self.tail += text[room:]
        if len(self.tail) > self.tail_limit:
            excess = len(self.tail) - self.tail_limit
            self.cut += excess
            self.tail = self.tail[excess:]


def _rlimit_setter(limits: ProcessLimits, timeout: float, cgroup_procs: str | None = None):
    cpu = limits.cpu_seconds if limits.cpu_seconds is not None else int(timeout) + 5
    wanted = [
        (resource.RLIMIT_AS, limits.address_space_bytes),
        # Soft limit sends SIGXCPU; the hard limit one second later SIGKILLs.
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_NPROC, limits.processes),
    ]

    worker_pid = os.getpid()

    # Runs in the forked child before exec. Python warns that preexec_fn is
    # unsafe with threads (the worker has some) because the child may need a
    # lock another thread held at fork time; this function only calls
    # prctl and get/setrlimit on values prepared above, which take no such lock.
    def set_limits() -> None:
        # If the worker dies (SIGKILL included), the child dies with it, so a
        # retried tool call never runs beside a leftover of the first attempt.
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != worker_pid:  # the worker died before prctl took effect
                os._exit(1)
        if cgroup_procs is not None:  # join the call's pids cgroup before exec
            fd = os.open(cgroup_procs, os.O_WRONLY)
            try:
                os.write(fd, b"%d" % os.getpid())
            finally:
                os.close(fd)
        for which, value in wanted:
            soft, hard = value if isinstance(value, tuple) else (value, value)
            _, current_hard = resource.getrlimit(which)
            if current_hard != resource.RLIM_INFINITY:  # can only lower a hard limit
                soft, hard = min(soft, current_hard), min(hard, current_hard)
            resource.setrlimit(which, (soft, hard))

    return set_limits


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: no parent-death signal
    _prctl = None


async def _wait_with_heartbeats(event: asyncio.Event, deadline: float) -> bool:
    """Wait for `event` until the monotonic `deadline`; False if it passed."""
    while not event.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        await _wait_bounded(event, min(HEARTBEAT_INTERVAL, remaining))
        if activity.in_activity():
            activity.heartbeat()
    return True


async def _wait_bounded(event: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except asyncio.TimeoutError:
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:  # everyone in it has already exited
        pass


class ProcessTool:
    """What python_execute and bash share: a timeout, limits, clipped output and
    the sandbox around each child process."""

    def __init__(
        self,
        workspace: Workspace,
        timeout: float,
        limits: ProcessLimits | None = None,
        max_output: int = 20000,
        sandbox: ToolSandbox | None = None,
    ) -> None:
        """timeout: wall-clock seconds before the process is killed.
        limits: resource limits, default ProcessLimits().
        max_output: characters of output returned (default 20000); the middle
        of longer output is cut.
        sandbox: confinement of the process, default none (the worker passes
        the one configured)."""
        self.workspace = workspace
        self.timeout = timeout
        self.limits = limits or ProcessLimits()
        self.max_output = max_output
        self.sandbox = sandbox or ToolSandbox.none()

    async def run_process(
        self, argv: list[str], *, run_dir: Path, cwd: Path, stdin: bytes | None = None, writable: tuple[Path, ...] = ()
    ) -> ProcessOutcome:
        with self.sandbox.process_group() as cgroup:
            return await run_limited(
                self.sandbox.command(argv, run_dir=run_dir, cwd=cwd, writable=writable),
                cwd=cwd,
                env=sandbox_env(run_dir),
                stdin=stdin,
                timeout=self.timeout,
                limits=self.limits,
                max_output=self.max_output,
                cgroup_procs=cgroup,
            )

    def result(self, outcome: ProcessOutcome, empty_text: str, **extra) -> ToolResult:
        """The tool result for a finished run: the output with a note on why it
        failed (error=True), else the output, or `empty_text` if there was none.
        extra: further ToolResult fields, set on every result (bash: cwd)."""
        note = _failure_note(outcome, self.timeout)
        if note:
            return ToolResult(output=_with_note(outcome.output, note), error=True, **extra)
        return ToolResult(output=outcome.output or empty_text, **extra)


def bad_arguments(message: str) -> ApplicationError:
    """A non-retryable BadToolArguments error: malformed arguments fail the
    same way on every attempt."""
    return ApplicationError(message, type="BadToolArguments", non_retryable=True)


def required_string(arguments: dict, name: str, tool: str) -> str:
    """The string argument `name`, or a non-retryable BadToolArguments error."""
    value = arguments.get(name)
    if not isinstance(value, str):
        raise bad_arguments(f"{tool} needs a string argument '{name}'.")
    return value
