"""Bad input to the CLI: one clear line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str | bytes, env_extra: dict | None = None, script: str = "starter.py") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_", "DURABLE_MANUS_"))}
    env.update({"TEMPORAL_ADDRESS": "127.0.0.1:9", "OPENAI_API_KEY": "sk-test"})
    env.update(env_extra or {})
    env = {k: v for k, v in env.items() if v is not None}
    return subprocess.run(
        [sys.executable, script, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("task", ["", "   "])
def test_empty_task_is_refused(task):
    assert_one_line_error(run_cli(task), "the task is empty")


def test_no_task_at_all_is_refused():
    assert_one_line_error(run_cli(), "the task is empty")


def test_unknown_agent_is_refused():
    assert_one_line_error(run_cli("--agent", "wizard", "do it"), "unknown agent 'wizard'")


def test_bad_config_file_names_file_and_field(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[llm]\nmax_tokens = 'lots'\n")
    assert_one_line_error(run_cli("--config", str(config), "do it"), f"{config}: [llm] max_tokens")


def test_missing_config_file_is_an_error(tmp_path):
    assert_one_line_error(run_cli("--config", str(tmp_path / "nope.toml"), "do it"), "config file not found")


def test_unreachable_temporal_address():
    assert_one_line_error(run_cli("do it"), "cannot reach Temporal at 127.0.0.1:9")


def test_worker_missing_api_key(tmp_path):
    proc = run_cli(script="worker.py", env_extra={"OPENAI_API_KEY": None, "DURABLE_MANUS_CONFIG": str(tmp_path / "none.toml")})
    assert_one_line_error(proc, "config file not found")
    config = tmp_path / "c.toml"
    config.write_text('[llm]\nmodel = "gpt-4o"\n')
    proc = run_cli(script="worker.py", env_extra={"OPENAI_API_KEY": None, "DURABLE_MANUS_CONFIG": str(config)})
    assert_one_line_error(proc, "[llm] api_key is missing")


def test_flow_with_an_unknown_executor_is_refused():
    assert_one_line_error(run_cli("--flow", "planning", "--agents", "manus,wizard", "do it"), "unknown agent 'wizard'")


def test_flow_timeout_must_leave_room_for_the_summary():
    assert_one_line_error(run_cli("--flow", "planning", "--timeout", "30", "do it"), "--timeout must be more than 60 s")


def test_task_over_the_input_limit_is_refused(tmp_path):
    config = tmp_path / "small.toml"
    config.write_text('[llm]\nmodel = "gpt-4o"\napi_key = "sk-x"\nmax_input_tokens = 800\n')
    proc = run_cli("--config", str(config), "word " * 2000)
    assert_one_line_error(proc, "over max_input_tokens 800 of gpt-4o")


@pytest.mark.parametrize(
    "args, named",
    [
        ([b"\xff\xfe"], "the task"),
        (["--agent", b"man\xffus", "do it"], "--agent"),
        (["--answer", "some-run", b"\xfe yes"], "--answer"),
    ],
)
def test_arguments_that_are_not_utf8_are_refused(args, named):
    assert_one_line_error(run_cli(*args), f"{named} is not valid UTF-8 text")


def test_worker_refuses_a_workspace_root_that_is_a_file(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for root, problem in ((a_file, "is not a directory"), (a_file / "below", "cannot be created")):
        proc = run_cli(script="worker.py", env_extra={"WORKSPACE_ROOT": str(root)})
        assert_one_line_error(proc, f"workspace root {root} (WORKSPACE_ROOT or [workspace] root) {problem}")


def dev_address(dev_env) -> str:
    return dev_env.client.service_client.config.target_host


async def test_starter_refuses_a_workspace_root_that_is_a_file(dev_env, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    env = {"TEMPORAL_ADDRESS": dev_address(dev_env), "WORKSPACE_ROOT": str(a_file / "below")}
    proc = await asyncio.to_thread(run_cli, "--worker", "always", "do it", env_extra=env)
    assert_one_line_error(proc, "(WORKSPACE_ROOT or [workspace] root) cannot be created")


async def test_answer_with_no_worker_running_is_one_line(dev_env, tmp_path):
    env = {"TEMPORAL_ADDRESS": dev_address(dev_env), "WORKSPACE_ROOT": str(tmp_path / "ws")}
    run_id = f"no-worker-{uuid.uuid4().hex[:8]}"
    started = await asyncio.to_thread(
        run_cli, "--detach", "--worker", "never", "--id", run_id, "wait for me", env_extra=env
    )
    assert started.returncode == 0, started.stderr
    try:
        proc = await asyncio.to_thread(run_cli, "--answer", run_id, "yes", "--worker", "never", env_extra=env)
        assert_one_line_error(proc, f"run {run_id} did not answer")
        proc = await asyncio.to_thread(run_cli, "--show", run_id, "--worker", "never", env_extra=env)
        assert_one_line_error(proc, "is a worker running?")
    finally:
        await dev_env.client.get_workflow_handle(run_id).terminate("test over")
