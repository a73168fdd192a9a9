"""The bearer token that `mcp-server --http` requires of every request.

Without it, any local account that reaches the port could list the
operator's runs, read and answer their questions, and start runs on the
operator's worker and LLM key. The token is made once (secrets.token_urlsafe),
kept in the data directory in a file only the operator can read, and reused
at every later start, so a client configured once keeps working.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Awaitable, Callable

from runtime import token_file
from runtime.embedded_server import data_dir

TOKEN_FILENAME = "mcp-token"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def token_path() -> Path:
    return data_dir() / TOKEN_FILENAME


def load_or_create_token(path: Path) -> tuple[str, bool]:
    """(the token in `path`, whether it was just made): runtime/token_file.py."""
    return token_file.load_or_create(path, "MCP token")


def read_token(path: Path) -> str:
    """The token kept in `path`, refused when the file is not the operator's own private regular file."""
    return token_file.read(path, "MCP token")


def bearer_of(scope: Scope) -> bytes | None:
    """The credentials of the request's one `Authorization: Bearer ...` header."""
    values = [value for name, value in scope.get("headers", []) if name.lower() == b"authorization"]
    if len(values) != 1:
        return None
    scheme, _, credentials = values[0].strip().partition(b" ")
    return credentials.strip() if scheme.lower() == b"bearer" else None


class RequireBearer:
    """ASGI middleware: an HTTP request without the token is answered 401 and
    goes no further; the lifespan events pass."""

    def __init__(self, app: App, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = bearer_of(scope)
        if given is not None and hmac.compare_digest(given, self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "unauthorized: send the token of the server's mcp-token file as a Bearer token"})
        await send({
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="durable-manus"'),
                (b"content-length", str(len(body)).encode()),
            ],
        })
        await send({"type": "http.response.body", "body": body.encode()})
