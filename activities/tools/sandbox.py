"""Confinement of the processes that python_execute and bash start.

Two independent layers, each used when the machine offers it:

- bubblewrap (`bwrap`, Debian package `bubblewrap`): the whole filesystem is
  read-only except the run's own directory; the workspace root (other runs,
  the editor's undo history) and the config file that may hold API keys are
  hidden; /tmp is private; the process gets its own pid namespace, so the
  worker's /proc/<pid>/environ is out of sight and, when the namespace's first
  process dies, the kernel kills every process in it (nothing escapes with
  setsid or a double fork).
- a pids cgroup (cgroup v1 `pids` controller or a v2 delegated subtree): at
  most `max_pids` processes and threads, so a fork bomb stops there instead of
  exhausting the machine's pids (RLIMIT_NPROC does not bind root).

The worker reports at start which layers are active; `mode = "bwrap"` makes a
missing bubblewrap a start-up error instead of a warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "none"]

DEFAULT_MAX_PIDS = 256
"""Processes and threads one tool call may have at once."""
CGROUP_PARENT = "durable-manus-tools"
V1_PIDS_ROOT = Path("/sys/fs/cgroup/pids")
V2_ROOT = Path("/sys/fs/cgroup")


class SandboxUnavailable(Exception):
    """mode "bwrap" was asked for and bubblewrap does not work here."""


def _bwrap_problem(bwrap: str | None) -> str | None:
    """None when bubblewrap can start a confined process here, else why not."""
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        probe = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "true"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap does not start ({e})"
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip().splitlines()
        return f"bwrap cannot create namespaces here ({reason[0] if reason else probe.returncode})"
    return None


def _pids_cgroup_parent() -> Path | None:
    """A cgroup directory under which this process may create pids-limited cgroups."""
    candidates = [V1_PIDS_ROOT]
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                candidates.append(V2_ROOT / line[3:].lstrip("/"))
    except OSError:
        pass
    for base in candidates:
        parent = base / CGROUP_PARENT
        try:
            parent.mkdir(exist_ok=True)
            if base != V1_PIDS_ROOT:  # v2: children of `parent` need the pids controller
                (parent / "cgroup.subtree_control").write_text("+pids")
            probe = parent / f"probe-{uuid.uuid4().hex[:8]}"
            probe.mkdir()
            usable = (probe / "pids.max").exists()
            probe.rmdir()
        except OSError:
            continue
        if usable:
            return parent
    return None


@dataclass
class ToolSandbox:
    bwrap: str | None = None
    """Path of bwrap when filesystem/pid isolation is on."""
    cgroup_parent: Path | None = None
    """Where per-call pids cgroups are made; None = no process-count limit."""
    workspace_root: Path | None = None
    hidden_files: Sequence[Path] = field(default_factory=tuple)
    max_pids: int = DEFAULT_MAX_PIDS

    @classmethod
    def none(cls) -> "ToolSandbox":
        return cls()

    @classmethod
    def detect(
        cls,
        mode: SandboxMode,
        workspace_root: Path,
        hidden_files: Sequence[Path] = (),
        max_pids: int = DEFAULT_MAX_PIDS,
    ) -> "ToolSandbox":
        if mode == "none":
            return cls.none()
        bwrap = shutil.which("bwrap")
        problem = _bwrap_problem(bwrap)
        if problem and mode == "bwrap":
            raise SandboxUnavailable(f"tool sandbox: {problem}; install bubblewrap or set sandbox = \"auto\"")
        cgroup_parent = _pids_cgroup_parent()
        if cgroup_parent is not None:
            _remove_stale_groups(cgroup_parent)
        return cls(
            bwrap=None if problem else bwrap,
            cgroup_parent=cgroup_parent,
            workspace_root=Path(os.path.realpath(workspace_root)),
            hidden_files=tuple(Path(os.path.realpath(p)) for p in hidden_files if Path(p).exists()),
            max_pids=max_pids,
        )

    def describe(self) -> str:
        fs = "bubblewrap (read-only system, private run directory, own pid namespace)" if self.bwrap else (
            "NONE: tools can read and write whatever the worker's user can (install bubblewrap)"
        )
        pids = f"at most {self.max_pids} processes per call" if self.cgroup_parent else (
            "no process-count limit (no writable pids cgroup)"
        )
        return f"tool sandbox: {fs}; {pids}"

    def command(self, argv: list[str], *, run_dir: Path, cwd: Path, writable: Sequence[Path] = ()) -> list[str]:
        """argv, wrapped in bubblewrap when it is on."""
        if not self.bwrap:
            return argv
        wrapped = [
            self.bwrap,
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
        ]
        if self.workspace_root is not None:
            wrapped += ["--tmpfs", str(self.workspace_root)]
        for kept in _interpreter_dirs():  # e.g. a venv under /tmp must stay visible
            if _under(kept, Path("/tmp")) or (self.workspace_root and _under(kept, self.workspace_root)):
                wrapped += ["--ro-bind", str(kept), str(kept)]
        for hidden in self.hidden_files:
            wrapped += ["--ro-bind", "/dev/null", str(hidden)]
        for path in (run_dir, *writable):
            wrapped += ["--bind", str(path), str(path)]
        wrapped += ["--chdir", str(cwd), "--", *argv]
        return wrapped

    @contextlib.contextmanager
    def process_group(self) -> Iterator[str | None]:
        """A fresh pids cgroup for one call: yields its cgroup.procs path (the
        child joins it before exec), and removes it afterwards, killing any
        process still inside."""
        if self.cgroup_parent is None:
            yield None
            return
        _remove_stale_groups(self.cgroup_parent)
        group = self.cgroup_parent / f"call-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            group.mkdir()
            (group / "pids.max").write_text(str(self.max_pids))
        except OSError as e:
            log.warning("tool sandbox: cannot create a pids cgroup (%s); this call runs without it", e)
            yield None
            return
        try:
            yield str(group / "cgroup.procs")
        finally:
            _empty_and_remove(group)


def _interpreter_dirs() -> list[Path]:
    """Where the worker's Python lives: tools run this interpreter, so the private
    /tmp (or the hidden workspace root) must not cover it."""
    return sorted({Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def _under(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def _remove_stale_groups(parent: Path) -> None:
    """Remove the cgroups of calls whose worker died before cleaning up (a
    SIGKILLed worker never runs its `finally`). A group still in use by a live
    worker is left alone: its name carries that worker's pid."""
    for group in parent.glob("call-*"):
        try:
            worker_pid = int(group.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if worker_pid == os.getpid() or Path(f"/proc/{worker_pid}").exists():
            continue
        _empty_and_remove(group)


def _empty_and_remove(group: Path) -> None:
    for _ in range(50):
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.02)
    log.warning("tool sandbox: could not remove %s", group)
