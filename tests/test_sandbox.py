"""The tool sandbox: bubblewrap and a pids cgroup around python_execute and bash.

CI installs bubblewrap (.ci/run), so there these tests must run; elsewhere
they are skipped when the machine cannot confine processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.tools.bash import Bash
from activities.tools.python_execute import PythonExecute
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest

SECRET = "sk-sandbox-secret-123"


def require(available: bool, what: str) -> None:
    if not available:
        if os.environ.get("CI"):
            pytest.fail(f"{what} must be available in CI (see .ci/run)")
        pytest.skip(f"{what} is not available on this machine")


@pytest.fixture
def setup(tmp_path):
    root = tmp_path / "root"
    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\napi_key = "{SECRET}"\n')
    sandbox = ToolSandbox.detect("auto", root, hidden_files=[config])
    require(sandbox.bwrap is not None, "bubblewrap")
    workspace = Workspace(root)
    (workspace.run_dir("other-run") / "private.txt").write_text("other run's data")
    return workspace, sandbox, config


async def python(workspace, sandbox, code: str, timeout: float = 30.0) -> str:
    tool = PythonExecute(workspace, timeout=timeout, sandbox=sandbox)
    result = await ActivityEnvironment().run(tool.run, ToolRequest(workspace="run-1", arguments={"code": code}))
    return result.output


async def test_only_the_run_directory_is_writable(setup, tmp_path):
    workspace, sandbox, _ = setup
    out = await python(workspace, sandbox, """
import os
open("inside.txt", "w").write("ok")
for path in ["/etc/dm-test", os.path.expanduser("~/../escape.txt"), "../escape.txt", "/tmp/private.txt"]:
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as e:
        print("refused", path, type(e).__name__)
""")
    # Writes outside the run directory fail, or land in a private scratch
    # filesystem that disappears with the call: never in the real one.
    assert (workspace.run_dir("run-1") / "inside.txt").read_text() == "ok"
    assert "refused /etc/dm-test" in out
    assert not (workspace.root / "escape.txt").exists()
    assert not Path("/etc/dm-test").exists()
    assert not Path("/tmp/private.txt").exists()  # /tmp is private to the call


async def test_other_runs_history_and_config_are_hidden(setup):
    workspace, sandbox, config = setup
    out = await python(workspace, sandbox, f"""
import os
print(sorted(os.listdir({str(workspace.root)!r})))
try:
    print("config:", repr(open({str(config)!r}).read()))
except OSError as e:
    print("config:", type(e).__name__)
print("other:", os.path.exists({str(workspace.root / "other-run" / "private.txt")!r}))
""")
    assert "['run-1']" in out
    assert ("config: ''" in out or "config: PermissionError" in out) and SECRET not in out
    assert "other: False" in out


async def test_the_worker_and_other_processes_are_out_of_sight(setup):
    workspace, sandbox, _ = setup
    holder = subprocess.Popen(["sleep", "30"], env={"OPENAI_API_KEY": SECRET, "PATH": os.environ["PATH"]})
    try:
        out = await python(workspace, sandbox, f"""
import os
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            found.append(open(f"/proc/{{pid}}/environ", "rb").read())
        except OSError:
            pass
print("secret seen:", any({SECRET!r}.encode() in e for e in found))
print("holder visible:", os.path.exists("/proc/{holder.pid}/environ"), "worker visible:", os.path.exists("/proc/{os.getpid()}/environ"))
print("key in env:", "OPENAI_API_KEY" in os.environ)
""")
    finally:
        holder.kill()
        holder.wait()
    assert "secret seen: False" in out
    assert "holder visible: False worker visible: False" in out or str(holder.pid) in ("1", "2")
    assert "key in env: False" in out


async def test_bash_keeps_its_directory_and_background_jobs_end_with_the_call(setup):
    workspace, sandbox, _ = setup
    tool = Bash(workspace, sandbox=sandbox)
    env = ActivityEnvironment()
    first = await env.run(tool.run, ToolRequest(workspace="run-1", arguments={"command": "mkdir -p sub; cd sub; (sleep 300 &); setsid sleep 301 & echo started"}))
    assert first.cwd.endswith("/run-1/sub"), first
    second = await env.run(tool.run, ToolRequest(workspace="run-1", arguments={"command": "pwd"}, cwd=first.cwd))
    assert second.output.strip().endswith("/run-1/sub")
    survivors = subprocess.run(["pgrep", "-f", "sleep 30[01]"], capture_output=True, text=True).stdout.split()
    assert survivors == [], "background processes outlived the call that started them"


async def test_a_fork_bomb_is_contained(setup):
    workspace, sandbox, _ = setup
    require(sandbox.cgroup_parent is not None, "a writable pids cgroup")
    began = time.monotonic()
    out = await python(workspace, sandbox, """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
""", timeout=5)
    assert time.monotonic() - began < 20
    assert "timed out after 5 s" in out
    # The worker is unharmed: it can still start processes and threads.
    assert subprocess.run([sys.executable, "-c", "import threading; t = threading.Thread(target=print); t.start(); t.join()"]).returncode == 0
    assert list(sandbox.cgroup_parent.glob("call-*")) == []


def test_an_interpreter_under_tmp_stays_visible(tmp_path, monkeypatch):
    """CI clones the repo (and its venv) under /tmp, which the sandbox replaces
    with a private tmpfs: the interpreter's directories are bound back."""
    import activities.tools.sandbox as sandbox_module

    sandbox = ToolSandbox(bwrap="/usr/bin/bwrap", workspace_root=tmp_path / "root")
    fake_venv = tmp_path / "venv"
    monkeypatch.setattr(sandbox_module.sys, "prefix", str(fake_venv))
    argv = sandbox.command(["python"], run_dir=tmp_path / "root" / "run", cwd=tmp_path / "root" / "run")
    tmpfs = argv.index("/tmp")
    bound = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind" and i > tmpfs]
    assert str(fake_venv.resolve()) in bound
