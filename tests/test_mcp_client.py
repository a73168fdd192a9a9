"""The MCP client on the worker against real MCP servers (testkit/mcp_servers.py)
over stdio, SSE and streamable HTTP: config, listing, calls, failures."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -r requirements.txt)")
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.mcp.activities import McpActivities
from activities.mcp.link import McpUnavailable
from activities.mcp.pool import McpPool
from agent_model.mcp import (
    MAX_FUNCTION_NAME,
    MAX_OUTPUT_CHARS,
    MAX_TOOLS_PER_SERVER,
    McpCallRequest,
    McpCallResult,
    McpListRequest,
    McpTool,
    McpToolList,
    function_name_for,
    schema_for,
)
from config.mcp_config import McpServerSettings, default_mcp_path, load_mcp_servers
from config.settings import ConfigError
from testkit.e2e import pid_alive
from testkit.mcp_servers import REPO_DIR, STDIO_ARGS, HttpMcpServer


def stdio(*options: str, **env: str) -> McpServerSettings:
    return McpServerSettings(kind="stdio", command=sys.executable, args=(*STDIO_ARGS, *options), env=env)


async def list_tools(pool: McpPool, *servers: str) -> McpToolList:
    return await ActivityEnvironment().run(McpActivities(pool).list_tools, McpListRequest(servers=list(servers)))


async def call(pool: McpPool, server: str, tool: str, **arguments) -> McpCallResult:
    request = McpCallRequest(server=server, tool=tool, arguments=arguments)
    return await ActivityEnvironment().run(McpActivities(pool).call_tool, request)


@pytest.fixture(scope="module")
async def pool():
    pool = McpPool({"local": stdio()})
    yield pool
    await pool.close_all()


# --- mcp.json -------------------------------------------------------------


def test_openmanus_mcp_json_parses_unchanged(tmp_path):
    file = tmp_path / "mcp.json"
    file.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "server1": {"type": "sse", "url": "http://localhost:8000/sse"},
                    "server2": {"type": "stdio", "command": "python", "args": ["-m", "srv"], "env": {"K": "s3cr3t"}},
                    "web": {"type": "streamable-http", "url": "https://mcp.example/mcp", "headers": {"A": "b"}},
                    "web2": {"type": "streamableHttp", "url": "https://mcp.example/mcp"},
                    "bare-cmd": {"command": "npx", "args": ["-y", "x"], "autoApprove": []},
                    "bare_sse": {"url": "http://127.0.0.1:9/sse"},
                    "bare_http": {"url": "http://127.0.0.1:9/mcp"},
                }
            }
        )
    )
    servers = load_mcp_servers(file)
    assert servers["server1"] == McpServerSettings(kind="sse", url="http://localhost:8000/sse")
    assert servers["server2"] == McpServerSettings(kind="stdio", command="python", args=("-m", "srv"), env={"K": "s3cr3t"})
    assert servers["web"].kind == "http" and servers["web"].headers == {"A": "b"}
    assert [servers[s].kind for s in ("web2", "bare-cmd", "bare_sse", "bare_http")] == ["http", "stdio", "sse", "http"]
    assert "s3cr3t" not in repr(servers["server2"])  # env may hold keys


@pytest.mark.parametrize(
    "content, words",
    [
        ("{", ["not valid JSON"]),
        ('["x"]', ["JSON object"]),
        ('{"mcpServers": []}', ["mcpServers"]),
        ('{"mcpServers": {"a b": {"command": "x"}}}', ["'a b'", "letters"]),
        ('{"mcpServers": {"s": {"type": "stdio"}}}', ["mcpServers.s", "command"]),
        ('{"mcpServers": {"s": {"type": "sse", "url": "ftp://x"}}}', ["mcpServers.s", "url"]),
        ('{"mcpServers": {"s": {"type": "websocket", "url": "http://x"}}}', ["mcpServers.s", "type"]),
        ('{"mcpServers": {"s": {"command": "x", "args": "-v"}}}', ["mcpServers.s", "args"]),
        ('{"mcpServers": {"s": {"command": "x", "env": {"A": 1}}}}', ["mcpServers.s", "env"]),
        ('{"mcpServers": {"s": {"args": []}}}', ["mcpServers.s", "type"]),
    ],
)
def test_bad_files_give_one_line(tmp_path, content, words):
    file = tmp_path / "mcp.json"
    file.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_mcp_servers(file)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(file))
    assert all(word in message for word in words), message
    with pytest.raises(ConfigError, match="not found"):
        load_mcp_servers(tmp_path / "missing.json")


def test_where_mcp_json_is_found(tmp_path):
    config = tmp_path / "config.toml"
    assert default_mcp_path(config, env={"DURABLE_MANUS_MCP_CONFIG": "/x/m.json"}) == Path("/x/m.json")
    repo_default = REPO_DIR / "config" / "mcp.json"
    assert default_mcp_path(config, env={}) == (repo_default if repo_default.is_file() else None)
    (tmp_path / "mcp.json").write_text("{}")
    assert default_mcp_path(config, env={}) == tmp_path / "mcp.json"
    assert load_mcp_servers(tmp_path / "mcp.json") == {} and load_mcp_servers(None) == {}


# --- names and schemas ----------------------------------------------------


def test_function_names_are_valid_and_distinct():
    assert function_name_for("github", "create_issue") == "mcp_github_create_issue"
    odd = function_name_for("fs", "read.file")
    assert odd.startswith("mcp_fs_read_file_") and odd != function_name_for("fs", "read_file")
    long_names = {function_name_for("s", "x" * 100 + str(i)) for i in range(50)}
    assert len(long_names) == 50 and all(len(n) <= MAX_FUNCTION_NAME for n in long_names)
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") for n in long_names)
    # Ids may hold "_", so plain names can meet; the hashed form tells them apart.
    assert function_name_for("a_b", "c") == function_name_for("a", "b_c")
    assert function_name_for("a_b", "c", hashed=True) != function_name_for("a", "b_c", hashed=True)


def test_schema_names_the_server():
    tool = McpTool(server="fs", name="read", function_name="mcp_fs_read", description="Reads a file.")
    schema = schema_for(tool)
    assert schema["type"] == "function" and schema["function"]["name"] == "mcp_fs_read"
    assert "fs" in schema["function"]["description"] and "Reads a file." in schema["function"]["description"]
    assert schema["function"]["parameters"] == {"type": "object", "properties": {}}


# --- stdio ----------------------------------------------------------------


async def test_list_and_call_over_stdio(pool):
    listed = await list_tools(pool)
    names = {t.function_name: t for t in listed.tools}
    assert listed.problems == []
    add = names["mcp_local_add"]
    assert (add.server, add.name, add.description) == ("local", "add", "Adds two integers.")
    assert set(add.input_schema["properties"]) == {"a", "b"}
    assert (await call(pool, "local", "add", a=2, b=3)) == McpCallResult(output="5")

    failed = await call(pool, "local", "fail", reason="disk full")
    assert failed.error and "disk full" in failed.output
    refused = await call(pool, "local", "no_such_tool")
    assert refused.error and "no_such_tool" in refused.output

    picture = await call(pool, "local", "picture")
    assert picture.output.splitlines() == ["a red dot", "[not shown: image image/png (9 bytes)]"]
    flood = await call(pool, "local", "flood", chars=MAX_OUTPUT_CHARS + 5000)
    assert flood.output.startswith("x" * MAX_OUTPUT_CHARS) and "5000 more characters" in flood.output


async def test_a_server_that_dies_mid_call_is_restarted_for_the_next_call(pool):
    before = (await call(pool, "local", "process_id")).output
    with pytest.raises(ApplicationError) as err:
        await call(pool, "local", "die")
    assert err.value.type == "McpUnavailable" and not err.value.non_retryable
    after = await call(pool, "local", "process_id")
    assert after.output != before and not pid_alive(int(before))
    assert after.tools_changed  # a restarted server may offer other tools
    assert not (await call(pool, "local", "echo", text="x")).tools_changed


async def test_tools_list_changed_reaches_the_next_result(pool):
    await list_tools(pool)  # as a run does first (and the module's earlier tests did: xdist may run this alone)
    first = await call(pool, "local", "grow", name="fresh_tool")
    second = await call(pool, "local", "echo", text="hi")
    assert first.tools_changed or second.tools_changed
    assert not (await call(pool, "local", "echo", text="hi")).tools_changed
    assert "mcp_local_fresh_tool" in {t.function_name for t in (await list_tools(pool)).tools}


async def test_a_cancelled_or_timed_out_call_leaves_the_session(pool):
    pid = (await call(pool, "local", "process_id")).output
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(pool.call_tool("local", "slow", {"seconds": 30}, 60), 0.5)
    with pytest.raises(McpUnavailable, match="no answer"):
        await pool.call_tool("local", "slow", {"seconds": 30}, 0.5)
    calls = [call(pool, "local", "process_id") for _ in range(5)]
    assert {r.output for r in await asyncio.gather(*calls)} == {pid}


async def test_unknown_and_unreachable_servers(pool, tmp_path):
    with pytest.raises(ApplicationError) as err:
        await call(pool, "elsewhere", "add")
    assert err.value.type == "McpUnknownServer" and err.value.non_retryable
    broken = McpPool(
        {
            "gone": McpServerSettings(kind="stdio", command=str(tmp_path / "no-such-server")),
            "closed": McpServerSettings(kind="http", url="http://127.0.0.1:9/mcp"),
        }
    )
    try:
        listed = await list_tools(broken, "gone", "closed", "elsewhere")
        assert listed.tools == [] and len(listed.problems) == 3
        assert all("\n" not in p for p in listed.problems)
        assert "gone" in listed.problems[0] and "closed" in listed.problems[1] and "elsewhere" in listed.problems[2]
        with pytest.raises(ApplicationError) as err:
            await call(broken, "closed", "add")
        assert err.value.type == "McpUnavailable"
    finally:
        await broken.close_all()


async def test_the_server_environment_has_no_worker_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker-secret")
    pool = McpPool({"env": stdio(SERVER_TOKEN="its own")})
    try:
        names = set((await call(pool, "env", "environment")).output.split())
    finally:
        await pool.close_all()
    assert "SERVER_TOKEN" in names and "PATH" in names and "OPENAI_API_KEY" not in names
    assert names <= {"SERVER_TOKEN", "PATH", "HOME", "LANG", "LC_CTYPE"}  # Python may add LC_CTYPE


async def test_bounds_on_listed_tools():
    pool = McpPool({"big": stdio("--many", "200"), "odd": stdio("--huge", "--deep"), "more": stdio("--many", "70")})
    try:
        listed = await list_tools(pool, "big", "odd", "more")
    finally:
        await pool.close_all()
    by_server = {s: [t for t in listed.tools if t.server == s] for s in ("big", "odd", "more")}
    assert len(by_server["big"]) == MAX_TOOLS_PER_SERVER
    assert {t.name for t in by_server["odd"]} & {"huge", "deep"} == set()
    assert len(listed.tools) == 128 and len(by_server["more"]) == 128 - 64 - len(by_server["odd"])
    problems = "\n".join(listed.problems)
    assert "big: offers more than 64 tools" in problems
    assert "'huge': dropped, its input schema is over 16384 bytes" in problems
    assert "'deep': dropped, its input schema is nested deeper than 32 levels" in problems
    assert "more: " in problems and "over 128 MCP tools in all" in problems
    assert len(listed.model_dump_json()) < 300_000


async def test_close_all_leaves_no_server_process():
    pool = McpPool({"a": stdio(), "b": stdio()})
    servers = [int((await call(pool, s, "process_id")).output) for s in ("a", "b")]
    child = int((await call(pool, "a", "spawn")).output)
    assert all(pid_alive(pid) for pid in [*servers, child])
    await pool.close_all()
    assert not any(pid_alive(pid) for pid in servers)
    for _ in range(100):  # the orphan was sent SIGKILL; it is gone once the kernel has run it
        if not pid_alive(child):
            break
        await asyncio.sleep(0.02)
    assert not pid_alive(child)
    with pytest.raises(ApplicationError) as err:
        await call(pool, "a", "add", a=1, b=1)
    assert err.value.type == "McpUnavailable"


# --- SSE and streamable HTTP ----------------------------------------------


@pytest.mark.parametrize("kind", ["http", "sse"])
async def test_http_servers_list_call_and_reconnect(kind):
    with HttpMcpServer(kind) as server:
        settings = McpServerSettings(kind=kind, url=server.url, headers={"X-Token": "t0k"})
        pool = McpPool({"remote": settings})
        try:
            listed = await list_tools(pool)
            assert "mcp_remote_add" in {t.function_name for t in listed.tools}
            assert (await call(pool, "remote", "add", a=20, b=22)).output == "42"
            assert (await call(pool, "remote", "header", name="x-token")).output == "t0k"
            first = await call(pool, "remote", "grow", name="late")
            second = await call(pool, "remote", "echo", text="x")
            assert first.tools_changed or second.tools_changed

            server.stop()
            with pytest.raises(ApplicationError) as err:
                await call(pool, "remote", "add", a=1, b=1)
            assert err.value.type == "McpUnavailable"
            server.start()  # same port
            assert (await call(pool, "remote", "add", a=1, b=1)).output == "2"
        finally:
            await pool.close_all()
