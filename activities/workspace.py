"""Per-run directories on the worker, and the check that keeps tool paths inside them.

Layout under the worker's workspace root:

    <root>/<name>/             the run's directory, where the agent's tools work
    <root>/.history/<name>/    worker-private bookkeeping (editor undo history)

Run names never start with ".", so no run directory can be, or contain, the
private ".history" tree.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agent_model.activity_specs import PREPARE_WORKSPACE_CONFIG
from temporalio import activity
from temporalio.exceptions import ApplicationError


HISTORY_DIR_NAME = ".history"

_NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]+")


class InvalidWorkspaceName(ApplicationError):
    """A run name that is not a safe directory name. A bug in the caller, not a
    transient failure, hence non-retryable."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"Invalid workspace name {name!r}: it must be non-empty, use only "
            "letters, digits, '.', '_' and '-', and not start with '.'.",
            type="InvalidWorkspaceName",
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

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        # Real path, so containment checks compare like with like.
        self.root = Path(os.path.realpath(root))

    def run_dir(self, name: str) -> Path:
        """The run's directory, created if missing."""
        directory = self.root / _checked_name(name)
        directory.mkdir(exist_ok=True)
        return directory

    def history_dir(self, name: str) -> Path:
        """Worker-private directory for the run, outside its run directory so
        the agent's tools cannot reach it. Created if missing."""
        directory = self.root / HISTORY_DIR_NAME / _checked_name(name)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

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


def _checked_name(name: str) -> str:
    if not _NAME_PATTERN.fullmatch(name) or name.startswith("."):
        raise InvalidWorkspaceName(name)
    return name


PREPARE_WORKSPACE_OPTIONS: dict = PREPARE_WORKSPACE_CONFIG.options()


class WorkspaceActivities:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    @activity.defn(name="prepare_workspace")
    async def prepare_workspace(self, name: str) -> str:
        """Create the run's directory and return its absolute path."""
        return str(self.workspace.run_dir(name))
