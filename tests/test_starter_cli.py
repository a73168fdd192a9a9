"""Bad input to the CLI: one clear line on stderr, exit code 2, no traceback.

The commands run in this process (testkit/cli.py); tests/test_cli_smoke.py
runs the scripts themselves."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shlex
import signal
import socket
import time
import uuid
from pathlib import Path

import pytest

from config.settings import ConfigError
from runtime import command_line, run_control
from runtime.user_errors import UsageError
from agent_model.flow import DEFAULT_FLOW_TIMEOUT_SECONDS
from runtime.connection import DEFAULT_ADDRESS
from runtime.task_queue import live_workers
from runtime.worker_factory import build_worker
from testkit.cli import Outcome
from testkit.e2e import child_env, server_address, start_starter, unique_queue, wait_until
from testkit.fake_openai import Reply, call, terminate
from testkit.settings import make_settings

REPO = Path(__file__).resolve().parent.parent


def assert_one_line_error(proc: Outcome, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("task", ["", "   "])
def test_empty_task_is_refused(cli, task):
    assert_one_line_error(cli(task), "the task is empty")


def test_no_task_at_all_is_refused(cli):
    assert_one_line_error(cli(), "the task is empty")


def test_unknown_agent_is_refused(cli):
    assert_one_line_error(cli("--agent", "wizard", "do it"), "unknown agent 'wizard'")


def test_bad_config_file_names_file_and_field(cli, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[llm]\nmax_tokens = 'lots'\n")
    assert_one_line_error(cli("--config", str(config), "do it"), f"{config}: [llm] max_tokens")


def test_missing_config_file_is_an_error(cli, tmp_path):
    assert_one_line_error(cli("--config", str(tmp_path / "nope.toml"), "do it"), "config file not found")


def test_unreachable_temporal_address(cli):
    assert_one_line_error(cli("do it"), "cannot reach Temporal at 127.0.0.1:9")


def test_worker_missing_api_key(cli, tmp_path):
    proc = cli(script="worker.py", env_extra={"OPENAI_API_KEY": None, "DURABLE_MANUS_CONFIG": str(tmp_path / "none.toml")})
    assert_one_line_error(proc, "config file not found")
    config = tmp_path / "c.toml"
    config.write_text('[llm]\nmodel = "gpt-4o"\n')
    proc = cli(script="worker.py", env_extra={"OPENAI_API_KEY": None, "DURABLE_MANUS_CONFIG": str(config)})
    assert_one_line_error(proc, "[llm] api_key is missing")


def test_flow_with_an_unknown_executor_is_refused(cli):
    assert_one_line_error(cli("--flow", "planning", "--agents", "manus,wizard", "do it"), "unknown agent 'wizard'")


def test_flow_timeout_must_leave_room_for_the_summary(cli):
    assert_one_line_error(cli("--flow", "planning", "--timeout", "30", "do it"), "--timeout must be more than 60 s")


def test_flow_parallel_steps_are_bounded(cli):
    assert_one_line_error(cli("--flow", "planning", "--parallel", "0", "do it"), "--parallel must be from 1 to 10")


def test_a_flow_carries_its_parallel_steps_in_its_input():
    from runtime.run_start import planning_flow_input

    assert planning_flow_input("t", agents=("manus",), timeout=600).parallel_steps == 3
    assert planning_flow_input("t", agents=("manus",), timeout=600, parallel=1).parallel_steps == 1


def test_task_over_the_input_limit_is_refused(cli, tmp_path):
    config = tmp_path / "small.toml"
    config.write_text('[llm]\nmodel = "gpt-4o"\napi_key = "sk-x"\nmax_input_tokens = 800\n')
    proc = cli("--config", str(config), "word " * 2000)
    assert_one_line_error(proc, "over max_input_tokens 800 of gpt-4o")


@pytest.mark.parametrize(
    "args, named",
    [
        ([b"\xff\xfe"], "the task"),
        (["--agent", b"man\xffus", "do it"], "--agent"),
        (["answer", "some-run", b"\xfe yes"], "the answer"),
        (["run", "--id", b"r\xff1", "do it"], "--id"),
    ],
)
def test_arguments_that_are_not_utf8_are_refused(cli, args, named):
    assert_one_line_error(cli(*args), f"{named} is not valid UTF-8 text")


def test_worker_refuses_a_workspace_root_that_is_a_file(cli, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for root, problem in ((a_file, "is not a directory"), (a_file / "below", "cannot be created")):
        proc = cli(script="worker.py", env_extra={"WORKSPACE_ROOT": str(root)})
        assert_one_line_error(proc, f"workspace root {root} (WORKSPACE_ROOT or [workspace] root) {problem}")


def dev_address(dev_env) -> str:
    return dev_env.client.service_client.config.target_host


async def test_starter_refuses_a_workspace_root_that_is_a_file(cli, dev_env, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    env = {"TEMPORAL_ADDRESS": dev_address(dev_env), "WORKSPACE_ROOT": str(a_file / "below")}
    proc = await cli.in_thread("--worker", "always", "do it", env_extra=env)
    assert_one_line_error(proc, "(WORKSPACE_ROOT or [workspace] root) cannot be created")


async def test_answer_with_no_worker_running_is_one_line(cli, dev_env, tmp_path):
    # No worker answers the queries: each waits out DURABLE_MANUS_QUERY_WAIT (10 s by default).
    env = {"TEMPORAL_ADDRESS": dev_address(dev_env), "WORKSPACE_ROOT": str(tmp_path / "ws"), "DURABLE_MANUS_QUERY_WAIT": "1"}
    run_id = f"no-worker-{uuid.uuid4().hex[:8]}"
    started = await cli.in_thread("--detach", "--worker", "never", "--id", run_id, "wait for me", env_extra=env
    )
    assert started.returncode == 0, started.stderr
    try:
        proc = await cli.in_thread("answer", run_id, "yes", "--worker", "never", env_extra=env)
        assert_one_line_error(proc, f"run {run_id} did not answer")
        proc = await cli.in_thread("show", run_id, "--worker", "never", env_extra=env)
        assert_one_line_error(proc, "is a worker running?")
    finally:
        await dev_env.client.get_workflow_handle(run_id).terminate("test over")



# ---- subcommands: what each command line means (no server) ---------------------------
# Commands are named by class and built at test time, so that each test here
# fails on its own (not at collection) where the starter lacks them.


def command(name: str, **fields):
    return getattr(command_line, name)(**fields)


SUBCOMMAND_LINES = [
    (["run", "do it"], "Run", dict(task="do it")),
    (["do it"], "Run", dict(task="do it")),
    (["run", "list"], "Run", dict(task="list")),
    (["--agent", "swe", "--max-steps", "5", "fix it"], "Run", dict(task="fix it", agent="swe", agents=("swe",), max_steps=5)),
    (["run", "--agent", "swe", "fix it", "--max-steps", "5"], "Run", dict(task="fix it", agent="swe", agents=("swe",), max_steps=5)),
    (
        ["--flow", "planning", "--agents", "manus, data_analysis", "--timeout", "600", "chart it"],
        "Run",
        dict(task="chart it", flow="planning", agents=("manus", "data_analysis"), timeout=600.0),
    ),
    (["--flow", "planning", "--parallel", "1", "in order"], "Run", dict(task="in order", flow="planning", parallel=1)),
    (
        ["do it", "--detach", "--id", "mine", "--worker", "never", "--steps-per-run", "3", "--config", "c.toml"],
        "Run",
        dict(task="do it", detach=True, run_id="mine", worker="never", steps_per_run=3, config="c.toml"),
    ),
    (["attach", "r1"], "Attach", dict(run_id="r1")),
    (["list"], "ListRuns", dict()),
    (["list", "--config", "c.toml"], "ListRuns", dict(config="c.toml")),
    (["show", "r1", "--worker", "never"], "Show", dict(run_id="r1", worker="never")),
    (["result", "r1"], "Result", dict(run_id="r1")),
    (["answer", "r1", "yes, go ahead"], "Answer", dict(run_id="r1", text="yes, go ahead")),
    (["cancel", "r1"], "Cancel", dict(run_id="r1")),
    (["rewind", "r1", "--to-step", "2"], "Rewind", dict(run_id="r1", to_step=2)),
    (["rewind", "r1", "--to-step", "0", "--detach"], "Rewind", dict(run_id="r1", to_step=0, detach=True)),
    (["worker"], "ServeWorker", dict()),
    (["worker", "--connect-timeout", "5", "--config", "c.toml"], "ServeWorker", dict(argv=("--connect-timeout", "5", "--config", "c.toml"))),
    (["server"], "StartServer", dict()),
]


@pytest.mark.parametrize("argv, name, fields", SUBCOMMAND_LINES, ids=[shlex.join(a) for a, _, _ in SUBCOMMAND_LINES])
def test_each_command_line_parses_to_its_command(argv, name, fields):
    parsed = command_line.parse_command(argv)
    assert parsed == command(name, **fields)
    for field in dataclasses.fields(parsed):  # a description, not a namespace to fill in later
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(parsed, field.name, None)


def test_a_run_keeps_its_defaults():
    run = command_line.parse_command(["do it"])
    assert (run.agent, run.agents, run.flow, run.worker, run.detach) == ("manus", ("manus",), None, "auto", False)
    assert (run.timeout, run.run_id, run.config, run.max_steps, run.steps_per_run) == (
        DEFAULT_FLOW_TIMEOUT_SECONDS, None, None, None, None
    )


OLD_FLAG_FORMS = [["--attach", "r1"], ["--list"], ["--show", "r1"], ["--result", "r1"], ["--answer", "r1", "blue"],
                  ["--cancel", "r1"], ["--rewind", "r1", "--to-step", "1"], ["mcp-server", "--worker"],
                  ["mcp", "t", "--server", "docs"]]


def test_the_mcp_agent_names_its_servers_with_mcp_server():
    command = command_line.parse_command(["mcp", "t", "--mcp-server", "docs", "--mcp-server", "git"])
    assert command.mcp_servers == ("docs", "git")


@pytest.mark.parametrize("argv", OLD_FLAG_FORMS, ids=shlex.join)
def test_the_old_flag_forms_are_gone(argv):
    """The flags that were commands before the subcommands, mcp-server's
    --worker (now --with-worker: --worker names the in-process worker mode) and
    mcp's --server (now --mcp-server: `server` names the Temporal server)."""
    with pytest.raises(UsageError, match="unrecognized arguments"):
        command_line.parse_command(argv)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--agent", "swe", "list"], "python starter.py run"),  # a task named like a command, after options
        # A misspelt command would be a one-word task: a run, and the embedded server with it.
        (["lsit"], "'lsit' is not a command; did you mean list? (a one-word task goes after run: python starter.py run lsit)"),
        (["shwo", "r1"], "did you mean show?"),
        (["--agent", "swe", "anwser"], "did you mean answer?"),
        (["list", "--agent", "swe"], "unrecognized arguments: --agent swe (see: python starter.py list --help)"),
        (["show"], "the following arguments are required: ID"),
        (["show", ""], "the run id is empty"),
        (["answer", "r1"], "the following arguments are required: TEXT"),
        (["rewind", "r1"], "--to-step"),
        (["worker", "--connect-timeout", "soon"], "invalid float value: 'soon'"),
    ],
)
def test_bad_command_lines_are_usage_errors(argv, expected):
    with pytest.raises(UsageError) as caught:
        command_line.parse_command(argv)
    message = str(caught.value)
    assert expected in message and "\n" not in message


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["list", "extra"], "unrecognized arguments: extra"),
        (["show"], "required: ID"),
        (["rewind", "r1"], "--to-step"),
        (["--agent", "swe", "cancel"], "python starter.py run"),
        (["answer", "r1", b"\xfe yes"], "the answer is not valid UTF-8 text"),
        (["lsit"], "did you mean list?"),
    ],
    ids=["list extra", "show", "rewind no step", "option then command", "answer not utf8", "misspelt command"],
)
def test_bad_command_lines_are_one_line_from_main(cli, argv, expected):
    assert_one_line_error(cli(*argv), expected)


