"""Runs are private on a shared machine: another local account can neither
list nor read the workspace, a run's directory, the files tools and the
editor wrote there, nor the shared think context or the server's data.
Being that other account needs root; that test is skipped otherwise."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.context_store import ContextStore
from agent_model.tool_io import ToolRequest
from runtime.worker_factory import worker_resources
from testkit.settings import make_settings
from tools import TOOLS

OTHER_ACCOUNT = 12345
"""A uid and gid no file here belongs to."""

as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")


@pytest.fixture
def open_base():
    """A directory every account may enter (tmp_path's parents are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="dm-privacy-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def as_other_account(*paths: Path) -> dict[str, str]:
    """For each path, what OTHER_ACCOUNT gets trying to list (directories) or read (files) it."""
    script = (
        'for p in "$@"; do if ls -- "$p" >/dev/null 2>&1 || cat -- "$p" >/dev/null 2>&1; '
        'then echo "allowed $p"; else echo "denied $p"; fi; done'
    )
    out = subprocess.run(
        ["setpriv", f"--reuid={OTHER_ACCOUNT}", f"--regid={OTHER_ACCOUNT}", "--clear-groups",
         "/bin/sh", "-c", script, "sh", *map(str, paths)],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    return {path: verdict for verdict, path in (line.split(" ", 1) for line in out.splitlines())}


@as_root
async def test_another_account_reads_nothing_of_a_run(open_base):
    root = open_base / "workspace"
    root.mkdir(mode=0o755)  # as an older version left it
    root.chmod(0o755)
    settings = make_settings("http://127.0.0.1:9/v1", root, tool_sandbox="auto")
    resources = worker_resources(settings)
    if resources.sandbox.mode != "bwrap":
        pytest.skip(f"bubblewrap is not available ({resources.sandbox.problem})")
    env = ActivityEnvironment()
    create = {"command": "create", "path": "notes/edited.txt", "file_text": "edited\n"}
    created = await env.run(TOOLS["str_replace_editor"].build(resources), ToolRequest(workspace="run-1", arguments=create))
    assert not created.error, created.output
    write = {"command": "echo secret > tool.txt && mkdir sub && echo x > sub/f && echo ok"}
    wrote = await env.run(TOOLS["bash"].build(resources), ToolRequest(workspace="run-1", arguments=write))
    assert wrote.output.strip() == "ok", wrote.output
    store = ContextStore(root)
    blob = store.root / (name := store.put(b"the model's context", 32))[:2] / name

    run_dir = root / "run-1"
    tool_user = (settings.tool_user, settings.tool_user)
    for path in (run_dir, run_dir / "tool.txt", run_dir / "sub", run_dir / "notes", run_dir / "notes" / "edited.txt"):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == tool_user, path  # the tools' own files, whoever wrote them
        assert stat.S_IMODE(info.st_mode) & 0o077 == 0, f"{path} is {oct(info.st_mode)}"
    for path in (root, store.root, blob.parent, blob):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, f"{path} is {oct(path.stat().st_mode)}"

    private = (root, run_dir, run_dir / "tool.txt", run_dir / "notes" / "edited.txt", store.root, blob)
    seen = as_other_account(open_base, *private)
    assert seen.pop(str(open_base)) == "allowed", "the other account must reach the base, or the test proves nothing"
    assert set(seen.values()) == {"denied"}, seen


def test_directories_an_older_version_left_open_are_closed_at_start(tmp_path, monkeypatch):
    from activities.workspace import Workspace
    from runtime.embedded_server import private_data_dir

    root, context, data = tmp_path / "ws", tmp_path / "ws" / ".context", tmp_path / "data"
    for directory in (root, context, data):
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)
    monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(data))
    Workspace(root)
    ContextStore(root)
    assert private_data_dir() == data
    for directory in (root, context, data):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
