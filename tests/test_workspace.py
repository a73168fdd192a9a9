"""Run directories, path confinement and run-name mapping."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.workspace import InvalidWorkspaceName, PathOutsideWorkspace, Workspace, WorkspaceActivities
from agent_model.workspace_names import MAX_NAME_LENGTH, workspace_name_for

SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "root")


def test_root_and_run_dir_are_created(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "new" / "root")
    run_dir = workspace.run_dir("run-1")
    assert run_dir.is_dir()
    assert run_dir.parent == workspace.root
    assert workspace.run_dir("run-1") == run_dir


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a b", "é", ".history", ".hidden", "x\0"])
def test_run_dir_rejects_unsafe_names(workspace: Workspace, name: str) -> None:
    with pytest.raises(InvalidWorkspaceName) as raised:
        workspace.run_dir(name)
    assert raised.value.non_retryable
    assert not (workspace.root / "x").exists()


def test_history_dir_is_outside_the_run_dir(workspace: Workspace) -> None:
    run_dir = workspace.run_dir("run")
    history = workspace.history_dir("run")
    assert history.is_dir()
    assert history == workspace.root / ".history" / "run"
    assert run_dir not in history.parents


def test_resolve_relative_and_absolute_paths_inside(workspace: Workspace) -> None:
    run_dir = workspace.run_dir("run")
    assert workspace.resolve("run", "a/b.txt") == run_dir / "a" / "b.txt"
    assert workspace.resolve("run", str(run_dir / "c.txt")) == run_dir / "c.txt"
    assert workspace.resolve("run", "a/../d.txt") == run_dir / "d.txt"
    assert workspace.resolve("run", ".") == run_dir


def test_resolve_follows_symlinks_that_stay_inside(workspace: Workspace) -> None:
    run_dir = workspace.run_dir("run")
    (run_dir / "real").mkdir()
    (run_dir / "alias").symlink_to(run_dir / "real")
    assert workspace.resolve("run", "alias/new.txt") == run_dir / "real" / "new.txt"


@pytest.mark.parametrize("path", ["../x", "../run-other/x", "/etc/passwd", "/", "a/../../x"])
def test_resolve_refuses_paths_outside(workspace: Workspace, path: str) -> None:
    workspace.run_dir("run-other")
    with pytest.raises(PathOutsideWorkspace) as raised:
        workspace.resolve("run", path)
    assert isinstance(raised.value, ValueError)
    assert repr(path) in str(raised.value)


def test_resolve_refuses_an_absolute_path_outside(workspace: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    with pytest.raises(PathOutsideWorkspace):
        workspace.resolve("run", str(outside))


def test_resolve_refuses_symlinks_leading_outside(workspace: Workspace, tmp_path: Path) -> None:
    run_dir = workspace.run_dir("run")
    outside_dir = tmp_path / "outside"
    outside_dir.mkdir()
    (outside_dir / "secret.txt").write_text("secret")
    (run_dir / "file_link").symlink_to(outside_dir / "secret.txt")
    (run_dir / "dir_link").symlink_to(outside_dir)
    (run_dir / "dangling").symlink_to(outside_dir / "not-yet.txt")
    for path in ["file_link", "dir_link", "dir_link/secret.txt", "dir_link/new.txt", "dangling"]:
        with pytest.raises(PathOutsideWorkspace):
            workspace.resolve("run", path)


def test_name_mapping_keeps_safe_ids() -> None:
    assert workspace_name_for("agent-run-42") == "agent-run-42"
    assert workspace_name_for("run_1.2") == "run_1.2"


def test_name_mapping_never_collides() -> None:
    ids = ["a/b", "a_b", "a b", "a\\b", "a:b", "", "_", ".", "..", ".x", "_x", "x" * 200, "x" * 201]
    names = [workspace_name_for(run_id) for run_id in ids]
    assert len(set(names)) == len(ids)
    # An id that copies the hashed name of another id gets a different name.
    impostor = workspace_name_for("a/b")
    assert workspace_name_for(impostor) != impostor


@pytest.mark.parametrize(
    "run_id", ["a/b", "../../etc", "", ".", "..", ".history", "x" * 500, "weird \n\t id ✓", "\udcff"]
)
def test_name_mapping_is_safe_and_deterministic(workspace: Workspace, run_id: str) -> None:
    name = workspace_name_for(run_id)
    assert SAFE_NAME.fullmatch(name)
    assert len(name) <= MAX_NAME_LENGTH
    assert name == workspace_name_for(run_id)
    assert workspace.run_dir(name).parent == workspace.root


@pytest.mark.asyncio
async def test_prepare_workspace_activity(workspace: Workspace) -> None:
    activities = WorkspaceActivities(workspace)
    path = await ActivityEnvironment().run(activities.prepare_workspace, "run-7")
    assert os.path.isabs(path)
    assert Path(path) == workspace.root / "run-7"
    assert Path(path).is_dir()
