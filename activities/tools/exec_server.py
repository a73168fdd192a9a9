"""The inside of a run's sandbox: one process per run that starts each tool
call of the run (under bubblewrap, loaded with call_guard.py and
disk_use.py from descriptors by activities/tools/run_sandbox.py, so no
file of the worker's appears in the sandbox).

Starting bubblewrap, its namespaces and mounts, and a guard's Python costs
tens of milliseconds, far more than an `echo`. So a run's confinement is set
up once, when its first call comes, and this server forks every call inside
it. What held per call holds here, in the same ways:

- the worker sends each call over the control socket (a datagram with the
  call's descriptors: its output pipe, reply socket, lease pipe, the run's
  tool lock);
- the sandbox's cgroup caps the call: every process of the sandbox is born
  in it (bubblewrap joined it before it started), and the call is the only
  thing in it besides this server, since the run's tool lock lets one call
  of the run in at a time; the call's processes are the OOM killer's first
  choice (oom_score_adj 1000), so a call at its memory cap cannot take this
  server down with it;
- the command runs with the call's rlimits, umask 077, its own session and a
  parent-death signal; the server supervises it as the guard does
  (call_guard.supervise: the lease, the disk watch);
- when the command ends, or the lease lapses, or the worker goes (the lease
  pipe closes), every other process in the sandbox is killed: the sandbox's
  pid namespace holds only this server and the call, so nothing a call starts
  (in the background, in a new session) outlives it; then /tmp is emptied,
  and only then is the tool lock let go and the status sent back;
- this server is not dumpable, so the call's code (the same uid) cannot
  trace it or take its descriptors; if it kills the server, bubblewrap's
  init exits and the kernel kills everything in the sandbox;
- it exits when the worker closes the control socket, when the worker dies
  (bubblewrap's --die-with-parent), and after `--idle` seconds without a call.

Standard library only, like the guard.
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import time
import warnings  # noqa: F401 - os.execvpe imports it on first use: once here, not in every forked call

TYPE_CHECKING = False
if TYPE_CHECKING:
    from activities.tools import call_guard
else:
    import call_guard  # put in sys.modules by the loader (activities/tools/run_sandbox.py)

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4

MAX_REQUEST_BYTES = 1024 * 1024
"""Largest call the worker sends (its argv, environment and limits)."""
MAX_FDS = 16
"""Most descriptors one call carries."""
READY = b"ready"
GONE = (None, b"Z", b"X")
"""Process states (/proc/<pid>/stat) of what has ended: no such process, a zombie, dead."""
OOM_SCORE_ADJ = 1000
"""A call's processes (raising one's own score needs no privilege): at the
sandbox's memory cap the kernel kills them, not this server."""


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None).prctl(option, value, 0, 0, 0)


def _alive_others(keep: set[int]) -> set[int]:
    """Processes of the sandbox other than `keep`, zombies left out."""
    pids = (int(name) for name in os.listdir("/proc") if name.isdigit())
    return {pid for pid in pids if pid not in keep and _state(pid) not in GONE}


def kill_all_but(keep: set[int]) -> None:
    """SIGKILL every process of the sandbox but `keep`, until none is left."""
    call_guard.kill_until_none_left(lambda: _alive_others(keep))


def empty_tmp() -> None:
    """The next call starts with an empty /tmp, as a call of its own would.
    Only the sandbox's own tmpfs is emptied: a directory bound into it (the
    run directory, when it lies under /tmp on the host) is another device
    and is never entered."""
    try:
        fd = os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        _empty(fd, os.fstat(fd).st_dev)
    finally:
        os.close(fd)


def _empty(dir_fd: int, device: int) -> None:
    for entry in os.scandir(dir_fd):
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_dev != device:
                continue
            if entry.is_dir(follow_symlinks=False):
                child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
                try:
                    if os.fstat(child).st_dev == device:
                        _empty(child, device)
                finally:
                    os.close(child)
                os.rmdir(entry.name, dir_fd=dir_fd)  # refused for a mount point and what leads to one
            else:
                os.unlink(entry.name, dir_fd=dir_fd)
        except OSError:
            continue


