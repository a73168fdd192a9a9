"""A bearer token kept in a private file of the data directory: made once
(secrets.token_urlsafe), reused at every later start, so that a client
configured once keeps working. The MCP server's (runtime/mcp_token.py) and the
codec server's (runtime/codec_server.py) are kept this way."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from activities import safe_files
from runtime.user_errors import UsageError

TOKEN_BYTES = 32
"""Random bytes of a new token (43 URL-safe characters)."""
MIN_TOKEN_CHARS = 32
"""A token file holding less than this is refused rather than trusted."""
MAX_TOKEN_FILE_BYTES = 4096


def load_or_create(path: Path, what: str) -> tuple[str, bool]:
    """(the token in `path`, whether it was just made); `what` names it in
    messages ("MCP token"). A new one is written to a private temporary file,
    then linked into place: a concurrent start never reads a half-written
    file, and an existing one is never replaced."""
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
        return read(path, what), False
    except OSError as e:
        raise UsageError(f"cannot write the {what} to {path}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(draft)


def read(path: Path, what: str) -> str:
    """The token kept in `path`, refused when the file is not the operator's
    own private regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise UsageError(f"cannot read the {what} file {path}: {e.strerror or e}") from None
    try:
        status = safe_files.check_regular(fd, str(path), limit=MAX_TOKEN_FILE_BYTES, writing=False)
        if status.st_uid != os.geteuid():
            raise UsageError(f"the {what} file {path} belongs to another user; remove it to make a new token")
        if status.st_mode & 0o077:
            raise UsageError(
                f"the {what} file {path} is readable by other accounts (mode {stat.S_IMODE(status.st_mode):04o}); "
                "remove it to make a new token"
            )
        token = safe_files.read_all(fd, str(path), MAX_TOKEN_FILE_BYTES).decode("ascii", "replace").strip()
    except safe_files.UnsafeFile as e:
        raise UsageError(f"the {what} file {e.path} {e.problem}") from None
    finally:
        os.close(fd)
    if len(token) < MIN_TOKEN_CHARS or not token.isprintable() or " " in token:
        raise UsageError(f"the {what} file {path} holds no usable token; remove it to make a new one")
    return token
