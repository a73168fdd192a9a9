"""Reading an operator's config file: one line for every way it can fail, and
no hanging on a FIFO or a device."""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_CONFIG_BYTES = 1024 * 1024
"""Far above any real config; a larger file is a mistake (a log, a dump)."""


class ConfigError(Exception):
    """A configuration problem, with a one-line message for the user."""


def read_config_text(path: Path, what: str, limit: int = MAX_CONFIG_BYTES) -> str:
    """The text of `path`, the operator's `what` ("config file", ...).

    A symbolic link is followed (config maps are links), but a FIFO, socket,
    device or directory is refused instead of read, so a command given one
    says so rather than waiting for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except OSError as e:
        raise _unreadable(path, what, e) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a special file"
            raise ConfigError(f"{path}: not a regular file (it is {kind})")
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return data.decode("utf-8")
            data += chunk
        raise ConfigError(f"{path}: larger than {limit} bytes")
    except (OSError, UnicodeDecodeError) as e:
        raise _unreadable(path, what, e) from None
    finally:
        os.close(fd)


def _unreadable(path: Path, what: str, error: Exception) -> ConfigError:
    return ConfigError(f"{path}: cannot read {what} ({error.__class__.__name__}: {error})")
