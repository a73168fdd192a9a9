"""`starter.py mcp-server` driven by the MCP client SDK, on the dev server with
the fake model: tools listed, runs started, followed, answered, cancelled and
listed over stdio, and a smoke test of streamable HTTP, which requires the
server's bearer token."""

from __future__ import annotations

import contextlib
import json
import os
import time
import re
import socket
import stat
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -r requirements.txt)")
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from runtime.mcp_http_record import RECORD_DIR, recorded_addresses
from runtime.user_errors import UsageError
from runtime.command_line import McpServe, parse_command
from testkit.e2e import (
    REPO_DIR,
    STARTER_SCRIPT,
    child_env,
    free_port,
    server_address,
    start_starter,
    unique_queue,
    wait_until,
)
from testkit.fake_openai import Reply, call, python, terminate, turn_of
from tests.test_planning_flow import FlowScript, plan_reply

pytestmark = pytest.mark.e2e

TOOLS = {
    "start_run", "start_flow", "run_status", "run_steps", "answer_question", "decide_call", "cancel_run", "run_result",
    "list_runs", "send_message",
}


def scripted(body: dict, attempt: int) -> Reply:
    """The fake model: each run's replies, told apart by its task."""
    text = json.dumps(body.get("messages"))
    turn = turn_of(body)
    if "Pick a colour" in text:
        script = [python("print('warming up')"), Reply(tool_calls=[call("ask_human", {"inquire": "Which colour?"})])]
        return script[turn] if turn < len(script) else terminate("blue it is")
    if "Wait for me" in text:
        return Reply(tool_calls=[call("ask_human", {"inquire": "Shall I go on?"})])
    return terminate("nothing to do")


