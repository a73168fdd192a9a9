"""`python starter.py codec-server`: Temporal's codec-server protocol on 127.0.0.1,
so that the Web UI and `temporal --codec-endpoint` show encrypted payloads decoded.

POST .../decode and .../encode take `{"payloads": [...]}`, the Payloads
message in protobuf's JSON form (bytes as base64), and answer the same form,
decoded or encoded with the key file's keys (agent_model/payload_crypto.py).
Only the last part of the path counts, as the protocol says.

Whoever may call it reads every run, so every call needs the server's token
(.data/codec-token, made once, 0600; or DURABLE_MANUS_CODEC_TOKEN):

- the CLI sends it as a header: `--codec-auth "Bearer TOKEN"`;
- the Web UI sends no token of ours (its "pass access token" is its SSO
  login's), so a browser signs in once on this server's page (GET /) and gets
  an HttpOnly, SameSite=Strict cookie for /codec, derived from the token;
  the UI then calls with "Include cross-origin credentials". Cross-origin
  calls are answered only for the Web UI's origins (the embedded one's, and
  [encryption] web_ui_origins), and a call that carries the cookie must be
  JSON, which a page of another origin cannot send without a preflight this
  server refuses.

Without the token: 401. A body over MAX_BODY_BYTES: 413. Not the JSON of
Payloads: 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import html
import json
import os
import sys
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import TextIO
from urllib.parse import parse_qs, urlsplit

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from agent_model.payload_crypto import EncryptionCodec, PayloadUnreadable
from config import environment
from config.encryption_settings import CODEC_PATH
from config.settings import Settings
from runtime import token_file
from runtime.embedded_server import configured_ui_port, data_dir
from runtime.http_exchange import HEAD_BYTES, BadRequest, Request, discard_body, read_request, write_response
from runtime.user_errors import UsageError

HOST = "127.0.0.1"
TOKEN_FILENAME = "codec-token"
COOKIE = "durable_manus_codec"
COOKIE_DAYS = 30
"""How long a browser stays signed in; deleting the token file ends every sign-in."""
MAX_BODY_BYTES = 8 * 1024 * 1024
"""A call's JSON: the UI and the CLI send one event's payloads at a time, each
under Temporal's 2 MiB limit, and base64 adds a third."""
LOGIN_BODY_BYTES = 4096
JSON_TYPE = "application/json"
HTML_TYPE = "text/html; charset=utf-8"
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def token_path() -> Path:
    return data_dir() / TOKEN_FILENAME


def codec_token() -> tuple[str, str]:
    """(the token, where it comes from): DURABLE_MANUS_CODEC_TOKEN, else the token file (made once)."""
    given = environment.read(os.environ, "DURABLE_MANUS_CODEC_TOKEN")
    if given:
        return given, "DURABLE_MANUS_CODEC_TOKEN"
    path = token_path()
    token, _ = token_file.load_or_create(path, "codec token")
    return token, str(path)


def cookie_value(token: str) -> str:
    """What the sign-in cookie holds: not the token itself, and void once the token changes."""
    return hmac.new(token.encode(), b"durable-manus codec-server sign-in", hashlib.sha256).hexdigest()


def web_ui_origins(settings: Settings) -> frozenset[str]:
    """Origins whose pages may call: the embedded Web UI under both its names,
    $TEMPORAL_UI_URL's, and [encryption] web_ui_origins."""
    port = configured_ui_port()
    origins = {f"http://127.0.0.1:{port}", f"http://localhost:{port}", *settings.encryption.web_ui_origins}
    ui_url = os.environ.get("TEMPORAL_UI_URL")
    if ui_url:
        parts = urlsplit(ui_url)
        if parts.scheme in ("http", "https") and parts.netloc:
            origins.add(f"{parts.scheme}://{parts.netloc}".lower())
    return frozenset(origins)


