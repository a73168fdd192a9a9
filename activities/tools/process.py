"""Run a tool's child process with a timeout, resource limits and clipped output.

Every call goes through a guard process (activities/tools/call_guard.py) that
holds the run's tool lock, applies the cgroup and rlimits, and kills the call
when the worker stops renewing its lease. The guard leads its own process
group, so a timeout or a cancellation kills the whole call with one signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import codecs
import fcntl
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from temporalio import activity

from agent_model.tool_io import ToolResult
from agent_model.tool_spec import TOOL_HEARTBEAT
from activities.heartbeats import MAX_INTERVAL, heartbeating
from activities.lost_worker import release_run_from_lost_worker
from activities.server_contact import server_in_contact
from activities.tools import disk_use, run_sandbox, seccomp_filter
from activities.tools.call_cgroup import CallGroup
from activities.tools.egress_proxy import EgressProxy
from activities.tools.run_sandbox import KernelNews, RunSandbox
from activities.tools.privileges import no_new_privs
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace

TOOL_HEARTBEAT_TIMEOUT = TOOL_HEARTBEAT.delta
"""Heartbeat timeout of the tool activities (agent_model/tool_spec.py says why 4 s)."""

LEASE_SECONDS = 3.0
"""The guard kills the call when the worker has not renewed its lease (at every
heartbeat, at most heartbeats.MAX_INTERVAL apart) for this long: a frozen worker's call ends before the
server gives up on it (TOOL_HEARTBEAT_TIMEOUT, 1 s more) and retries it
elsewhere, instead of running beside the retry. Two missed renewals are
still tolerated, five times the longest event-loop stall measured."""

assert LEASE_SECONDS < TOOL_HEARTBEAT_TIMEOUT.total_seconds(), "a retry could start beside a frozen attempt"
assert LEASE_SECONDS >= 3 * MAX_INTERVAL, "a live worker's call could be killed after one late renewal"

LOCK_POLL_INTERVAL = 0.2
"""Seconds between tries for the run's tool lock while an earlier attempt ends."""

OUTPUT_DRAIN_GRACE = 0.5
"""Seconds to keep reading after the child exits. A background grandchild may
hold the output pipe open indefinitely; its later output is not collected."""

REAP_TIMEOUT = 5.0
"""Seconds to wait for a SIGKILLed child to be reaped (normally immediate)."""

MAX_REPORT_BYTES = 4096
"""Most a tool may say on its report channel (bash: the final directory)."""

GUARD = str(Path(__file__).with_name("call_guard.py"))

GiB = 1024**3


@dataclass(frozen=True)
class ProcessLimits:
    """Resource limits applied to each process of the call."""

    address_space_bytes: int = 2 * GiB
    """Virtual memory per process; large allocations fail (Python: MemoryError).
    All processes of a call together are capped by the call's cgroup."""
    cpu_seconds: int | None = None
    """CPU time; None means the run's timeout + 5 s."""
    file_size_bytes: int = GiB
    """Largest file the child may write."""
    open_files: int = 256
    """File descriptors per process."""
    processes: int = 512
    """RLIMIT_NPROC. It counts all processes of the user, not just the child's,
    and the kernel does not enforce it for root."""

    def rlimits(self, timeout: float) -> list[tuple[int, int, int]]:
        """(resource, soft, hard) for each limit."""
        cpu = self.cpu_seconds if self.cpu_seconds is not None else int(timeout) + 5
        return [
            (resource.RLIMIT_AS, self.address_space_bytes, self.address_space_bytes),
            # Soft limit sends SIGXCPU; the hard limit one second later SIGKILLs.
            (resource.RLIMIT_CPU, cpu, cpu + 1),
            (resource.RLIMIT_FSIZE, self.file_size_bytes, self.file_size_bytes),
            (resource.RLIMIT_NOFILE, self.open_files, self.open_files),
            (resource.RLIMIT_NPROC, self.processes, self.processes),
            (resource.RLIMIT_CORE, 0, 0),
        ]

    def guard_options(self, timeout: float) -> list[str]:
        names = {number: name for name, number in RLIMIT_NAMES.items()}
        return [f"--rlimit={names[which]}:{soft},{hard}" for which, soft, hard in self.rlimits(timeout)]