class Session:
    """One MCP client session; tool results as (is_error, structured or text)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, arguments)
        assert not result.is_error, result.content
        return result.structured_content

    async def error(self, name: str, **arguments: Any) -> str:
        result = await self.client.call_tool(name, arguments)
        assert result.is_error, result.structured_content
        (content,) = result.content
        assert "\n" not in content.text and "Traceback" not in content.text, content.text
        return content.text


@contextlib.asynccontextmanager
async def stdio_session(env: dict[str, str], log: Path, *args: str):
    params = StdioServerParameters(
        command=sys.executable, args=[str(STARTER_SCRIPT), "mcp-server", *args], env=env, cwd=str(REPO_DIR)
    )
    with open(log, "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
            yield Session(client)


async def pending_question(session: Session, run_id: str) -> dict:
    found: dict = {}

    async def asked() -> bool:
        found.update(await session.call("run_status", run_id=run_id))
        return found.get("pending_question") is not None

    await wait_until(asked, 30, f"a question from {run_id}", 0.2)
    return found["pending_question"]


async def test_runs_are_started_followed_answered_and_cancelled_over_stdio(dev_env, fake_llm, tmp_path):
    fake_llm.responder = scripted
    queue = unique_queue("mcp")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    log = tmp_path / "mcp-server.err"
    async with stdio_session(env, log, "--with-worker") as session:
        listed = await session.client.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        start_schema = next(t for t in listed.tools if t.name == "start_run").input_schema
        assert start_schema["properties"]["task"]["maxLength"] == 100_000 and start_schema["required"] == ["task"]

        started = await session.call("start_run", task="Pick a colour")
        colour = started["run_id"]
        assert started["worker_running"] is True, started  # the server's own worker (--with-worker)
        assert re.search(rf"/workflows/{colour}/[0-9a-f-]{{36}}/user-metadata$", started["web_ui"]), started  # its current state

        question = await pending_question(session, colour)
        assert question["text"] == "Which colour?" and question["run_id"] == colour
        status = await session.call("run_status", run_id=colour)
        assert status["state"] == "RUNNING" and status["step"] == 2 and status["max_steps"] == 20

        page = await session.call("run_steps", run_id=colour)  # running: the query's page
        assert [s["step"] for s in page["steps"]] == [1] and page["more"] is False and page["next_since"] == 1
        assert "warming up" in page["steps"][0]["tool_calls"][0]["observation"]
        assert (await session.call("run_result", run_id=colour))["finished"] is False

        answered = await session.call("answer_question", run_id=colour, text="blue")
        assert answered == {
            "accepted": True, "run_id": colour, "question_id": question["id"], "question": "Which colour?"
        }
        result = await session.call("run_result", run_id=colour, wait_seconds=30)
        assert result["finished"] is True and result["state"] == "FINISHED" and result["final_answer"] == "blue it is"
        assert result["steps_taken"] == 3 and result["succeeded"] is True

        page = await session.call("run_steps", run_id=colour, since=1)  # finished: from the result
        assert [s["step"] for s in page["steps"]] == [2, 3] and page["more"] is False
        assert (await session.call("run_steps", run_id=colour, since=3))["steps"] == []

        waiting = (await session.call("start_run", task="Wait for me", max_steps=5))["run_id"]
        await pending_question(session, waiting)
        cancelled = await session.call("cancel_run", run_id=waiting)
        assert cancelled["ended"] is True and f"run {waiting} ended: CANCELLED" in cancelled["report"]
        result = await session.call("run_result", run_id=waiting)
        assert result["finished"] is True and result["state"] == "CANCELLED", result
        assert "was cancelled" in result["note"]
        after = await session.call("run_steps", run_id=waiting)  # no result: the worker answers for the closed run
        (record,) = after["steps"]
        assert record["note"] == "the run was cancelled" and record["tool_calls"][0]["name"] == "ask_human"

        assert "no run with id 'no-such-run'" in await session.error("run_status", run_id="no-such-run")
        assert "no run with id 'no-such-run'" in await session.error("run_result", run_id="no-such-run")
        assert "has ended" in await session.error("answer_question", run_id=colour, text="red")
        assert "has already ended" in await session.error("cancel_run", run_id=waiting)
        assert "at most 200 characters" in await session.error("run_status", run_id="x" * 201)
        assert "agent" in await session.error("start_run", task="x", agent="wizard")
        assert "the task is empty" in await session.error("start_run", task="   ")

        async def both_listed() -> bool:
            runs = (await session.call("list_runs", limit=10))["runs"]
            states = {run["run_id"]: run["state"] for run in runs}
            return states.get(colour) == "FINISHED" and states.get(waiting) == "CANCELLED"

        await wait_until(both_listed, 60, "both runs in list_runs", 0.3)  # visibility is eventually consistent
    assert "Traceback" not in log.read_text()


async def test_a_flow_is_followed_and_its_step_answered_over_stdio(dev_env, fake_llm, tmp_path):
    asking = Reply(tool_calls=[call("ask_human", {"inquire": "Which region?"})])
    script = FlowScript(
        plan_reply("Ask the region", "Report it"), {1: [asking, terminate("north")], 2: [terminate("reported")]}
    )
    fake_llm.responder = script
    queue = unique_queue("mcp-flow")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    async with stdio_session(env, tmp_path / "mcp-server.err", "--with-worker") as session:
        flow = (await session.call("start_flow", task="Report on a region", agents=["manus"]))["run_id"]
        question = await pending_question(session, flow)
        assert question["text"] == "Which region?" and question["run_id"] == f"{flow}/step-1"
        status = await session.call("run_status", run_id=flow)
        assert status["kind"] == "flow" and "Ask the region" in status["plan"]
        assert status["step_runs"][0]["run_id"] == f"{flow}/step-1"
        assert "planning flow" in await session.error("run_steps", run_id=flow)

        answered = await session.call("answer_question", run_id=flow, text="north")
        assert answered["run_id"] == f"{flow}/step-1"
        result = await session.call("run_result", run_id=flow, wait_seconds=30)
        assert result["finished"] is True and result["state"] == "completed" and result["succeeded"] is True
        assert result["summary"] == "Summary: all went well." and len(result["step_runs"]) == 2
        steps = await session.call("run_steps", run_id=f"{flow}/step-1")
        assert [s["step"] for s in steps["steps"]] == [1, 2]


def http_env(tmp_path: Path, address: str, queue: str, base_url: str) -> dict[str, str]:
    """The server's environment, its data directory (and so its token) under tmp_path."""
    return child_env(
        tmp_path, address=address, task_queue=queue, base_url=base_url,
        extra={"DURABLE_MANUS_DATA_DIR": str(tmp_path / "data")},
    )


