"""A run's share of the disk: a tool call that fills its run directory past
the quota is stopped, the disk keeps its free space, and other runs go on
(activities/tools/disk_use.py, call_guard.py, workspace.py)."""

from __future__ import annotations

import os
import resource

import pytest
from temporalio.testing import ActivityEnvironment

from agent_model.tool_io import ToolRequest
from runtime.worker_factory import worker_resources
from testkit.settings import make_settings
from tools import TOOLS

MiB = 1024**2
QUOTA_MB = 4
FILLER = "for i in $(seq 512); do head -c 1048576 /dev/zero > f$i; done; echo wrote all"
"""512 MiB in 1 MiB files: each below the file size limit, together far past the quota."""


def resources_with_quota(tmp_path, sandbox: str = "auto"):
    settings = make_settings("http://127.0.0.1:9/v1", tmp_path / "ws", tool_sandbox=sandbox)
    resources = worker_resources(settings.model_copy(update={"tool_run_disk_mb": QUOTA_MB}))
    if sandbox != "none" and resources.sandbox.mode != "bwrap":
        if os.environ.get("CI"):
            pytest.fail(f"bubblewrap must be available in CI ({resources.sandbox.problem})")
        pytest.skip(f"bubblewrap is not available ({resources.sandbox.problem})")
    return resources


def free_space(path) -> int:
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def allocated(directory) -> int:
    return sum(
        os.lstat(os.path.join(top, name)).st_blocks * 512 for top, _, files in os.walk(directory) for name in files
    )


async def bash(resources, run: str, command: str):
    tool = TOOLS["bash"].build(resources)
    return await ActivityEnvironment().run(tool, ToolRequest(workspace=run, arguments={"command": command}))


async def test_a_call_that_fills_the_run_directory_is_stopped_and_other_runs_go_on(tmp_path):
    resources = resources_with_quota(tmp_path)
    run_dir = resources.workspace.run_dir("filler")
    free_before = free_space(run_dir)

    filled = await bash(resources, "filler", FILLER)

    assert filled.error and f"over its {QUOTA_MB} MiB quota; delete files to go on" in filled.output, filled.output
    assert "wrote all" not in filled.output
    # Stopped within a few polls: far from the 512 MiB it set out to write.
    assert free_before - free_space(run_dir) < 128 * MiB
    assert allocated(run_dir) < 128 * MiB

    # Started over the quota: it may not grow...
    grew = await bash(resources, "filler", "head -c 1048576 /dev/zero > more; sleep 5; echo survived")
    assert grew.error and "quota" in grew.output and "survived" not in grew.output, grew.output
    # ...but it may delete, and then it is under the quota again.
    cleaned = await bash(resources, "filler", "rm -f f* more; echo cleaned")
    assert not cleaned.error and cleaned.output.strip() == "cleaned", cleaned.output
    again = await bash(resources, "filler", "head -c 1048576 /dev/zero > small; echo ok")
    assert not again.error and again.output.strip() == "ok", again.output

    other = await bash(resources, "other-run", "echo still works > note; cat note")
    assert not other.error and other.output.strip() == "still works", other.output


async def test_many_empty_files_count_too(tmp_path):
    """Entries weigh at least a block each, so many empty files reach the quota."""
    resources = resources_with_quota(tmp_path)
    command = "mkdir d && cd d && for i in $(seq 20000); do : > $i; done; echo made all"
    result = await bash(resources, "empties", command)
    assert result.error and "quota" in result.output and "made all" not in result.output, result.output


async def test_no_file_is_larger_than_the_quota(tmp_path):
    """RLIMIT_FSIZE follows the quota: one file cannot take more than the run's share."""
    resources = resources_with_quota(tmp_path, sandbox="none")
    outside = tmp_path / "elsewhere.bin"  # unconfined: a file outside the run directory, which no scan sees
    tool = TOOLS["python_execute"].build(resources)
    code = f"""
try:
    open({str(outside)!r}, "wb").write(bytes({QUOTA_MB + 1} * 1024 * 1024))
    print("wrote it")
except OSError as e:
    print("refused", e.strerror)
"""
    result = await ActivityEnvironment().run(tool, ToolRequest(workspace="run-1", arguments={"code": code}))
    assert "refused File too large" in result.output, result.output
    assert outside.stat().st_size <= QUOTA_MB * MiB