def _start(request: dict, targets: dict[int, int], rlimits: list) -> int:
    """Fork and exec request["argv"] with `targets` (its descriptor number ->
    ours; -1: /dev/null) and `rlimits`; returns its pid."""
    server = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server:
            os._exit(1)
        try:
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write(str(OOM_SCORE_ADJ))
        except OSError:
            pass
        os.setsid()
        for which, soft, hard in rlimits:
            call_guard.set_rlimit(which, soft, hard)
        os.umask(0o077)
        os.chdir(request["cwd"])
        # Everything to the numbers the command expects, through high numbers
        # first so that no target overwrites a source.
        staged = {}
        for target, source in targets.items():
            staged[target] = os.dup(source) if source >= 0 else os.open(os.devnull, os.O_RDWR)
        for target, source in staged.items():
            os.dup2(source, target)
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2 and int(name) not in targets:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        argv = request["argv"]
        os.execvpe(argv[0], argv, request["env"])
    except BaseException as e:  # noqa: BLE001 - the child must never return into the server
        try:
            os.write(2, f"exec_server: cannot start the command: {e}\n".encode())
        except OSError:
            pass
    os._exit(127)


def _call_targets(request: dict, fds: dict) -> dict[int, int]:
    targets = {0: fds.get("stdin", -1), 1: fds["out"], 2: fds["out"]}
    if "report" in fds:
        targets[int(request["report_fd"])] = fds["report"]
    return targets


def _disk_watch(request: dict, keep: set[int]) -> call_guard.DiskWatch | None:
    if request.get("disk") is None:
        return None
    disk = call_guard.DiskWatch(request["disk"]["dir"], request["disk"]["quota"], request["disk"]["floor"])
    disk.call_pids = lambda: _alive_others(keep)
    return disk


def _close_call_fds(fds: dict) -> None:
    for name in ("out", "stdin", "report"):
        if name in fds:
            os.close(fds.pop(name))


def run_call(request: dict, fds: dict, kernel: Kernel | None = None) -> dict:
    """One call, from its start to the moment the sandbox holds nothing of it
    (but the run's kernel, idle meanwhile)."""
    keep = {1, os.getpid()} | ({kernel.pid} if kernel is not None else set())
    disk = _disk_watch(request, keep)
    pid = _start(request, _call_targets(request, fds), request["rlimits"])
    _close_call_fds(fds)
    status = call_guard.supervise(
        pid, fds.get("lease"), float(request["lease"]), lambda: kill_all_but(keep), disk, fds.get("verdict")
    )
    kill_all_but(keep)
    empty_tmp()
    return {"status": status}


class Kernel:
    """The run's persistent Python (activities/tools/python_kernel.py), a
    child of this server that outlives the calls it runs."""

    def __init__(self, request: dict) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # No CPU-time rlimit: it adds up over the kernel's life; the call's
        # timeout (the lease) ends a call that runs too long, kernel and all.
        rlimits = [limit for limit in request["rlimits"] if limit[0] != resource.RLIMIT_CPU]
        try:
            self.pid = _start(request, {0: -1, 1: -1, 2: -1, python_kernel_fd(): theirs.fileno()}, rlimits)
        finally:
            theirs.close()
        self.socket = ours

    def alive(self) -> bool:
        return _state(self.pid) not in GONE

    def end(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.socket.close()


def python_kernel_fd() -> int:
    return 3  # python_kernel.SERVER_FD


def run_kernel_call(request: dict, fds: dict, kernel: Kernel | None) -> tuple[dict, Kernel | None]:
    """One python_execute call in the run's kernel, started if there is none.
    Every other process the call started is killed when it ends; threads in
    the kernel are the session's (numpy's own pool among them) and live on
    with it, inside this sandbox, until the session ends."""
    server = os.getpid()
    fresh = kernel is None
    if kernel is None:
        kernel = Kernel(request)
    disk = _disk_watch(request, {1, server})
    _drain(kernel.socket)
    try:
        kernel.socket.sendmsg(
            [json.dumps({"cwd": request["cwd"]}).encode()],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fds["out"], fds.get("stdin", -1)]).tobytes())],
        )
    except OSError:
        pass  # it died: the wait below sees it
    _close_call_fds(fds)
    status = call_guard.supervise(
        kernel.pid, fds.get("lease"), float(request["lease"]), lambda: kill_all_but({1, server}), disk,
        fds.get("verdict"), done_fd=kernel.socket.fileno(),
    )
    if status is None:  # its socket spoke, or closed as the kernel exits
        code = _kernel_reply(kernel)
        status = code << 8 if code is not None else _end_process(kernel.pid)
    ended = None
    if status is not None and not kernel.alive():
        kernel.socket.close()
        kernel = None
        ended = "its process exited" if os.WIFEXITED(status) else "its process was killed"
    kill_all_but({1, server} if kernel is None else {1, server, kernel.pid})
    empty_tmp()
    return {"status": status, "kernel": {"fresh": fresh, "ended": ended}}, kernel