async def http_server(env: dict[str, str], log_dir: Path, *args: str):
    """`mcp-server --http` on a free port, once it listens: (the child, the port)."""
    port = free_port()
    server = start_starter(["mcp-server", "--http", f"127.0.0.1:{port}", *args], env, log_dir, name="mcp-http")
    await wait_until(lambda: f"127.0.0.1:{port}/mcp" in server.stderr(), 20, "the HTTP server", 0.1)

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    await wait_until(listening, 20, "the port", 0.1)
    return server, port


def http_client(port: int, token: str) -> Client:
    """An MCP client that sends the token as every request's bearer token."""
    headers = {"Authorization": f"Bearer {token}"}
    transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=create_mcp_http_client(headers=headers))
    return Client(transport, read_timeout_seconds=60)


async def test_streamable_http_serves_the_same_tools(dev_env, fake_llm, tmp_path):
    queue = unique_queue("mcp-http")
    env = http_env(tmp_path, server_address(dev_env), queue, fake_llm.base_url)
    left: list[str] = []
    server, port = await http_server(env, tmp_path / "logs")
    try:
        token = (tmp_path / "data" / "mcp-token").read_text().strip()
        async with http_client(port, token) as client:
            session = Session(client)
            assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
            started = await session.call("start_run", task="Nobody works on this queue")
            assert started["worker_running"] is False
            assert f"no worker is running for task queue {queue}" in started["worker"]
            assert "python worker.py" in started["worker"]
            left.append(started["run_id"])
            assert (await session.call("run_result", run_id=started["run_id"]))["finished"] is False
            flow = await session.call("start_flow", task="Plan nothing", agents=["manus", "swe"])
            left.append(flow["run_id"])
            assert flow["kind"] == "flow" and flow["worker_running"] is False
            assert (await session.call("run_result", run_id=flow["run_id"]))["kind"] == "flow"
            assert "timeout_seconds" in await session.error("start_flow", task="x", timeout_seconds=10)
            assert "no run with id" in await session.error("run_steps", run_id="nope")
        assert server.stdout() == ""
    finally:
        await server.stop()
        for run_id in left:
            with contextlib.suppress(Exception):
                await dev_env.client.get_workflow_handle(run_id).terminate("test over")


def test_the_command_line_names_the_transport():
    assert parse_command(["mcp-server"]) == McpServe()
    command = parse_command(["mcp-server", "--http", "127.0.0.1:8000", "--with-worker", "--config", "c.toml"])
    assert command == McpServe(http=("127.0.0.1", 8000), worker=True, config="c.toml")
    assert parse_command(["mcp-server", "--http", "[::1]:9000"]).http == ("::1", 9000)
    assert parse_command(["mcp-server", "--http", "127.0.0.1:8000", "--show-token"]).show_token is True
    with pytest.raises(UsageError, match="--show-token goes with --http"):
        parse_command(["mcp-server", "--show-token"])
    for bad in ("8000", "host:", "host:99999", ":80"):
        with pytest.raises(UsageError, match="is not HOST:PORT"):
            parse_command(["mcp-server", "--http", bad])


INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}},
}


async def test_http_requires_the_bearer_token(tmp_path, monkeypatch):
    """Without the token or with a wrong one every request is refused (401);
    with it the MCP handshake works. The token file is the operator's alone."""
    env = http_env(tmp_path, "127.0.0.1:9", unique_queue("mcp-auth"), "http://127.0.0.1:9/v1")
    server, port = await http_server(env, tmp_path / "logs")
    url = f"http://127.0.0.1:{port}/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    try:
        async with httpx2.AsyncClient(timeout=20) as raw:
            answer = await raw.post(url, json=INITIALIZE, headers=accept)
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"].startswith("Bearer")
            token_file = tmp_path / "data" / "mcp-token"
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
            token = token_file.read_text().strip()
            assert f"Authorization: Bearer {token}" in server.stderr()  # new: shown once
            for refused in ({"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {token}"},
                            {"Authorization": f"Bearer {token[:-1]}"}, {"Authorization": f"Bearer {token}x"}):
                answer = await raw.post(url, json=INITIALIZE, headers={**accept, **refused})
                assert answer.status_code == 401, (refused, answer.text)
            assert (await raw.get(url, headers=accept)).status_code == 401
            for query in ("access_token", "token"):  # a token in the URL would end up in logs: not taken
                answer = await raw.post(f"{url}?{query}={token}", json=INITIALIZE, headers=accept)
                assert answer.status_code == 401, (query, answer.text)
        async with http_client(port, token) as client:
            assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        # Written down for the workers of this machine, whose web rules refuse it.
        records = list((tmp_path / "data" / RECORD_DIR).iterdir())
        assert [json.loads(r.read_text()) for r in records] == [{"host": "127.0.0.1", "port": port}]
    finally:
        await server.stop()
    monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(tmp_path / "data"))
    assert recorded_addresses() == []  # its server is gone