RLIMIT_NAMES = {
    "AS": resource.RLIMIT_AS, "CPU": resource.RLIMIT_CPU, "FSIZE": resource.RLIMIT_FSIZE,
    "NOFILE": resource.RLIMIT_NOFILE, "NPROC": resource.RLIMIT_NPROC, "CORE": resource.RLIMIT_CORE,
}
"""The guard's names for them (call_guard.RLIMITS)."""


@dataclass(frozen=True)
class DiskWatch:
    """What the guard holds a call's writes to (call_guard.DiskWatch)."""

    run_dir: Path
    quota: int
    """The run's quota, as the model is told it."""
    used_elsewhere: int
    """Of it, what the run already holds outside its directory (the editor's undo history)."""
    reserve: int
    """Free space the disk must keep."""

    def guard_options(self, verdict_fd: int) -> list[str]:
        return [
            f"--disk-dir={self.run_dir}",
            f"--disk-quota={max(self.quota - self.used_elsewhere, 0)}",
            f"--disk-floor={self.reserve}",
            f"--verdict-fd={verdict_fd}",
        ]

    def note(self, verdict: bytes) -> str | None:
        """The observation for the guard's verdict (b"" when it had none)."""
        if verdict == b"quota":
            return disk_use.over_quota_note(self.quota)
        if verdict == b"reserve":
            return disk_use.low_disk_note(self.reserve)
        return None


@dataclass
class ProcessOutcome:
    output: str
    """stdout and stderr interleaved, clipped to max_output characters."""
    exit_code: int | None
    """Negative for death by signal; None if the process could not be reaped."""
    timed_out: bool
    memory_exhausted: bool = False
    """The call's cgroup killed a process at its memory cap."""
    disk_note: str | None = None
    """Why the call was stopped, or not started, for the disk's sake."""
    kernel: KernelNews | None = None
    """Set when the run's persistent Python ran the call (run_sandbox.KernelNews)."""


def _failure_note(outcome: ProcessOutcome, timeout: float) -> str | None:
    """One line saying why a run failed, for the model; None if it succeeded."""
    if outcome.disk_note:
        return outcome.disk_note
    if outcome.timed_out:
        return f"Execution timed out after {timeout:g} s; the process was killed."
    if outcome.memory_exhausted:
        return "The call ran out of memory (all its processes together); a process was killed."
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


async def run_limited(
    argv: list[str],
    *,
    cwd: Path,
    env: dict,
    stdin: bytes | None,
    timeout: float,
    limits: ProcessLimits,
    max_output: int,
    group: CallGroup | None = None,
    lock_fd: int | None = None,
    pass_fds: tuple[int, ...] = (),
    disk: DiskWatch | None = None,
) -> ProcessOutcome:
    """Run argv under the call guard to completion or until `timeout` seconds pass.

    lock_fd: the run's locked tool lock, handed over: the guard holds it until
    the call's last process is gone, and it is closed here once the guard has it. pass_fds: further descriptors the command gets under
    the same numbers (bash's report pipe, bwrap's seccomp program).

    On timeout, and when the calling task is cancelled, the whole call is
    killed and reaped before returning or re-raising. Children the program
    leaves running after a normal exit die with the sandbox's pid namespace.
    """
    loop = asyncio.get_running_loop()
    capture = _ClippedText(max_output)
    lease_read = lease_write = verdict_read = verdict_write = None
    try:
        lease_read, lease_write = os.pipe()
        os.set_blocking(lease_write, False)
        guard = [sys.executable, "-I", "-S", GUARD, f"--lease-fd={lease_read}", f"--lease={LEASE_SECONDS:g}"]
        guard += [f"--cgroup={procs}" for procs in (group.procs_files if group else [])]
        guard += [f"--hold={lock_fd}"] if lock_fd is not None else []
        guard += limits.guard_options(timeout)
        if disk is not None:
            verdict_read, verdict_write = os.pipe()
            guard += disk.guard_options(verdict_write)
        transport, protocol = await loop.subprocess_exec(
            lambda: _ChildProtocol(capture),
            *guard,
            "--",
            *argv,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            pass_fds=tuple(fd for fd in (lease_read, lock_fd, verdict_write, *pass_fds) if fd is not None),
            preexec_fn=_child_setup(os.getpid()),
        )
    except BaseException:
        for fd in (lease_write, verdict_read):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        # From here the guard alone holds the lease and the lock: a worker that
        # freezes now cannot keep the lock from a retry.
        for fd in (lease_read, lock_fd, verdict_write):
            if fd is not None:
                os.close(fd)
    started = time.monotonic()
    guard_group = transport.get_pid()  # a new session's leader: its pid is the group id
    finished = False
    try:
        if stdin is not None:
            stdin_pipe = transport.get_pipe_transport(0)
            assert isinstance(stdin_pipe, asyncio.WriteTransport)  # stdin=PIPE above
            stdin_pipe.write(stdin)  # buffered by the event loop, never blocks
            stdin_pipe.write_eof()
        timed_out = not await _wait_with_heartbeats(protocol.exited, started + timeout, lease_write)
        if timed_out:
            _kill_group(guard_group)
            # Still heartbeating: REAP_TIMEOUT is longer than the heartbeat timeout.
            await _wait_with_heartbeats(protocol.exited, time.monotonic() + REAP_TIMEOUT, lease_write)
        await _wait_bounded(protocol.output_closed, OUTPUT_DRAIN_GRACE)
        finished = True
    finally:
        try:
            if not finished:  # cancelled, or something unexpected went wrong
                _kill_group(guard_group)
                await _wait_bounded(protocol.exited, REAP_TIMEOUT)
        finally:
            transport.close()  # even if a second cancellation interrupts the wait
            os.close(lease_write)
            verdict = b""
            if verdict_read is not None:
                verdict = read_report(verdict_read)
                os.close(verdict_read)
    return ProcessOutcome(
        output=capture.text(),
        exit_code=transport.get_returncode(),
        timed_out=timed_out,
        memory_exhausted=bool(group and group.oom_kills()),
        disk_note=disk.note(verdict) if disk is not None else None,
    )