@pytest.mark.parametrize("argv", [["hello"], ["fix the failing test"], ["run", "lsit"], ["run", "--agent", "swe", "lsit"], ["--agent", "swe", "hello"]])
def test_a_one_word_task_that_misspells_no_command_is_a_run(argv):
    command = command_line.parse_command(argv)
    assert isinstance(command, command_line.Run) and command.task == argv[-1]


def test_help_explains_how_a_task_is_told_from_a_command(cli):
    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for name in ("run", "attach", "list", "show", "result", "answer", "cancel", "rewind", "worker", "server"):
        assert re.search(rf"^\s+{name}\s", proc.stdout, re.M), f"{name} is missing from --help:\n{proc.stdout}"
    assert "python starter.py run list" in text, proc.stdout
    assert "--attach ID" not in text and "old flag" not in text, proc.stdout  # the old forms are gone
    assert "never start" in text, proc.stdout


MANUAL = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def manual_starter_lines() -> list[list[str]]:
    """The arguments of every `python starter.py ...` in README.md and docs/*.md:
    an inline span's up to its closing backtick (it may wrap a line), a code
    line's up to a comment. HTML comments (placeholders) are not the manual; in
    a synopsis (`approve ID [CALL] [--edit JSON]`) the optional parts are left out."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in MANUAL)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    found = []
    for match in re.finditer(r"`python starter\.py([^`]*)`|python starter\.py([^`\n#]*)", text):
        line = match.group(1) if match.group(1) is not None else match.group(2)
        words = shlex.split(re.sub(r"\[[A-Z-][^\]]*\]", "", line))
        words = ["3" if word == "N" else word for word in words]  # a placeholder for a number
        if words and words not in found:  # a bare `python starter.py` names the program
            found.append(words)
    return found


def test_every_starter_command_in_the_manual_parses():
    lines = manual_starter_lines()
    for words in lines:
        if "--help" in words:
            with pytest.raises(SystemExit) as printed:
                command_line.parse_command(words)
            assert printed.value.code == 0
            continue
        try:
            command_line.parse_command(words)
        except UsageError as e:
            pytest.fail(f"The manual's `python starter.py {shlex.join(words)}` is refused: {e}")


def test_the_readmes_command_list_shows_every_command():
    text = re.sub(r"<!--.*?-->", "", (REPO / "README.md").read_text(encoding="utf-8"), flags=re.S)
    text = text.split("\n## Everyday commands\n", 1)[1].split("\n## ", 1)[0]
    named = {match.group(1) for match in re.finditer(r"python starter\.py ([a-z][a-z-]*)", text)}
    assert set(command_line.COMMANDS) <= named, sorted(set(command_line.COMMANDS) - named)


# ---- commands on existing runs never start a server -------------------------------------


def port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def stop_started_server(data: Path) -> None:
    """Kill an embedded server that a command started (under the test's data dir)."""
    pid_file = data / "temporal.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while port_open(DEFAULT_ADDRESS) and time.monotonic() < deadline:
            time.sleep(0.1)


def default_address_env(tmp_path: Path) -> dict:
    """No TEMPORAL_ADDRESS and no Temporal profile, so the default address, where
    the embedded server runs; its data directory under tmp_path."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    return {
        "TEMPORAL_ADDRESS": None,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "DURABLE_MANUS_DATA_DIR": str(tmp_path / "data"),
        "WORKSPACE_ROOT": str(tmp_path / "ws"),
    }


DEFAULT_ADDRESS_GROUP = pytest.mark.xdist_group("default-address")
"""Tests that need 127.0.0.1:7233 free, or start the embedded server there, take
turns: one xdist worker runs them all."""


@DEFAULT_ADDRESS_GROUP
@pytest.mark.parametrize(
    "argv",
    [["list"], ["result", "r1"], ["show", "r1"], ["answer", "r1", "yes"], ["cancel", "r1"]],
    ids=shlex.join,
)
def test_commands_on_existing_runs_start_no_server(cli, argv, tmp_path):
    if port_open(DEFAULT_ADDRESS):
        pytest.skip(f"something listens on {DEFAULT_ADDRESS}")
    data = tmp_path / "data"
    try:
        proc = cli(*argv, env_extra=default_address_env(tmp_path))
    finally:
        stop_started_server(data)
    assert not data.exists(), f"{argv} started the embedded server"
    assert not port_open(DEFAULT_ADDRESS)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("starter: ") and DEFAULT_ADDRESS in line and "python starter.py server" in line, line
    assert proc.stdout == ""


def test_a_configured_server_that_does_not_answer_is_one_line_for_list(cli):
    proc = cli("list")  # TEMPORAL_ADDRESS=127.0.0.1:9
    assert_one_line_error(proc, "cannot reach Temporal at 127.0.0.1:9")
    assert "`list` never starts a server" in proc.stderr


def test_worker_command_is_worker_py(cli, tmp_path):
    env = {"OPENAI_API_KEY": None, "DURABLE_MANUS_CONFIG": str(tmp_path / "none.toml")}
    proc = cli("worker", env_extra=env)
    assert_one_line_error(proc, "worker: ")
    assert proc.stderr == cli(script="worker.py", env_extra=env).stderr


# ---- the subcommands against the dev server ----------------------------------------------


async def test_list_command_against_the_dev_server(cli, dev_env, tmp_path):
    proc = await cli.in_thread("list", env_extra={"TEMPORAL_ADDRESS": dev_address(dev_env)})
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0].split()
    assert header == ["RUN", "ID", "AGENT/FLOW", "STATE", "STEP", "AGE", "TASK"] or proc.stdout.strip() == "no runs yet", proc.stdout


async def test_a_task_named_list_after_run_is_a_run(cli, dev_env, tmp_path):
    run_id = f"named-list-{uuid.uuid4().hex[:8]}"
    env = {"TEMPORAL_ADDRESS": dev_address(dev_env), "WORKSPACE_ROOT": str(tmp_path / "ws")}
    try:
        proc = await cli.in_thread("run", "--detach", "--worker", "never", "--id", run_id, "list", env_extra=env
        )
        assert proc.returncode == 0, proc.stderr
        assert f"run {run_id}" in proc.stdout.splitlines(), proc.stdout
        description = await dev_env.client.get_workflow_handle(run_id).describe()
        assert await description.static_summary() == "list"
    finally:
        with contextlib.suppress(Exception):
            await dev_env.client.get_workflow_handle(run_id).terminate("test over")


async def test_the_subcommands_control_a_run(cli, dev_env, fake_llm, tmp_path):
    """run, answer, attach, result, show, list, rewind and cancel in their
    subcommand forms, on a worker of the test's own (--worker never where a command has it)."""
    fake_llm.turns = [Reply(content="I need to ask.", tool_calls=[call("ask_human", {"inquire": "Which colour?"})]),
                      terminate("blue it is")]
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=settings.task_queue, base_url=fake_llm.base_url)

    async def command(*args: str, expect: int = 0) -> str:
        never = ["--worker", "never"] if args[0] not in ("result", "list") else []
        done = await cli.in_thread(*args, *never, env_extra=env)
        assert done.returncode == expect, done
        return done.stdout if expect == 0 else done.stderr

    run_id = f"sub-{uuid.uuid4().hex[:8]}"
    async with build_worker(dev_env.client, settings):
        assert f"run {run_id}" in await command("run", "--detach", "--id", run_id, "Pick a colour")
        handle = dev_env.client.get_workflow_handle(run_id)
        await wait_until(lambda: handle.query("pending_question"), 30, "the question", 0.1)
        assert f"answered question 1.1 of {run_id}: Which colour?" in await command("answer", run_id, "blue")
        assert (await command("attach", run_id)).rstrip().endswith("blue it is")
        assert (await command("result", run_id)).rstrip().endswith("blue it is")
        shown = await command("show", run_id)
        assert "── step 1 ──" in shown and "← The user answered: blue" in shown
        assert any(line.startswith(run_id) for line in (await command("list")).splitlines())
        rewound = await command("rewind", run_id, "--to-step", "1")
        assert f"rewound {run_id} to the end of step 1" in rewound and rewound.rstrip().endswith("blue it is")
        assert "has already ended" in await command("cancel", run_id, expect=2)


