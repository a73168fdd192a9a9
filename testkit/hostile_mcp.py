"""MCP servers that misbehave on purpose, written by hand (the SDK's server
would not send what they send). Both answer the handshake as a 2025-era
server and offer a few tools whose calls are the attack:

- over stdio (`python -m testkit.hostile_mcp`): `storm` writes
  `count` tools/list_changed notifications, `babble` `count` lines that are
  not JSON-RPC, `echoes` `count` answers to requests never sent, `long_line`
  one line of `size` bytes, each as fast as the pipe takes them; `shout`
  writes STDERR_LINE (escape sequences) `count` times to stderr, then
  `size` bytes with no newline; `add` answers at once;
- over streamable HTTP (HostileHttpMcp, a thread on 127.0.0.1): `huge_json`
  answers with an endless JSON body, `huge_declared` declares one of 64 MiB,
  `huge_event` an event stream whose one event never ends, `gzipped` a small
  reply compressed although none was asked for. It counts the bytes of each
  reply the client took (`written`), so a test can tell it stopped reading.
"""

from __future__ import annotations

import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testkit.threaded_server import serve_in_thread, stop_serving

HOSTILE_STDIO_ARGS = ["-m", "testkit.hostile_mcp"]
"""With sys.executable, run from the repo's directory: the stdio server."""
PROTOCOL = "2025-06-18"
CHUNK = 1024 * 1024
ENDLESS = 96 * CHUNK
"""What an endless reply would come to: far past any bound of the client."""
FLOODS = {
    "storm": b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n',
    "babble": b"this is not JSON-RPC\n",
    "echoes": b'{"jsonrpc":"2.0","id":"nobody-asked","result":{}}\n',
}


def _tool(name: str, **properties: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object", "properties": {p: {"type": t} for p, t in properties.items()}}}


STDERR_LINE = "owned\x1b]0;retitled\x07\x1b[2J\x9b31m\r\u202elive"
"""What `shout` writes to stderr: a window title, a clear screen, an 8-bit
CSI, a carriage return, a bidi override."""
STDIO_TOOLS = [*(_tool(name, count="integer") for name in FLOODS), _tool("long_line", size="integer"),
               _tool("shout", count="integer", size="integer"), _tool("add", a="integer", b="integer")]
HTTP_TOOLS = [_tool(name) for name in ("huge_json", "huge_declared", "huge_event", "gzipped")] + [_tool("add", a="integer", b="integer")]


def text_result(request_id: Any, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}], "isError": False}}


def handshake_answer(message: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer to any request but tools/call: what a plain server says."""
    method, request_id = message.get("method"), message.get("id")
    if method == "initialize":
        result = {"protocolVersion": PROTOCOL, "capabilities": {"tools": {"listChanged": True}},
                  "serverInfo": {"name": "hostile", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": tools}
    elif method == "ping":
        result = {}
    else:  # server/discover among them: this is a 2025-era server
        return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _add(arguments: dict[str, Any]) -> str:
    return str(arguments.get("a", 0) + arguments.get("b", 0))


# --- stdio ----------------------------------------------------------------


def _write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _stdio_call(request_id: Any, name: str, arguments: dict[str, Any]) -> None:
    count = int(arguments.get("count", 0))
    if name in FLOODS:
        for start in range(0, count, 256):
            _write(FLOODS[name] * min(256, count - start))
    elif name == "shout":
        sys.stderr.buffer.write((STDERR_LINE + "\n").encode() * count + b"x" * int(arguments.get("size", 0)))
        sys.stderr.buffer.flush()
    elif name == "long_line":
        size = int(arguments.get("size", 0))
        for _ in range(size // CHUNK):
            _write(b" " * CHUNK)
    text = _add(arguments) if name == "add" else f"{name} done"
    _write(json.dumps(text_result(request_id, text)).encode() + b"\n")


def serve_stdio() -> None:
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # a notification, or an answer
        if message["method"] == "tools/call":
            params = message.get("params") or {}
            _stdio_call(message["id"], params.get("name", ""), params.get("arguments") or {})
        else:
            _write(json.dumps(handshake_answer(message, STDIO_TOOLS)).encode() + b"\n")


# --- streamable HTTP --------------------------------------------------------


class HostileHttpMcp:
    """The streamable-HTTP server, on a free 127.0.0.1 port, in a thread."""

    def __init__(self) -> None:
        self.written: dict[str, int] = {}
        """Bytes of each tool's reply that the client took, by tool name."""
        self.finished: set[str] = set()
        """Tools whose whole reply was written."""
        self.ended: set[str] = set()
        """Tools whose reply is no longer written: finished, or the client went away."""
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/mcp"

    def start(self) -> HostileHttpMcp:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.mcp = self
        self._server = serve_in_thread(server)
        return self

    def stop(self) -> None:
        stop_serving(self._server)

    def __enter__(self) -> HostileHttpMcp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    mcp: HostileHttpMcp

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that stops reading is what the tests want


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._plain(405, b"")

    do_DELETE = do_GET

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        if "id" not in message:
            self._plain(202, b"")
        elif message.get("method") != "tools/call":
            self._plain(200, json.dumps(handshake_answer(message, HTTP_TOOLS)).encode(), "application/json")
        else:
            params = message.get("params") or {}
            self._call(message["id"], params.get("name", ""), params.get("arguments") or {})

    def _plain(self, status: int, body: bytes, content_type: str = "text/plain", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def _call(self, request_id: Any, name: str, arguments: dict[str, Any]) -> None:
        if name == "add":
            self._plain(200, json.dumps(text_result(request_id, _add(arguments))).encode(), "application/json")
        elif name == "gzipped":
            body = gzip.compress(json.dumps(text_result(request_id, "compressed")).encode())
            self._plain(200, body, "application/json", Content_Encoding="gzip")
        else:
            reply = json.dumps(text_result(request_id, "x"))
            start = reply[: reply.index('"x"') + 1].encode()  # up to the text's opening quote
            if name == "huge_event":
                self._endless(name, "text/event-stream", b"event: message\ndata: " + start)
            else:
                self._endless(name, "application/json", start, declared=name == "huge_declared")

    def _endless(self, name: str, content_type: str, start: bytes, declared: bool = False) -> None:
        """`start`, then spaces: ENDLESS bytes chunked, or 64 MiB declared."""
        total = 64 * CHUNK if declared else ENDLESS
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header(*(("Content-Length", str(total)) if declared else ("Transfer-Encoding", "chunked")))
        self.end_headers()
        record = self.server.mcp.written
        record[name] = 0
        spaces, rest = divmod(total - len(start), CHUNK)
        pieces = [start] + [b" " * CHUNK] * spaces + [b" " * rest]
        try:
            for piece in filter(None, pieces):
                self.wfile.write(piece if declared else b"%x\r\n%s\r\n" % (len(piece), piece))
                record[name] += len(piece)
            if not declared:
                self.wfile.write(b"0\r\n\r\n")
            self.server.mcp.finished.add(name)
        except OSError:
            pass
        finally:
            self.server.mcp.ended.add(name)


if __name__ == "__main__":
    serve_stdio()