def call_request(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    limits: ProcessLimits,
    disk: DiskWatch | None,
    lease: float,
    report_fd: int | None,
    kernel: bool = False,
) -> dict:
    """What the server needs to start one call (the descriptors travel beside
    it). kernel: argv starts the run's persistent Python, if it has none yet,
    and the call's stdin is the code it runs."""
    request: dict = {
        "kernel": kernel,
        "argv": argv,
        "cwd": str(cwd),
        "env": env,
        "rlimits": limits.rlimits(timeout),
        "lease": lease,
        "disk": None,
    }
    if disk is not None:
        request["disk"] = {
            "dir": str(disk.run_dir),
            "quota": max(disk.quota - disk.used_elsewhere, 0),
            "floor": disk.reserve,
        }
    if report_fd is not None:
        request["report_fd"] = report_fd
    return request



async def run_entered(
    box: RunSandbox,
    argv: list[str],
    *,
    cwd: Path,
    env: dict,
    stdin: bytes | None,
    timeout: float,
    limits: ProcessLimits,
    max_output: int,
    lock_fd: int,
    report_fd: int | None = None,
    disk: DiskWatch | None = None,
    kernel: bool = False,
) -> ProcessOutcome | None:
    """run_limited's work, done by the run's sandbox (activities/tools/exec_server.py):
    the same limits, lease, lock and disk watch, without a sandbox and a guard
    started for the call. The lock is the server's from the moment the call
    is sent. None: the sandbox was gone before it took the call (the caller
    starts the call the per-call way, the lock still its own)."""
    loop = asyncio.get_running_loop()
    capture = _ClippedText(max_output)
    oom_kills_before = box.group.oom_kills() if box.group is not None else 0
    request = call_request(
        argv, cwd=cwd, env=env, timeout=timeout, limits=limits, disk=disk, lease=LEASE_SECONDS, report_fd=report_fd,
        kernel=kernel,
    )
    ours: list[int] = []  # ends that stay with the worker
    theirs: list[tuple[str, int]] = []  # ends handed over, closed here once sent
    reply, reply_remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        out_read, out_write = os.pipe()
        lease_read, lease_write = os.pipe()
        ours += [out_read, lease_write]
        theirs += [("reply", reply_remote.fileno()), ("out", out_write), ("lease", lease_read), ("lock", lock_fd)]
        os.set_blocking(lease_write, False)
        stdin_write = None
        if stdin is not None:
            stdin_read, stdin_write = os.pipe()  # closed by _write_all
            theirs.append(("stdin", stdin_read))
        verdict_read = None
        if disk is not None:
            verdict_read, verdict_write = os.pipe()
            ours.append(verdict_read)
            theirs.append(("verdict", verdict_write))
        if report_fd is not None:
            theirs.append(("report", report_fd))
        try:
            run_sandbox.send_call(box, request, theirs)
        except OSError:
            for fd in ours + ([stdin_write] if stdin_write is not None else []):
                os.close(fd)
            return None
    finally:
        for name, fd in theirs:
            if name not in ("lock", "report", "reply"):
                os.close(fd)
        reply_remote.close()
    os.close(lock_fd)  # the server holds it now, until the call's last process is gone
    reply.setblocking(False)
    output_closed = asyncio.Event()

    def on_output() -> None:
        try:
            data = os.read(out_read, 65536)
        except BlockingIOError:
            return
        if data:
            capture.feed(data)
        else:
            loop.remove_reader(out_read)
            output_closed.set()

    os.set_blocking(out_read, False)
    loop.add_reader(out_read, on_output)
    reply_task = asyncio.ensure_future(run_sandbox.read_outcome(reply))
    exited = asyncio.Event()
    reply_task.add_done_callback(lambda _: exited.set())
    feeding = _StdinFeed(stdin_write, stdin) if stdin_write is not None and stdin is not None else None
    started = time.monotonic()
    lease_open = True
    verdict = b""
    try:
        timed_out = not await _wait_with_heartbeats(exited, started + timeout, lease_write)
        if timed_out:
            os.close(lease_write)  # the server kills the call at once
            lease_open = False
            await _wait_bounded(exited, REAP_TIMEOUT)
        await _wait_bounded(output_closed, OUTPUT_DRAIN_GRACE)
    finally:
        if lease_open and not exited.is_set():  # cancelled: end the call as a timeout would
            os.close(lease_write)
            lease_open = False
            await _wait_bounded(exited, REAP_TIMEOUT)
        if not exited.is_set():  # the server did not answer: the whole sandbox goes
            box.close()
        reply_task.cancel()
        if feeding is not None:
            feeding.stop()
        loop.remove_reader(out_read)
        reply.close()
        if verdict_read is not None:
            verdict = read_report(verdict_read)
        for fd in ours:
            if fd != lease_write or lease_open:
                os.close(fd)
    reply_outcome = reply_task.result() if reply_task.done() and not reply_task.cancelled() else None
    status = reply_outcome.status if reply_outcome is not None else None
    return ProcessOutcome(
        output=capture.text(),
        exit_code=_exit_code(status),
        timed_out=timed_out,
        memory_exhausted=box.group is not None and box.group.oom_kills() > oom_kills_before,
        disk_note=disk.note(verdict) if disk is not None else None,
        kernel=reply_outcome.kernel if reply_outcome is not None else None,
    )


