"""Confinement of the processes that python_execute and bash start.

A tool call runs under bubblewrap (`bwrap`, Debian package `bubblewrap`):

- filesystem: an empty root with the system directories (/usr, /etc, ...) and
  the worker's Python read-only, the run's own directory read-write, a private
  /tmp, /dev and /proc. The worker's code and config, the workspace root
  (other runs, the editor's undo history), /home, /root, /run, /var and /sys
  are not there at all, so there is no host socket or file to reach; files
  the operator configured (config.toml, mcp.json, TLS keys) and the worker's
  repository and server data are emptied where they lie inside a visible
  directory (/etc, the interpreter's prefix);
- network: its own network namespace with only a private loopback, so the
  Temporal frontend, the LLM endpoint, cloud metadata and every host service
  are out of reach. With `network = "internet"` the only way out is the
  worker's egress proxy (activities/tools/egress_proxy.py), which refuses
  the control plane, this host's addresses, loopback, private and
  link-local destinations;
- identity: an unprivileged uid (the worker's own, or `[tools] user` when the
  worker is root), every capability dropped, no_new_privs, no further user
  namespaces; its own pid, ipc and uts namespaces and session, so it sees no
  other process, and everything it started dies when the call ends;
- resources (activities/tools/call_cgroup.py): a cgroup per call caps the
  processes and the memory of all its processes together where the machine
  lets the worker create one; rlimits cap each process in any case.

If bubblewrap cannot start here, `mode = "auto"` (the default) refuses
python_execute and bash with an observation, `"bwrap"` stops the worker at
start-up, and only `"none"`, written by the operator, runs tools unconfined.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from activities.tools import seccomp_filter
from activities.tools.call_cgroup import CallCgroups, CallGroup
from activities.tools.control_plane import Endpoint
from activities.tools.privileges import no_new_privs
from activities.tools.run_sandbox import RunSandboxes

log = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "none"]
NetworkMode = Literal["none", "internet"]

DEFAULT_MAX_PIDS = 256
"""Processes and threads one tool call may have at once."""
DEFAULT_MEMORY_BYTES = 2 * 1024**3
"""Memory of one tool call, all its processes together."""
DEFAULT_TOOL_USER = 65534
"""uid/gid for tool processes when the worker runs as root ("nobody")."""
TMP_BYTES = 512 * 1024**2
"""Size of the call's private /tmp (its pages also count against the memory cap)."""

SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
"""Top-level directories a tool sees (read-only) when the host has them; a
symlink among them (merged /usr) is recreated as the same symlink."""

EGRESS_SOCKET = "/run/durable-manus/egress.sock"
"""Where the egress proxy's socket appears inside the sandbox."""
EGRESS_FORWARDER = "/run/durable-manus/egress_forwarder.py"
FORWARDER = Path(__file__).with_name("egress_forwarder.py")
EGRESS_PORT = 3128
"""Port on the sandbox's own loopback where tool code finds the proxy."""

BWRAP_ENV = "DURABLE_MANUS_BWRAP"
"""Path of the bwrap binary, when it is not the one on PATH."""

MATPLOTLIB_DIR = ".cache/matplotlib"
"""matplotlib's config and cache directory, in the run directory (where $HOME
points, so it is also matplotlib's own default there)."""

PROBE_TIMEOUT = 15.0
"""Seconds the start-up check may take to start one confined process."""


class SandboxUnavailable(Exception):
    """mode "bwrap" was asked for and the sandbox cannot start here."""