def test_the_token_is_made_once_reused_and_shown_only_when_new_or_asked(tmp_path):
    from runtime.mcp_server import token_line
    from runtime.mcp_token import TOKEN_FILENAME, load_or_create_token

    path = tmp_path / "data" / TOKEN_FILENAME
    token, created = load_or_create_token(path)
    assert created and re.fullmatch(r"[A-Za-z0-9_-]{43}", token)
    assert load_or_create_token(path) == (token, False)  # the next start
    assert [p.name for p in path.parent.iterdir()] == [TOKEN_FILENAME]  # no draft left behind
    assert token in token_line(path, token, show=True)
    hidden = token_line(path, token, show=False)
    assert token not in hidden and str(path) in hidden and "--show-token" in hidden


def test_a_token_file_others_can_read_is_refused(tmp_path):
    from runtime.mcp_token import TOKEN_FILENAME, load_or_create_token, read_token

    path = tmp_path / "data" / TOKEN_FILENAME
    load_or_create_token(path)
    os.chmod(path, 0o644)
    with pytest.raises(UsageError, match="readable by other accounts"):
        load_or_create_token(path)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="cannot read the MCP token file"):
        read_token(path)


def test_a_token_file_that_is_a_fifo_or_another_users_is_refused_at_once(tmp_path):
    """Planted by another account or a mistake: never read (nor waited on) as the token."""
    from runtime.mcp_token import TOKEN_FILENAME, load_or_create_token

    path = tmp_path / "data" / TOKEN_FILENAME
    path.parent.mkdir(mode=0o700)
    os.mkfifo(path, 0o600)
    with pytest.raises(UsageError, match="cannot read|not a regular file|regular"):
        load_or_create_token(path)  # O_NONBLOCK: no writer, no hang
    path.unlink()
    load_or_create_token(path)
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)
        with pytest.raises(UsageError, match="belongs to another user"):
            load_or_create_token(path)


def test_servers_starting_at_once_share_one_token(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from runtime.mcp_token import TOKEN_FILENAME, load_or_create_token

    path = tmp_path / "data" / TOKEN_FILENAME
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: load_or_create_token(path), range(8)))
    assert len({token for token, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert [p.name for p in path.parent.iterdir()] == [TOKEN_FILENAME]


async def test_the_servers_own_worker_says_when_its_config_file_changed(dev_env, fake_llm, tmp_path):
    # As worker.py does: the worker runs with the config it read at start, and says so once the file changes.
    config = tmp_path / "config.toml"
    config.write_text("")
    env = child_env(
        tmp_path, address=server_address(dev_env), task_queue=unique_queue("mcp-config"), base_url=fake_llm.base_url,
        extra={"DURABLE_MANUS_CONFIG": str(config)},
    )
    log = tmp_path / "mcp-server.err"
    async with stdio_session(env, log, "--with-worker") as session:
        assert {tool.name for tool in (await session.client.list_tools()).tools} == TOOLS
        config.write_text("# edited\n")
        os.utime(config, (time.time() + 5, time.time() + 5))  # a newer mtime whatever the clock's grain
        expected = f"config: {config} changed after this worker read it; restart the worker"
        await wait_until(lambda: expected in log.read_text(), 30, "the changed-config line", 0.2)
    assert log.read_text().count(expected) == 1