def _exit_code(status: int | None) -> int | None:
    """A wait status as Popen.returncode gives it (negative: a signal)."""
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


class _StdinFeed:
    """Writes a call's input to its stdin pipe without blocking the event
    loop, and closes the pipe when done (the command sees the end of its
    input) or when stopped."""

    def __init__(self, fd: int, data: bytes) -> None:
        self.fd: int | None = fd
        self.view = memoryview(data)
        os.set_blocking(fd, False)
        self.loop = asyncio.get_running_loop()
        self._write()

    def _write(self) -> None:
        while self.view and self.fd is not None:
            try:
                written = os.write(self.fd, self.view)
            except BlockingIOError:
                self.loop.add_writer(self.fd, self._resume)
                return
            except BrokenPipeError:  # the command stopped reading: the rest is not needed
                break
            self.view = self.view[written:]
        self.stop()

    def _resume(self) -> None:
        if self.fd is not None:
            self.loop.remove_writer(self.fd)
            self._write()

    def stop(self) -> None:
        if self.fd is not None:
            self.loop.remove_writer(self.fd)
            os.close(self.fd)
            self.fd = None


def read_report(fd: int) -> bytes:
    """What a finished child left in its report pipe: never blocks, never more
    than MAX_REPORT_BYTES (the tool controls the other end)."""
    os.set_blocking(fd, False)
    chunks, size = [], 0
    while size <= MAX_REPORT_BYTES:
        try:
            chunk = os.read(fd, MAX_REPORT_BYTES + 1 - size)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    return b"" if size > MAX_REPORT_BYTES else data


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