@dataclass
class CodecServer:
    codec: EncryptionCodec
    token: str
    origins: frozenset[str]
    port: int = 0
    """Where it listens, once serving (0: not yet)."""

    def __post_init__(self) -> None:
        self._bearer = f"Bearer {self.token}".encode()
        self._cookie = cookie_value(self.token).encode()

    async def serve(self, port: int) -> asyncio.Server:
        """Listening on HOST:`port` (0: any free port; self.port says which)."""
        server = await asyncio.start_server(self.handle, HOST, port, limit=HEAD_BYTES)
        self.port = server.sockets[0].getsockname()[1]
        return server

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}{CODEC_PATH}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            cors: dict[str, str] = {}
            try:
                request = await read_request(reader)
                cors = self._cors(request)
                await self._route(request, writer, cors)
            except BadRequest as e:
                await self._error(writer, e.status, e.reason, cors)
                if e.status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
                    writer.write_eof()
                    await discard_body(reader, 2 * MAX_BODY_BYTES)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _route(self, request: Request, writer: asyncio.StreamWriter, cors: dict[str, str]) -> None:
        action = request.path.rstrip("/").rsplit("/", 1)[-1]
        if request.method == "GET" and request.path in ("/", ""):
            await write_response(writer, HTTPStatus.OK, _page(LOGIN_PAGE + LOGIN_FORM), HTML_TYPE, PAGE_HEADERS)
        elif request.method == "POST" and request.path == "/login":
            await self._login(request, writer)
        elif action in ("decode", "encode") and request.method == "OPTIONS":
            await self._preflight(request, writer, cors)
        elif action in ("decode", "encode") and request.method == "POST":
            await self._convert(request, writer, cors, action)
        elif action in ("decode", "encode"):
            raise BadRequest(HTTPStatus.METHOD_NOT_ALLOWED, "POST a JSON body of payloads")
        else:
            raise BadRequest(HTTPStatus.NOT_FOUND, f"no such endpoint; POST to {CODEC_PATH}/decode or {CODEC_PATH}/encode")

    def _cors(self, request: Request) -> dict[str, str]:
        origin = request.header("origin")
        if origin is None or origin.lower() not in self.origins:
            return {}
        return {"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Credentials": "true", "Vary": "Origin"}

    async def _preflight(self, request: Request, writer: asyncio.StreamWriter, cors: dict[str, str]) -> None:
        if not cors:
            raise BadRequest(HTTPStatus.FORBIDDEN, "this origin may not call the codec server; add it to [encryption] web_ui_origins")
        allowed = {
            **cors,
            "Access-Control-Allow-Methods": "POST",
            "Access-Control-Allow-Headers": "Content-Type, X-Namespace, Authorization",
            "Access-Control-Max-Age": "600",
        }
        await write_response(writer, HTTPStatus.NO_CONTENT, headers=allowed)

    def _authorised(self, request: Request) -> bool:
        bearer = request.header("authorization")
        if bearer is not None:
            return hmac.compare_digest(bearer.encode(), self._bearer)
        cookie = _cookie(request.header("cookie"), COOKIE)
        if cookie is None or not hmac.compare_digest(cookie.encode(), self._cookie):
            return False
        # A browser's call: only as JSON, so another origin's page gets a preflight, which it fails.
        return (request.header("content-type") or "").split(";")[0].strip().lower() == JSON_TYPE

    async def _convert(self, request: Request, writer: asyncio.StreamWriter, cors: dict[str, str], action: str) -> None:
        if not self._authorised(request):
            raise BadRequest(
                HTTPStatus.UNAUTHORIZED,
                f"send the codec server's token: --codec-auth \"Bearer TOKEN\" (the CLI), or sign in at "
                f"http://{HOST}:{self.port}/ (a browser)",
            )
        body = await request.body(MAX_BODY_BYTES)
        try:
            payloads = json_format.Parse(body.decode("utf-8"), Payloads())
        except (UnicodeDecodeError, json_format.ParseError, RecursionError):
            raise BadRequest(HTTPStatus.BAD_REQUEST, 'the body is not {"payloads": [...]} in protobuf JSON') from None
        try:
            done = await (self.codec.decode if action == "decode" else self.codec.encode)(payloads.payloads)
        except PayloadUnreadable as e:
            raise BadRequest(HTTPStatus.BAD_REQUEST, str(e)) from None
        answer = json.dumps({"payloads": [json_format.MessageToDict(payload) for payload in done]}).encode()
        await write_response(writer, HTTPStatus.OK, answer, JSON_TYPE, {**cors, "Cache-Control": "no-store"})

    async def _login(self, request: Request, writer: asyncio.StreamWriter) -> None:
        body = await request.body(LOGIN_BODY_BYTES)
        given = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0].strip()
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            page = _page(f"<h1>Not signed in</h1><p>That is not this codec server's token.</p>{LOGIN_FORM}")
            await write_response(writer, HTTPStatus.UNAUTHORIZED, page, HTML_TYPE, PAGE_HEADERS)
            return
        cookie = (
            f"{COOKIE}={cookie_value(self.token)}; Path={CODEC_PATH}; HttpOnly; SameSite=Strict; "
            f"Max-Age={COOKIE_DAYS * 86400}"
        )
        signed_in = SIGNED_IN_PAGE.format(endpoint=html.escape(self.endpoint))
        await write_response(writer, HTTPStatus.OK, _page(signed_in), HTML_TYPE, {**PAGE_HEADERS, "Set-Cookie": cookie})

    async def _error(self, writer: asyncio.StreamWriter, status: HTTPStatus, reason: str, cors: dict[str, str]) -> None:
        headers = dict(cors)
        if status == HTTPStatus.UNAUTHORIZED:
            headers["WWW-Authenticate"] = 'Bearer realm="durable-manus codec server"'
        await write_response(writer, status, json.dumps({"error": reason}).encode(), JSON_TYPE, headers)


