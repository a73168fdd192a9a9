"""Start-up says what happened: the embedded Temporal server is reported
started only once it answers, and a server that cannot start, a program that
is not Temporal on its address, a missing `temporal` CLI or a config that
cannot run the command's worker are one line naming the cause, exit 2.

The subprocess tests run the starter in a network namespace of its own
(testkit/private_network.py), so they neither see nor touch this machine's
127.0.0.1:7233 and :8233."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from runtime.connection import connect_failure
from runtime.server_start import start_failure
from testkit.private_network import private_network_available, run_in_private_network

needs_private_network = pytest.mark.skipif(
    not private_network_available(), reason="needs `unshare -n` (root or user namespaces) and `ip`"
)


def starter_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The default address (no TEMPORAL_ADDRESS, no profile), data and config under tmp_path."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True, exist_ok=True)
    config = tmp_path / "empty.toml"
    config.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_", "DURABLE_MANUS_"))}
    env.update(
        HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), DURABLE_MANUS_DATA_DIR=str(tmp_path / "data"),
        DURABLE_MANUS_CONFIG=str(config), WORKSPACE_ROOT=str(tmp_path / "ws"), OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1", TEMPORAL_UI_URL="http://127.0.0.1:1",
    )
    env.update(extra)
    return env


def starter(*args: str) -> list[str]:
    return [sys.executable, "starter.py", *args]


def one_line(proc, expected: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0], lines[0]
    for raw in ("tonic", "TimeoutExpired", "Traceback", "transport::Error"):
        assert raw not in proc.stderr
    return lines[0]


# ---- the causes, from what the server and the client said ------------------------------------


def test_a_taken_web_ui_port_in_the_log_names_the_port_and_the_setting():
    log = "Error: can't use default UI port 8233 (7233 + 1000): listen tcp 127.0.0.1:8233: bind: address already in use\n"
    assert start_failure(log, 1, "/d/temporal.log") == (
        "port 8233 (the embedded Temporal server's Web UI) is in use by another program; "
        "set DURABLE_MANUS_UI_PORT to a free port, or stop that program"
    )
    assert start_failure("Error: can't set UI port 8233: something\n", 1, "/d/temporal.log").startswith("port 8233 ")


def test_a_taken_frontend_port_in_the_log_says_how_to_use_another_server():
    log = "Error: listen tcp 127.0.0.1:7233: bind: address already in use\n"
    assert "TEMPORAL_ADDRESS" in start_failure(log, 1, "/d/temporal.log")


def test_another_start_failure_quotes_the_server_s_last_error_line_and_the_log():
    log = "time=1 level=WARN msg=starting\nError: unable to open database file\nsome usage text\n"
    assert start_failure(log, 1, "/d/temporal.log") == (
        "the embedded Temporal server exited at start (exit code 1): Error: unable to open database file "
        "(its log: /d/temporal.log)"
    )
    assert "(nothing in its log)" in start_failure("", 3, "/d/temporal.log")


@pytest.mark.parametrize(
    "core, words",
    [
        ("Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError("
         "\"tcp connect error\", Os { code: 111, kind: ConnectionRefused, message: \"Connection refused\" }))",
         "connection refused (nothing listens there)"),
        ("Failed client connect: `get_system_info` call error after connection: Status { code: Cancelled, message: "
         "\"Timeout expired\", source: Some(tonic::transport::Error(Transport, TimeoutExpired(()))) }",
         "does not reply as a Temporal server"),
        ("Failed client connect: `get_system_info` call error after connection: Status { code: Unknown, message: "
         "\"transport error\", source: Some(tonic::transport::Error(Transport, hyper::Error(Io, BrokenPipe))) }",
         "something listens there but does not answer as a Temporal server"),
    ],
    ids=["refused", "silent listener", "not grpc"],
)
def test_a_failed_connect_is_said_in_words_not_the_core_s_error(core, words):
    said = connect_failure(core)
    assert words in said and "tonic" not in said and "TimeoutExpired" not in said


# ---- the starter, in a network of its own --------------------------------------------------------


@pytest.mark.e2e
@needs_private_network
def test_a_taken_web_ui_port_is_one_line_and_no_started_claim(tmp_path):
    proc = run_in_private_network(starter("run", "hello"), starter_env(tmp_path), hold=[8233])
    one_line(proc, "port 8233 (the embedded Temporal server's Web UI) is in use by another program; set "
                   "DURABLE_MANUS_UI_PORT")
    assert "Started the embedded" not in proc.stdout
    assert proc.stdout.startswith("starting the embedded Temporal server"), proc.stdout  # said at once


@pytest.mark.e2e
@needs_private_network
def test_the_web_ui_port_setting_moves_the_server_off_a_taken_port(tmp_path):
    env = starter_env(tmp_path, DURABLE_MANUS_UI_PORT="18233")
    proc = run_in_private_network(starter("server"), env, hold=[8233])
    assert proc.returncode == 0, proc.stderr
    assert "Started the embedded Temporal server in " in proc.stdout and "http://127.0.0.1:18233" in proc.stdout


@pytest.mark.e2e
@needs_private_network
def test_a_program_on_the_frontend_port_that_is_not_temporal_is_one_line_with_true_seconds(tmp_path):
    proc = run_in_private_network(starter("run", "hello"), starter_env(tmp_path), hold=[7233])
    line = one_line(proc, "cannot reach Temporal at 127.0.0.1:7233")
    assert "does not reply as a Temporal server" in line and "TEMPORAL_ADDRESS" in line, line
    assert " after 5 s" in line, line  # the wait for a server that should be up, told as it was
    assert not (tmp_path / "data").exists()  # nothing was started


@pytest.mark.e2e
@needs_private_network
def test_a_missing_temporal_cli_is_one_line_and_creates_nothing(tmp_path):
    env = starter_env(tmp_path, DURABLE_MANUS_TEMPORAL_CLI=str(tmp_path / "no" / "temporal"))
    proc = run_in_private_network(starter("run", "hello"), env)
    one_line(proc, f"the temporal CLI {tmp_path / 'no' / 'temporal'} (DURABLE_MANUS_TEMPORAL_CLI) is missing")
    assert not (tmp_path / "data").exists()


@pytest.mark.e2e
@needs_private_network
def test_a_server_that_dies_at_start_is_one_line_quoting_its_log(tmp_path):
    fake = tmp_path / "temporal"
    fake.write_text("#!/bin/sh\necho 'Error: unable to open database file: out of memory (14)' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    proc = run_in_private_network(starter("run", "hello"), starter_env(tmp_path, DURABLE_MANUS_TEMPORAL_CLI=str(fake)))
    line = one_line(proc, "the embedded Temporal server exited at start (exit code 1): Error: unable to open database")
    assert str(tmp_path / "data" / "temporal.log") in line
    assert "Started the embedded" not in proc.stdout


@pytest.mark.e2e
@needs_private_network
def test_a_config_that_cannot_run_the_worker_is_refused_before_any_server_starts(tmp_path):
    proc = run_in_private_network(starter("run", "hello"), starter_env(tmp_path, OPENAI_API_KEY=""))
    one_line(proc, "[llm] api_key is missing")
    assert proc.stdout == ""
    assert not (tmp_path / "data").exists(), "the embedded server was started for a run that could not go"


@pytest.mark.e2e
@needs_private_network
def test_a_started_server_is_reported_once_it_answers(tmp_path):
    proc = run_in_private_network(starter("server"), starter_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    first, second, *_ = proc.stdout.splitlines()
    assert first == f"starting the embedded Temporal server (data in {tmp_path / 'data'})..."
    assert second.startswith("Started the embedded Temporal server in "), second


# ---- no silent wait: what a command waits for is said at once ----------------------------------


def test_mcp_server_on_stdio_in_a_terminal_says_on_stderr_that_it_waits_for_a_client(tmp_path):
    import pty
    import select
    import subprocess
    import time

    primary, terminal = pty.openpty()
    env = starter_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:9")
    process = subprocess.Popen(
        starter("mcp-server"), stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )
    os.close(terminal)
    said = b""
    try:
        deadline = time.monotonic() + 60  # a bound on a hang, not a speed check
        while b"\n" not in said and time.monotonic() < deadline and process.poll() is None:
            ready, _, _ = select.select([process.stderr], [], [], 0.5)
            if ready:
                said += os.read(process.stderr.fileno(), 4096)
    finally:
        process.kill()
        process.wait()
        os.close(primary)
    line = said.decode().splitlines()[0] if said else ""
    assert line.startswith("mcp-server: serving MCP on stdio, waiting for an MCP client"), said
    assert process.stdout.read() == b""  # stdout is MCP's alone


async def test_a_run_that_starts_its_own_worker_says_so_before_the_worker_s_start(cli, dev_env, fake_llm, tmp_path):
    from testkit.e2e import child_env, server_address, unique_queue
    from testkit.fake_openai import terminate

    fake_llm.turns = [terminate("done")]
    queue = unique_queue("says-worker")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    proc = await cli.in_thread("--worker", "always", "say done", env_extra=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"starting a worker in this process (task queue {queue})...", proc.stdout
    assert lines[1].startswith("run "), proc.stdout
