"""Per-run directories on the worker, and the check that keeps tool paths inside them.

Layout under the worker's workspace root:

    <root>/<name>/             the run's directory, where the agent's tools work
    <root>/.history/<name>/    worker-private bookkeeping (editor undo history)

Run names never start with ".", so no run directory can be, or contain, the
private ".history" tree.

Runs are private on a shared machine: the root and everything the worker
makes in it are 0700 (a root that an older version made 0755 is tightened
at start, which closes the way to every run directory). A run directory
belongs to the user tools run as (Workspace.tool_owner), so files the worker
creates there are theirs too.

A run holds at most `run_disk_bytes` of disk, its directory and its undo
history together (activities/tools/disk_use.py); the guard of a tool call
and the editor enforce it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from agent_model.activity_specs import PREPARE_WORKSPACE_CONFIG
from temporalio import activity
from temporalio.exceptions import ApplicationError
from agent_model.errors import INVALID_WORKSPACE_NAME_ERROR

from activities.tools import disk_use

log = logging.getLogger(__name__)

HISTORY_DIR_NAME = ".history"

_NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]+")


class InvalidWorkspaceName(ApplicationError):
    """A run name that is not a safe directory name. A bug in the caller, not a
    transient failure, hence non-retryable."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"Invalid workspace name {name!r}: it must be non-empty, use only "
            "letters, digits, '.', '_' and '-', and not start with '.'.",
            type=INVALID_WORKSPACE_NAME_ERROR,
            non_retryable=True,
        )


class PathOutsideWorkspace(ValueError):
    def __init__(self, path: str, run_dir: Path) -> None:
        super().__init__(
            f"Path {path!r} is outside the run's working directory {run_dir} "
            "(after following symlinks); only paths inside it are allowed."
        )




class Workspace:
    """The worker's workspace root and the run directories inside it."""

    def __init__(
        self,
        root: Path,
        *,
        run_disk_bytes: int = disk_use.DEFAULT_RUN_BYTES,
        tool_owner: tuple[int, int] | None = None,
        reserve_bytes: int | None = None,
    ) -> None:
        """run_disk_bytes: a run's disk quota. tool_owner: (uid, gid) run
        directories are given to (the sandbox's tool user when the worker is
        root). reserve_bytes: free space kept on the disk (default:
        disk_use.reserve_bytes)."""
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Real path, so containment checks compare like with like.
        self.root = Path(os.path.realpath(root))
        make_private(self.root)
        self.run_disk_bytes = run_disk_bytes
        self.tool_owner = tool_owner
        self._reserve_bytes = reserve_bytes

    def run_dir(self, name: str) -> Path:
        """The run's directory, created if missing (and given to the tool owner)."""
        directory = self.root / checked_name(name)
        directory.mkdir(exist_ok=True, mode=0o700)
        if self.tool_owner is not None:
            info = os.stat(directory, follow_symlinks=False)
            if (info.st_uid, info.st_gid) != self.tool_owner:
                os.chown(directory, *self.tool_owner, follow_symlinks=False)
        return directory

    def history_dir(self, name: str) -> Path:
        """Worker-private directory for the run, outside its run directory so
        the agent's tools cannot reach it. Created if missing."""
        history = self.root / HISTORY_DIR_NAME
        history.mkdir(exist_ok=True, mode=0o700)
        directory = history / checked_name(name)
        directory.mkdir(exist_ok=True, mode=0o700)
        return directory

    def reserve(self) -> int:
        """Free space kept on the workspace's disk for the rest of the machine."""
        if self._reserve_bytes is not None:
            return self._reserve_bytes
        return disk_use.reserve_bytes(self.root)

    def write_refusal(self, name: str, adding: int) -> str | None:
        """Why run `name` may not write `adding` more bytes now, or None.
        Writes that add nothing are always allowed: they are how a run gets
        back under its quota."""
        if adding <= 0:
            return None
        reserve = self.reserve()
        if disk_use.free_bytes(self.root) - adding < reserve:
            return disk_use.low_disk_note(reserve)
        quota = self.run_disk_bytes
        used = 0
        for directory in (self.run_dir(name), self.history_dir(name)):
            held = disk_use.tree_bytes(directory, quota)
            if held is None:
                return disk_use.over_quota_note(quota, adding)
            used += held
        if used + adding > quota:
            return disk_use.over_quota_note(quota, adding)
        return None

    def resolve(self, name: str, path: str) -> Path:
        """The real path (symlinks followed) that `path` names for this run.

        Relative paths are taken from the run directory; absolute paths are
        accepted if they lead inside it. Raises PathOutsideWorkspace otherwise.
        """
        run_dir = self.run_dir(name)
        real = Path(os.path.realpath(run_dir / path))  # an absolute `path` replaces run_dir
        if real != run_dir and run_dir not in real.parents:
            raise PathOutsideWorkspace(path, run_dir)
        return real


def make_private(directory: Path) -> None:
    """Close `directory` to every other account (0700), if it is not already."""
    try:
        mode = os.stat(directory).st_mode & 0o777
        if mode & 0o077:
            os.chmod(directory, mode & 0o700)
    except OSError as e:  # e.g. a root that belongs to someone else: say so, still work
        log.warning("workspace: cannot make %s private to the worker (%s)", directory, e.strerror or e)


def checked_name(name: str) -> str:
    if not _NAME_PATTERN.fullmatch(name) or name.startswith("."):
        raise InvalidWorkspaceName(name)
    return name


PREPARE_WORKSPACE_OPTIONS = PREPARE_WORKSPACE_CONFIG


class WorkspaceActivities:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    @activity.defn(name="prepare_workspace")
    async def prepare_workspace(self, name: str) -> str:
        """Create the run's directory and return its absolute path."""
        return str(self.workspace.run_dir(name))