def _child_setup(worker_pid: int):
    # Runs in the forked child before exec. Python warns that preexec_fn is
    # unsafe with threads (the worker has some) because the child may need a
    # lock another thread held at fork time; this only calls getppid and prctl.
    def setup() -> None:
        # The guard outlives a dead worker just long enough to see its lease
        # pipe close and kill the whole call (cgroup included), then exits.
        if os.getppid() != worker_pid:  # the worker died before the guard started
            os._exit(1)
        no_new_privs()

    return setup


async def _wait_with_heartbeats(event: asyncio.Event, deadline: float, lease_write: int) -> bool:
    """Wait for `event` until the monotonic `deadline`, renewing the guard's
    lease at every heartbeat; False if the deadline passed."""
    async with heartbeating(on_beat=lambda: _renew(lease_write)):
        await _wait_bounded(event, deadline - time.monotonic())
    return event.is_set()


def _renew(lease_write: int) -> None:
    if not server_in_contact():  # its result could not arrive: let the guard end the call
        return
    try:
        os.write(lease_write, b".")
    except (BlockingIOError, BrokenPipeError):  # guard busy or gone: nothing to renew
        pass


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
    """What python_execute and bash share: the sandbox, a timeout, limits,
    clipped output, and one call at a time per run."""

    def __init__(
        self,
        workspace: Workspace,
        timeout: float,
        *,
        sandbox: ToolSandbox,
        limits: ProcessLimits | None = None,
        max_output: int = 20000,
    ) -> None:
        """timeout: wall-clock seconds before the process is killed.
        sandbox: confinement of the process (the worker passes the one it
        detected; ToolSandbox.none() only where the operator chose it).
        limits: per-process limits, default ProcessLimits() with the
        sandbox's memory cap and no file larger than the run's disk quota.
        max_output: characters of output returned (default 20000); the middle
        of longer output is cut."""
        self.workspace = workspace
        self.timeout = timeout
        self.sandbox = sandbox
        self.limits = limits or ProcessLimits(
            address_space_bytes=sandbox.memory_bytes, file_size_bytes=min(GiB, workspace.run_disk_bytes)
        )
        self.max_output = max_output

    def refused(self) -> ToolResult | None:
        """The observation when this worker cannot confine tools, else None."""
        refusal = self.sandbox.refusal
        return None if refusal is None else ToolResult(output=refusal, error=True)

    async def run_process(
        self,
        argv: list[str],
        *,
        run_name: str,
        cwd: Path | None = None,
        stdin: bytes | None = None,
        report_fd: int | None = None,
        kernel_argv: list[str] | None = None,
    ) -> ProcessOutcome:
        """Run argv for the run `run_name`, in `cwd` (default: the run directory).
        report_fd: see run_limited. kernel_argv: where the run has a sandbox of
        its own, run the call (stdin: its code) in the run's persistent Python
        that this starts (outcome.kernel says what became of it); else argv."""
        await release_run_from_lost_worker()
        run_dir = self.workspace.run_dir(run_name)
        self.sandbox.prepare_run_dir(run_dir)
        reserve = self.workspace.reserve()
        if disk_use.free_bytes(run_dir) < reserve:
            note = disk_use.low_disk_note(reserve)
            return ProcessOutcome(output="", exit_code=None, timed_out=False, disk_note=note)
        lock_path = self.workspace.history_dir(run_name) / "tools.lock"
        if self.sandbox.runs is not None:
            entered = await self._run_entered(
                kernel_argv or argv, run_name, run_dir, cwd, stdin, report_fd, reserve, lock_path, kernel_argv is not None
            )
            if entered is not None:
                return entered
        seccomp = seccomp_filter.program_fd() if self.sandbox.mode == "bwrap" else None
        try:
            async with self._egress() as egress_socket:
                with self.sandbox.call_group() as group:
                    started = time.monotonic()
                    outcome = await run_limited(
                        self.sandbox.command(
                            argv, run_dir=run_dir, cwd=cwd or run_dir, seccomp_fd=seccomp, egress_socket=egress_socket
                        ),
                        # Outside the sandbox the guard stays in the run directory;
                        # inside, bwrap changes to `cwd`.
                        cwd=run_dir if self.sandbox.mode == "bwrap" else cwd or run_dir,
                        env=self.sandbox.environment(run_dir),
                        stdin=stdin,
                        timeout=self.timeout,
                        limits=self.limits,
                        max_output=self.max_output,
                        group=group,
                        lock_fd=await _lock_run(lock_path),
                        pass_fds=tuple(fd for fd in (report_fd, seccomp) if fd is not None),
                        disk=self._disk_watch(run_name, run_dir, reserve),
                    )
                    _record_duration(time.monotonic() - started, outcome)
                    return outcome
        finally:
            if seccomp is not None:
                os.close(seccomp)

    async def _run_entered(
        self,
        argv: list[str],
        run_name: str,
        run_dir: Path,
        cwd: Path | None,
        stdin: bytes | None,
        report_fd: int | None,
        reserve: int,
        lock_path: Path,
        kernel: bool,
    ) -> ProcessOutcome | None:
        """The call in the run's own sandbox; None when that sandbox is not
        available (the call then starts one of its own)."""
        assert self.sandbox.runs is not None
        lock_fd = await _lock_run(lock_path)
        try:
            box = await self.sandbox.runs.get(run_dir)
        except BaseException:
            os.close(lock_fd)
            raise
        if box is None:
            os.close(lock_fd)
            return None
        started = time.monotonic()
        outcome = await run_entered(
            box,
            argv,
            cwd=cwd or run_dir,
            env=self.sandbox.environment(run_dir),
            stdin=stdin,
            timeout=self.timeout,
            limits=self.limits,
            max_output=self.max_output,
            lock_fd=lock_fd,
            report_fd=report_fd,
            disk=self._disk_watch(run_name, run_dir, reserve),
            kernel=kernel,
        )
        if outcome is None:  # the sandbox was gone: the lock is still ours
            os.close(lock_fd)
            return None
        _record_duration(time.monotonic() - started, outcome)
        return outcome

    def _disk_watch(self, run_name: str, run_dir: Path, reserve: int) -> DiskWatch:
        quota = self.workspace.run_disk_bytes
        history = disk_use.tree_bytes(self.workspace.history_dir(run_name), quota)
        return DiskWatch(run_dir, quota, quota if history is None else history, reserve)

    @contextlib.asynccontextmanager
    async def _egress(self) -> AsyncIterator[Path | None]:
        """A proxy of the call's own (network "internet"): its socket lives in a
        directory only the worker can enter, and its tunnels end with the call."""
        if self.sandbox.mode != "bwrap" or self.sandbox.network != "internet":
            yield None
            return
        private = Path(tempfile.mkdtemp(prefix="dm-egress-"))  # mode 0700
        proxy = EgressProxy(
            allow=self.sandbox.egress_allow, deny=self.sandbox.egress_deny, ports=self.sandbox.egress_ports
        )
        try:
            await proxy.start(private / "egress.sock")
            yield private / "egress.sock"
        finally:
            await proxy.close()
            shutil.rmtree(private, ignore_errors=True)

    def result(self, outcome: ProcessOutcome, empty_text: str, **extra) -> ToolResult:
        """The tool result for a finished run: the output with a note on why it
        failed (error=True), else the output, or `empty_text` if there was none.
        extra: further ToolResult fields, set on every result (bash: cwd)."""
        note = _failure_note(outcome, self.timeout)
        if note:
            return ToolResult(output=_with_note(outcome.output, note), error=True, **extra)
        return ToolResult(output=outcome.output or empty_text, **extra)