@pytest.mark.e2e
async def test_worker_command_polls_the_task_queue(dev_env, fake_llm, tmp_path):
    queue = unique_queue("sub-worker")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    worker = start_starter(["worker", "--connect-timeout", "20"], env, tmp_path / "logs", name="worker")
    try:
        await wait_until(lambda: f"worker polling task queue {queue}" in worker.stderr(), 30, "the worker's first poll")
        await wait_until(lambda: live_workers(dev_env.client, queue), 30, "the worker on the task queue", 0.2)
    finally:
        code = await worker.stop()
    assert code == 0, worker.describe()
    assert "run " not in worker.stdout(), worker.describe()  # no run was started


@pytest.mark.e2e
@DEFAULT_ADDRESS_GROUP
def test_server_command_starts_the_embedded_server_detached(cli, tmp_path):
    if port_open(DEFAULT_ADDRESS):
        pytest.skip(f"something listens on {DEFAULT_ADDRESS}")
    env = default_address_env(tmp_path)
    data = tmp_path / "data"
    try:
        proc = cli("server", env_extra=env)
        assert proc.returncode == 0, proc.stderr
        assert "Started the embedded Temporal server" in proc.stdout and str(data) in proc.stdout, proc.stdout
        assert (data / "temporal.pid").exists() and port_open(DEFAULT_ADDRESS)

        listed = cli("list", env_extra=env)  # the server outlived the command that started it
        assert listed.returncode == 0 and listed.stdout.strip() == "no runs yet", listed.stderr

        again = cli("server", env_extra=env)
        assert again.returncode == 0 and f"already answers at {DEFAULT_ADDRESS}" in again.stdout, again.stderr
    finally:
        stop_started_server(data)


def test_server_command_refuses_a_configured_server(cli):
    assert_one_line_error(cli("server"), "TEMPORAL_ADDRESS")  # it names 127.0.0.1:9, not the embedded server



@pytest.mark.parametrize("value", ["soon", "0", "601"])
def test_a_bad_query_wait_is_one_line(monkeypatch, value):
    monkeypatch.setenv("DURABLE_MANUS_QUERY_WAIT", value)
    with pytest.raises(ConfigError) as caught:
        run_control.query_timeout()
    assert str(caught.value) == f"DURABLE_MANUS_QUERY_WAIT must be a number of seconds from 0.5 to 600, not {value!r}"


def test_the_query_wait_is_a_setting(monkeypatch):
    monkeypatch.delenv("DURABLE_MANUS_QUERY_WAIT", raising=False)
    assert run_control.query_timeout() == run_control.QUERY_TIMEOUT
    monkeypatch.setenv("DURABLE_MANUS_QUERY_WAIT", "1.5")
    assert run_control.query_timeout().total_seconds() == 1.5