def test_usage_counts_blocks_and_entries_and_stops_at_the_limit(tmp_path):
    from activities.tools.disk_use import BLOCK, tree_bytes

    (tmp_path / "data").write_bytes(b"x" * (3 * BLOCK + 1))
    for i in range(10):
        (tmp_path / f"empty-{i}").touch()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link").symlink_to("/etc/passwd")  # counted as itself, never followed
    expected = BLOCK + 4 * BLOCK + 10 * BLOCK + BLOCK + BLOCK  # root, data, empties, sub, link
    assert tree_bytes(tmp_path, 10**9) == expected
    assert expected // 2 < tree_bytes(tmp_path, expected // 2) <= expected
    assert tree_bytes(tmp_path / "missing", 10**9) == 0


def test_a_tree_deeper_than_the_open_file_limit_cannot_be_measured(tmp_path):
    from activities.tools.disk_use import BLOCK, tree_bytes

    deep = tmp_path
    for _ in range(200):
        deep = deep / "d"
    deep.mkdir(parents=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 50, hard))
    try:
        assert tree_bytes(tmp_path, 10**12) is None
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert tree_bytes(tmp_path, 10**12) == 201 * BLOCK


async def test_no_tool_write_starts_when_the_disk_is_below_its_reserve(tmp_path):
    from activities.file_editor import FileEditor
    from activities.tools.sandbox import ToolSandbox
    from activities.workspace import Workspace
    from tools.bash import Bash

    root = tmp_path / "ws"
    workspace = Workspace(root, reserve_bytes=free_space(tmp_path) + 1024 * MiB)  # more than there is
    env = ActivityEnvironment()
    ran = await env.run(
        Bash(workspace, sandbox=ToolSandbox.none()).run,
        ToolRequest(workspace="run-1", arguments={"command": "touch ran"}),
    )
    edited = await env.run(
        FileEditor(workspace).run,
        ToolRequest(workspace="run-1", arguments={"command": "create", "path": "f.txt", "file_text": "x"}),
    )
    for result in (ran, edited):
        assert result.error and "disk is nearly full" in result.output, result.output
    assert os.listdir(workspace.run_dir("run-1")) == []


def test_the_quota_is_a_setting(tmp_path):
    from testkit.settings import config_error, load_config

    assert load_config(tmp_path, "[tools]\nrun_disk_mb = 8\n").tool_run_disk_mb == 8
    assert load_config(tmp_path, "").tool_run_disk_mb == 1024
    message = config_error(tmp_path, "[tools]\nrun_disk_mb = 0\n")
    assert "[tools] run_disk_mb must be an integer of at least 1" in message


HIDDEN_FILLER = """
import os, time
held = []
for i in range(64):
    f = open(f"gone{i}", "wb")
    os.unlink(f"gone{i}")  # no scan of the tree sees it now, yet its blocks stay taken
    f.write(bytes(MiB))
    f.flush()
    held.append(f)
time.sleep(2)
print("held them all")
""".replace("MiB", str(MiB))


@pytest.mark.parametrize("sandbox", ["auto", "none"])
async def test_files_deleted_but_held_open_count_too(tmp_path, sandbox):
    resources = resources_with_quota(tmp_path, sandbox=sandbox)
    tool = TOOLS["python_execute"].build(resources)
    result = await ActivityEnvironment().run(tool, ToolRequest(workspace="hider", arguments={"code": HIDDEN_FILLER}))
    assert result.error and f"over its {QUOTA_MB} MiB quota" in result.output, result.output
    assert "held them all" not in result.output
