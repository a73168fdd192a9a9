"""Where the operator's config files are, and reading one: one line for every
way it can fail, and no hanging on a FIFO or a device."""

from __future__ import annotations

import os
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_PATH = REPO_DIR / "config" / "config.toml"
"""Read when it exists and neither --config nor DURABLE_MANUS_CONFIG names a file."""

MAX_CONFIG_BYTES = 1024 * 1024
"""Far above any real config; a larger file is a mistake (a log, a dump)."""


MESSAGE_LIMIT = 500
"""Characters of a config error's line: a path or value it quotes may be huge."""


class ConfigError(Exception):
    """A configuration problem, with a one-line message for the user."""

    def __init__(self, message: str) -> None:
        if len(message) > MESSAGE_LIMIT:
            message = message[: MESSAGE_LIMIT - 1] + "…"
        super().__init__(message)


def read_config_text(path: Path, what: str, limit: int = MAX_CONFIG_BYTES) -> str:
    """The text of `path`, the operator's `what` ("config file", ...).

    A symbolic link is followed (config maps are links), but a FIFO, socket,
    device or directory is refused instead of read, so a command given one
    says so rather than waiting for a writer."""
    from activities import safe_files  # here: a command that reads no config file never loads activities/

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except OSError as e:
        raise _unreadable(path, what, e) from None
    try:
        safe_files.check_regular(fd, str(path), limit=limit, writing=False)
        return safe_files.read_all(fd, str(path), limit).decode("utf-8")
    except safe_files.UnsafeFile as e:
        raise ConfigError(f"{path}: {e.problem}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise _unreadable(path, what, e) from None
    finally:
        os.close(fd)


def _unreadable(path: Path, what: str, error: Exception) -> ConfigError:
    return ConfigError(f"{path}: cannot read {what} ({error.__class__.__name__}: {error})")