@dataclass(frozen=True)
class ToolSandbox:
    mode: Literal["bwrap", "none", "refused"] = "refused"
    """bwrap: confined; none: unconfined (the operator said so); refused: the
    sandbox cannot start, so process tools are refused."""
    problem: str | None = "no sandbox was configured"
    """Why tools are refused (mode "refused")."""
    bwrap: str | None = None
    setpriv: str | None = None
    run_as: tuple[int, int] | None = None
    """(uid, gid) to drop to inside the sandbox; None when the worker is not root."""
    workspace_root: Path | None = None
    hidden_files: tuple[Path, ...] = ()
    """Files (or directories) the operator configured: empty where tools could see them."""
    hidden_dirs: tuple[Path, ...] = ()
    """Directories tools never see into (the worker's code, the server's data),
    emptied where they lie inside a directory tools see."""
    network: NetworkMode = "none"
    egress_allow: tuple[str, ...] = ()
    """Origins the egress proxy lets through although not public (operator's
    list, activities/tools/egress_rules.py)."""
    egress_ports: tuple[int, ...] = (80, 443)
    """Destination ports the egress proxy allows on public addresses."""
    egress_deny: tuple[Endpoint, ...] = ()
    """The control plane: endpoints tool code never reaches (activities/tools/control_plane.py)."""
    cgroups: CallCgroups | None = None
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    max_pids: int = DEFAULT_MAX_PIDS
    runs: RunSandboxes | None = field(default=None, compare=False, repr=False)
    """One sandbox per run, entered by each call (activities/tools/run_sandbox.py);
    None: every call starts a sandbox of its own (network "internet", or
    `[tools] sandbox_per_run = false`)."""

    # ---- construction ---------------------------------------------------------

    @classmethod
    def none(cls, cgroups: CallCgroups | None = None) -> "ToolSandbox":
        """No confinement: only for an operator's explicit `sandbox = "none"` and
        for tests of process handling itself."""
        return cls(mode="none", problem=None, cgroups=cgroups)

    @classmethod
    def refused(cls, problem: str) -> "ToolSandbox":
        return cls(mode="refused", problem=problem)

    @classmethod
    def detect(
        cls,
        mode: SandboxMode,
        workspace_root: Path,
        hidden_files: Sequence[Path] = (),
        *,
        hidden_dirs: Sequence[Path] = (),
        network: NetworkMode = "none",
        egress_allow: Sequence[str] = (),
        egress_deny: Sequence[Endpoint] = (),
        egress_ports: Sequence[int] = (80, 443),
        tool_user: int = DEFAULT_TOOL_USER,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        max_pids: int = DEFAULT_MAX_PIDS,
        bwrap: str | None = None,
        per_run: bool = True,
    ) -> "ToolSandbox":
        """The sandbox this worker can give its tools, checked by starting one
        confined process. Raises SandboxUnavailable only in mode "bwrap".
        per_run: keep one sandbox per run that its calls enter (network "none" only)."""
        cgroups = CallCgroups.detect(memory_bytes=memory_bytes, max_pids=max_pids)
        if mode == "none":
            return cls.none(cgroups)
        bwrap = bwrap or os.environ.get(BWRAP_ENV) or shutil.which("bwrap")
        setpriv = shutil.which("setpriv") if os.geteuid() == 0 else None
        candidate = cls(
            mode="bwrap",
            problem=None,
            bwrap=bwrap,
            setpriv=setpriv,
            run_as=(tool_user, tool_user) if os.geteuid() == 0 else None,
            workspace_root=Path(os.path.realpath(workspace_root)),
            hidden_files=tuple(Path(os.path.realpath(p)) for p in hidden_files if Path(p).exists()),
            hidden_dirs=tuple(Path(os.path.realpath(p)) for p in hidden_dirs),
            network=network,
            egress_allow=tuple(egress_allow),
            egress_deny=tuple(egress_deny),
            egress_ports=tuple(egress_ports),
            cgroups=cgroups,
            memory_bytes=memory_bytes,
            max_pids=max_pids,
        )
        problem = candidate._problem()
        if problem is None:
            if per_run and network == "none":
                return replace(candidate, runs=RunSandboxes(candidate))
            return candidate
        if mode == "bwrap":
            raise SandboxUnavailable(f"tool sandbox: {problem}. {FIX_HINT}")
        return cls.refused(problem)

    def _problem(self) -> str | None:
        """None when a confined process starts here, else why not."""
        if self.bwrap is None or not os.access(self.bwrap, os.X_OK):
            return "bubblewrap (bwrap) is not installed"
        if self.run_as is not None and self.setpriv is None:
            return "setpriv (util-linux) is missing, so a root worker cannot drop to an unprivileged user"
        if not seccomp_filter.supported():
            return f"no seccomp filter for this architecture ({os.uname().machine})"
        probe_dir = Path(os.path.realpath(os.getcwd()))
        seccomp = seccomp_filter.program_fd()
        argv = self.command(["/bin/sh", "-c", "exit 0"], run_dir=probe_dir, cwd=probe_dir, seccomp_fd=seccomp)
        try:
            probe = subprocess.run(
                argv, capture_output=True, timeout=PROBE_TIMEOUT, preexec_fn=no_new_privs, pass_fds=(seccomp,)
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bwrap does not start ({e})"
        finally:
            os.close(seccomp)
        if probe.returncode != 0:
            reason = probe.stderr.decode(errors="replace").strip().splitlines()
            return f"bwrap cannot confine a process here ({reason[-1] if reason else f'exit {probe.returncode}'})"
        return None

    # ---- what the worker says and does ------------------------------------------

    def describe(self) -> str:
        if self.mode == "refused":
            return f"tool sandbox: UNAVAILABLE ({self.problem}); python_execute and bash are refused. {FIX_HINT}"
        limits = self.cgroups.describe() if self.cgroups else "no cgroup (per-process rlimits only)"
        if self.mode == "none":
            return (
                "tool sandbox: NONE ([tools] sandbox = \"none\"): tools run unconfined, with the "
                f"worker's user, files and network; {limits}"
            )
        user = f"uid {self.run_as[0]}" if self.run_as else f"uid {os.geteuid()} (the worker's)"
        network = (
            "network: public internet through the egress proxy only"
            if self.network == "internet"
            else "network: none"
        )
        entered = "one per run, each call entered" if self.runs is not None else "one per call"
        return (
            f"tool sandbox: bubblewrap, {entered} (system read-only, only the run directory writable, "
            f"own pid/net/ipc namespaces, no capabilities, {user}); {network}; {limits}"
        )

    @property
    def refusal(self) -> str | None:
        """The observation for a refused process tool, or None if tools may run."""
        if self.mode != "refused":
            return None
        return (
            f"This tool is disabled on this worker: the tool sandbox cannot start ({self.problem}). "
            "Use the other tools, or finish and say what you could not do."
        )

    def command(
        self,
        argv: list[str],
        *,
        run_dir: Path,
        cwd: Path,
        seccomp_fd: int | None = None,
        egress_socket: Path | None = None,
    ) -> list[str]:
        """argv wrapped in bubblewrap (unchanged in mode "none").
        seccomp_fd: seccomp_filter.program_fd(), passed on to bwrap by the caller.
        egress_socket: the call's egress proxy (network "internet"); tool code
        finds it on its own loopback, port EGRESS_PORT."""
        if self.mode == "none":
            return argv
        if self.mode == "refused" or self.bwrap is None:
            raise RuntimeError(f"tool sandbox unavailable: {self.problem}")
        wrapped = [
            self.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-net",
            "--unshare-cgroup-try",
            "--hostname", "sandbox",
        ]
        if seccomp_fd is not None:
            wrapped += ["--seccomp", str(seccomp_fd)]
        if self.run_as is None:
            # The worker is unprivileged: bwrap makes a user namespace for the
            # mounts; forbid the tool another one (kernel attack surface).
            wrapped += ["--unshare-user", "--disable-userns"]
        else:
            # bwrap runs as root: keep only what setpriv needs to drop to the tool user.
            wrapped += ["--cap-drop", "ALL"]
            wrapped += [arg for cap in ROOT_SETUP_CAPS for arg in ("--cap-add", cap)]
        mounted: list[Path] = []
        for name in SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                wrapped += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                wrapped += ["--ro-bind", str(host), str(host)]
                mounted.append(host)
        # /tmp is the call's own, and its tool user's (bwrap would make it 0755 as
        # root, where a root worker's tool user could not write: TMPDIR says /tmp).
        wrapped += ["--dev", "/dev", "--proc", "/proc", "--size", str(TMP_BYTES), "--perms", "1777", "--tmpfs", "/tmp"]
        made = {Path("/"), Path("/tmp")}
        for kept in _interpreter_dirs():
            if not any(_under(kept, m) for m in mounted):
                wrapped += _parents(kept, mounted, made) + ["--ro-bind", str(kept), str(kept)]
                mounted.append(kept)
        # The workspace root (other runs, the undo history) and the hidden
        # directories become empty where they lie inside something visible;
        # the interpreter is bound again if it lives in one of them.
        candidates = sorted({d for d in (self.workspace_root, *self.hidden_dirs) if d is not None})
        blanked: list[Path] = []
        for directory in candidates:
            if _visible(directory, mounted, blanked) and directory not in mounted:
                wrapped += ["--tmpfs", str(directory)]
                blanked.append(directory)
        rebound = [kept for kept in _interpreter_dirs() if any(_under(kept, b) for b in blanked)]
        for kept in rebound:
            wrapped += _parents(kept, mounted, made, blanked) + ["--ro-bind", str(kept), str(kept)]
        mounted += rebound
        for directory in candidates:  # inside the interpreter bound again: empty it again
            if any(_under(directory, kept) and directory != kept for kept in rebound):
                wrapped += ["--tmpfs", str(directory)]
        for hidden in self.hidden_files:
            if _visible(hidden, mounted, blanked, rebound):
                wrapped += ["--tmpfs", str(hidden)] if hidden.is_dir() else ["--ro-bind", "/dev/null", str(hidden)]
        wrapped += _parents(run_dir, mounted, made, blanked) + ["--bind", str(run_dir), str(run_dir)]
        if egress_socket is not None:
            wrapped += _parents(Path(EGRESS_SOCKET), mounted, made)
            wrapped += ["--ro-bind", str(egress_socket), EGRESS_SOCKET]
            wrapped += ["--ro-bind", str(FORWARDER), EGRESS_FORWARDER]
            argv = [sys.executable, "-I", "-S", EGRESS_FORWARDER, str(EGRESS_PORT), EGRESS_SOCKET, "--", *argv]
        if self.run_as is None:
            return wrapped + ["--chdir", str(cwd), "--"] + argv
        uid, gid = self.run_as
        if self.setpriv is None:  # _problem() refuses such a sandbox before it builds a command
            raise RuntimeError("tool sandbox unavailable: setpriv (util-linux) is missing")
        # bwrap is root without CAP_DAC_OVERRIDE here and cannot enter the
        # run directory (0700, the tool user's): the tool user enters it.
        return wrapped + [
            "--chdir", "/", "--",
            self.setpriv,
            f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
            "--no-new-privs", "--",
            "/bin/sh", "-c", 'cd -- "$0" && exec "$@"', str(cwd), *argv,
        ]

    @contextlib.contextmanager
    def call_group(self) -> Iterator[CallGroup | None]:
        """The call's cgroup (None where the machine has none for us)."""
        if self.cgroups is None:
            yield None
            return
        with self.cgroups.call() as group:
            yield group

    @property
    def tool_owner(self) -> tuple[int, int] | None:
        """(uid, gid) a root worker gives run directories to, so the tools can
        write there (the editor's files get the same owner); None otherwise."""
        return self.run_as if self.mode == "bwrap" else None

    def prepare_run_dir(self, run_dir: Path) -> None:
        """A run directory made before the worker knew its tool user (a
        Workspace without tool_owner) is handed to it here."""
        if self.tool_owner is None:
            return
        uid, gid = self.tool_owner
        info = os.stat(run_dir, follow_symlinks=False)
        if (info.st_uid, info.st_gid) != (uid, gid):
            os.chown(run_dir, uid, gid, follow_symlinks=False)

    def environment(self, run_dir: Path) -> dict[str, str]:
        """The tool's environment, built from scratch so no worker secret (API
        keys, tokens) can leak into it."""
        interpreter_dir = os.path.dirname(sys.executable)
        system_path = "/usr/local/bin:/usr/bin:/bin"
        env = {
            # The worker's interpreter first, so `python` means the venv's.
            "PATH": os.pathsep.join([interpreter_dir, system_path]),
            "HOME": str(run_dir),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TMPDIR": "/tmp",
            "PYTHONUNBUFFERED": "1",
            "TERM": "dumb",
            # matplotlib draws to files only, and keeps its font list in the run
            # directory: built by a run's first import (a few tenths of a second), read by the next.
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(run_dir / MATPLOTLIB_DIR),
        }
        if self.mode == "none":
            tmp_dir = run_dir / ".tmp"
            tmp_dir.mkdir(exist_ok=True)
            env["TMPDIR"] = str(tmp_dir)
            env["PATH"] = os.pathsep.join([interpreter_dir, os.environ.get("PATH") or os.defpath])
        return env  # with network "internet", the forwarder adds the proxy variables


FIX_HINT = (
    "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow user namespaces, "
    "or set [tools] sandbox = \"none\" to run tools unconfined (not recommended)"
)


ROOT_SETUP_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")
"""What setpriv needs to change user and empty the bounding set; gone after it."""

def _interpreter_dirs() -> list[Path]:
    """Where the worker's Python lives: tools run this interpreter."""
    return sorted({Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def _visible(path: Path, mounted: Sequence[Path], blanked: Sequence[Path], rebound: Sequence[Path] = ()) -> bool:
    """Whether `path` is in the sandbox's view: inside something bound, and
    not inside something emptied since (unless bound again)."""
    if any(_under(path, kept) for kept in rebound):
        return True
    return any(_under(path, m) for m in mounted) and not any(_under(path, b) for b in blanked)


def _parents(path: Path, mounted: Sequence[Path], made: set[Path], blanked: Sequence[Path] = ()) -> list[str]:
    """bwrap arguments that create the directories leading to `path` as 0755
    (bwrap would make them 0700 as root, closed to the tool user)."""
    arguments: list[str] = []
    for parent in reversed(path.parents):
        gone = any(_under(parent, b) and parent != b for b in blanked)
        if parent in made or (not gone and any(_under(parent, m) for m in mounted)):
            continue
        arguments += ["--perms", "0755", "--dir", str(parent)]
        made.add(parent)
    return arguments


def _under(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents
