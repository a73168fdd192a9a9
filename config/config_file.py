"""Reading an operator's config file without hanging on a FIFO or a device."""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_CONFIG_BYTES = 1024 * 1024
"""Far above any real config; a larger file is a mistake (a log, a dump)."""


class NotAConfigFile(OSError):
    """The path names something other than a regular file, or one too large."""


def read_config_text(path: Path, limit: int = MAX_CONFIG_BYTES) -> str:
    """The file's text. A symbolic link is followed (config maps are links),
    but a FIFO, socket, device or directory is refused instead of read, so a
    command given one says so rather than waiting for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a special file"
            raise NotAConfigFile(f"not a regular file (it is {kind})")
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return data.decode("utf-8")
            data += chunk
        raise NotAConfigFile(f"larger than {limit} bytes")
    finally:
        os.close(fd)
