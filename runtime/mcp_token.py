"""The bearer token that `mcp-server --http` requires of every request.

Without it, any local account that reaches the port could list the
operator's runs, read and answer their questions, and start runs on the
operator's worker and LLM key. The token is made once (secrets.token_urlsafe),
kept in the data directory in a file only the operator can read, and reused
at every later start, so a client configured once keeps working.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Awaitable, Callable

from activities import safe_files
from runtime.user_errors import UsageError
from runtime.embedded_server import data_dir

TOKEN_FILENAME = "mcp-token"
TOKEN_BYTES = 32
"""Random bytes of a new token (43 URL-safe characters)."""
MIN_TOKEN_CHARS = 32
"""A token file holding less than this is refused rather than trusted."""
MAX_TOKEN_FILE_BYTES = 4096

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def token_path() -> Path:
    return data_dir() / TOKEN_FILENAME


def load_or_create_token(path: Path) -> tuple[str, bool]:
    """(the token in `path`, whether it was just made). A new one is written
    to a private temporary file, then linked into place: a concurrent start
    never reads a half-written file, and an existing one is never replaced."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, f"{token}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(draft, path)
        return token, True
    except FileExistsError:
        return read_token(path), False
    except OSError as e:
        raise UsageError(f"cannot write the MCP token to {path}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(draft)


def read_token(path: Path) -> str:
    """The token kept in `path`, refused when the file is not the operator's
    own private regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise UsageError(f"cannot read the MCP token file {path}: {e.strerror or e}") from None
    try:
        status = safe_files.check_regular(fd, str(path), limit=MAX_TOKEN_FILE_BYTES, writing=False)
        if status.st_uid != os.geteuid():
            raise UsageError(f"the MCP token file {path} belongs to another user; remove it to make a new token")
        if status.st_mode & 0o077:
            raise UsageError(
                f"the MCP token file {path} is readable by other accounts (mode {stat.S_IMODE(status.st_mode):04o}); "
                "remove it to make a new token"
            )
        token = safe_files.read_all(fd, str(path), MAX_TOKEN_FILE_BYTES).decode("ascii", "replace").strip()
    except safe_files.UnsafeFile as e:
        raise UsageError(f"the MCP token file {e.path} {e.problem}") from None
    finally:
        os.close(fd)
    if len(token) < MIN_TOKEN_CHARS or not token.isprintable() or " " in token:
        raise UsageError(f"the MCP token file {path} holds no usable token; remove it to make a new one")
    return token


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