def _drain(sock: socket.socket) -> None:
    """Drop what the kernel sent between calls (its code can write to the
    socket): this call's end is the first thing it says after the call."""
    while True:
        try:
            if not sock.recv(4096, socket.MSG_DONTWAIT):
                return
        except (BlockingIOError, OSError):
            return


def _kernel_reply(kernel: Kernel) -> int | None:
    """The exit code the call's code would have had as a script; None if the
    kernel said nothing sensible (it is exiting, or the code wrote to its
    socket). The code is the run's: nothing it says is trusted beyond that."""
    try:
        reply = json.loads(kernel.socket.recv(4096))
        return int(reply["status"]) & 0xFF
    except (OSError, ValueError, KeyError, TypeError):
        return None


EXIT_GRACE_MS = 1000
"""How long a kernel whose socket closed has to exit by itself."""


def _end_process(pid: int) -> int:
    """Its wait status: it exits within EXIT_GRACE_MS, or is killed."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    if pidfd is not None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        exited = bool(poller.poll(EXIT_GRACE_MS))
        os.close(pidfd)
        if not exited:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return signal.SIGKILL


def _state(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return None


def _receive(control: socket.socket) -> tuple[dict, dict[str, int]] | None:
    """The next call, or None when the worker closed the socket."""
    fds = array.array("i")
    data, ancillary, flags, _ = control.recvmsg(MAX_REQUEST_BYTES, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    received = list(fds)
    for fd in received:
        os.set_inheritable(fd, False)
    if not data:
        for fd in received:
            os.close(fd)
        return None
    request = json.loads(data)
    names = request["fds"]
    if len(names) != len(received) or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in received:
            os.close(fd)
        raise SystemExit("exec_server: a call arrived cut short")
    return request, dict(zip(names, received))


def serve(control: socket.socket, idle: float) -> None:
    poller = select.poll()
    poller.register(control, select.POLLIN)
    control.send(READY)
    kernel: Kernel | None = None
    while True:
        if not poller.poll(int(idle * 1000)):
            return  # no call for `idle` seconds: the worker starts a new sandbox when one comes
        received = _receive(control)
        if received is None:
            return
        request, fds = received
        reply = fds.pop("reply")
        lock = fds.pop("lock", None)
        try:
            if request.get("kernel"):
                outcome, kernel = run_kernel_call(request, fds, kernel)
            else:
                outcome = run_call(request, fds, kernel)
                if kernel is not None and not kernel.alive():  # the call killed it (same uid)
                    kernel.end()
                    kernel = None
        finally:
            for fd in fds.values():
                os.close(fd)
            if lock is not None:
                os.close(lock)  # only now may a retry of the call start
        try:
            os.write(reply, json.dumps(outcome).encode())
        except OSError:
            pass
        os.close(reply)


def main(argv: list[str]) -> None:
    options = dict(word.lstrip("-").partition("=")[::2] for word in argv)
    _prctl(_PR_SET_DUMPABLE, 0)  # the calls' code may not trace this process or take its descriptors
    call_guard.open_files_for_scans()
    control = socket.socket(fileno=int(options["control-fd"]))
    serve(control, float(options.get("idle", "60")))


if __name__ == "__main__":
    main(sys.argv[1:])