def _record_duration(seconds: float, outcome: ProcessOutcome) -> None:
    """Tool durations for the worker's metrics (Prometheus with worker.py --metrics)."""
    if not activity.in_activity():
        return
    status = "timeout" if outcome.timed_out else ("ok" if outcome.exit_code == 0 else "failed")
    activity.metric_meter().create_histogram_float(
        "durable_manus_tool_duration_ms", "Milliseconds a process tool call ran", "ms"
    ).with_additional_attributes({"tool": activity.info().activity_type, "status": status}).record(seconds * 1000)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


async def _lock_run(path: Path) -> int:
    """The run's tool lock, taken: an earlier attempt of this run's call that
    is still alive (its worker froze or lost the server) holds it until its
    guard has killed it. Waits with heartbeats, bounded by the activity's
    start-to-close timeout."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    waited_since = time.monotonic()
    try:
        if not _try_lock(fd):
            async with heartbeating("waiting for an earlier attempt of this call to end"):
                while not _try_lock(fd):
                    await asyncio.sleep(LOCK_POLL_INTERVAL)
    except BaseException:
        os.close(fd)
        raise
    waited = time.monotonic() - waited_since
    if waited > 1.0:
        activity.logger.info("waited %.1f s for an earlier attempt of this tool call to end", waited)
    return fd