def _cookie(header: str | None, name: str) -> str | None:
    if not header:
        return None
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


LOGIN_FORM = (
    '<form method="post" action="/login"><label>Token (the file .data/codec-token, or DURABLE_MANUS_CODEC_TOKEN): '
    '<input type="password" name="token" autocomplete="off" size="50"></label> <button>Sign in</button></form>'
)
LOGIN_PAGE = (
    "<h1>durable-manus codec server</h1>"
    "<p>Sign this browser in once, so the Temporal Web UI can show the runs' encrypted payloads decoded. "
    "Open this page under the same host name as the Web UI (127.0.0.1 or localhost).</p>"
)
SIGNED_IN_PAGE = (
    f"<h1>Signed in</h1><p>This browser may decode for {COOKIE_DAYS} days. In the Temporal Web UI, open "
    "<b>Codec Server</b> (top right), choose <i>Use my browser setting</i>, set the endpoint to "
    "<code>{endpoint}</code> and tick <i>Include cross-origin credentials</i>.</p>"
)


def _page(body: str) -> bytes:
    return f"<!doctype html><meta charset=utf-8><title>durable-manus codec server</title>{body}".encode()


def codec_server_for(settings: Settings) -> tuple[CodecServer, str]:
    """The server for these settings, and where its token comes from; a
    UsageError when encryption is off."""
    ring = settings.encryption.key_ring()
    if ring is None:
        raise UsageError(
            "codec-server decodes with the payload keys, and none are configured: set [encryption] key_file "
            "(or DURABLE_MANUS_ENCRYPTION_KEY_FILE) to a key file from `python starter.py keygen PATH`"
        )
    token, where = codec_token()
    return CodecServer(EncryptionCodec(ring), token, web_ui_origins(settings)), where


def listening_line(server: CodecServer, where: str) -> str:
    """Where it listens and how to point the Web UI and the CLI at it, without the token."""
    token = "$DURABLE_MANUS_CODEC_TOKEN" if where == "DURABLE_MANUS_CODEC_TOKEN" else f"$(cat {where})"
    return (
        f"codec server on {server.endpoint} (keys {', '.join(sorted(server.codec.ring.keys))}, token in {where}); "
        f"Web UI: sign in once at http://{HOST}:{server.port}/, then set its Codec Server to {server.endpoint} with "
        f'cross-origin credentials; CLI: temporal ... --codec-endpoint {server.endpoint} --codec-auth "Bearer {token}"'
    )


async def serve(settings: Settings, port: int | None, out: TextIO = sys.stdout) -> int:
    """`codec-server`: serve until interrupted."""
    server, where = codec_server_for(settings)
    port = settings.encryption.codec_port if port is None else port
    try:
        listening = await server.serve(port)
    except OSError as e:
        raise UsageError(f"cannot listen on {HOST}:{port}: {e.strerror or e} (choose another with --port)") from None
    print(listening_line(server, where), file=out, flush=True)
    async with listening:
        await listening.serve_forever()
    return 0
