"""Real MCP servers for the MCP client tests, written with the mcp SDK.

The same tools are served over stdio (`python -m testkit.mcp_servers stdio`)
and over streamable HTTP or SSE on a free 127.0.0.1 port
(`... http` / `... sse`: the child prints its port as its first line).
Options shape the tool list: `--many N` adds N trivial tools, `--huge` a tool
whose input schema is over 1 MB, `--deep` one nested 40 levels deep.

HttpMcpServer runs one in a subprocess, so a test can stop the server under a
client, or restart it on the same port.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.types import Image
from pydantic import Field

REPO_DIR = Path(__file__).resolve().parent.parent
STDIO_ARGS = ["-m", "testkit.mcp_servers", "stdio"]
"""With sys.executable and cwd REPO_DIR: the stdio server."""


def build_server(many: int = 0, huge: bool = False, deep: bool = False) -> MCPServer:
    extra: list[Tool] = []
    if deep:
        nested: dict[str, Any] = {"type": "string"}
        for _ in range(40):
            nested = {"type": "object", "properties": {"x": nested}}
        shallow = Tool.from_function(lambda: "deep", name="deep", description="Has a deep schema.")
        extra.append(shallow.model_copy(update={"parameters": {"type": "object", "properties": {"x": nested}}}))
    app = MCPServer("testkit", tools=extra)

    @app.tool()
    def add(a: int, b: int) -> str:
        """Adds two integers."""
        return str(a + b)

    @app.tool()
    def echo(text: str) -> str:
        """Says the text back."""
        return text

    @app.tool()
    def fail(reason: str = "it went wrong") -> str:
        """Always fails, with an error result."""
        raise ToolError(reason)

    @app.tool()
    def die() -> str:
        """Ends the server process in the middle of the call."""
        os._exit(3)

    @app.tool()
    async def slow(seconds: float) -> str:
        """Waits, then answers."""
        import anyio

        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @app.tool()
    def environment() -> str:
        """The names of the server's environment variables."""
        return " ".join(sorted(os.environ))

    @app.tool()
    def process_id() -> str:
        """The server's process id."""
        return str(os.getpid())

    @app.tool()
    def spawn() -> str:
        """Starts a long sleep in the server's process group; its process id."""
        child = subprocess.Popen(["sleep", "600"])
        return str(child.pid)

    @app.tool()
    def header(name: str, ctx: Context) -> str:
        """A header of the HTTP request that carried this call."""
        request = ctx.request_context.request
        return "" if request is None else request.headers.get(name, "")

    @app.tool(structured_output=False)
    def picture() -> list[Any]:
        """Text and an image."""
        return ["a red dot", Image(data=b"\x89PNG fake", format="png")]

    @app.tool()
    def flood(chars: int) -> str:
        """A long answer."""
        return "x" * chars

    @app.tool()
    async def grow(name: str, ctx: Context) -> str:
        """Adds a tool and tells the client its tools changed."""
        app.add_tool(lambda: f"I am {name}", name=name, description="Added at run time.")
        # A 2025-era session hears the notification, a 2026-era one its listen stream.
        await ctx.request_context.session.send_tool_list_changed()
        await ctx.notify_tools_changed()
        return f"added {name}"

    for i in range(many):
        app.add_tool(lambda: "ok", name=f"t{i:03d}", description=f"Trivial tool {i}.")
    if huge:

        def big(x: Annotated[str, Field(description="y" * 1_100_000)]) -> str:
            return x

        app.add_tool(big, name="huge", description="Has a huge schema.")
    return app


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(os.environ.get("TESTKIT_MCP_PORT", "0"))))
    sock.listen(64)
    return sock


def _serve_http(app: MCPServer, kind: str) -> None:
    import asyncio

    import uvicorn

    web = app.sse_app() if kind == "sse" else app.streamable_http_app()
    sock = _free_socket()
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(web, log_level="warning"))
    asyncio.run(server.serve(sockets=[sock]))


class HttpMcpServer:
    """The test server over streamable HTTP ("http") or SSE, in a subprocess."""

    START_SECONDS = 20.0
    """Importing the SDK and starting uvicorn takes ~1 s; a loaded CI box more."""

    def __init__(self, kind: str = "http", *options: str) -> None:
        self.kind, self.options = kind, options
        self.port: int | None = None
        self.process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        path = "/sse" if self.kind == "sse" else "/mcp"
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> HttpMcpServer:
        env = {**os.environ, "TESTKIT_MCP_PORT": str(self.port or 0)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "testkit.mcp_servers", self.kind, *self.options],
            cwd=REPO_DIR,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"the {self.kind} MCP server did not start")
        self.port = int(line)
        deadline = time.monotonic() + self.START_SECONDS
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the {self.kind} MCP server does not accept connections")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def __enter__(self) -> HttpMcpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m testkit.mcp_servers")
    parser.add_argument("transport", choices=["stdio", "http", "sse"])
    parser.add_argument("--many", type=int, default=0)
    parser.add_argument("--huge", action="store_true")
    parser.add_argument("--deep", action="store_true")
    args = parser.parse_args(argv)
    app = build_server(args.many, args.huge, args.deep)
    if args.transport == "stdio":
        app.run()
    else:
        _serve_http(app, args.transport)


if __name__ == "__main__":
    main(sys.argv[1:])
