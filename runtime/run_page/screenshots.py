"""A run's browser screenshots, read for the page from the run's directory
only: `<workspace root>/<run directory>/browser/<name>`.

The run directory is the agent's: its code may have put a symlink, a FIFO, a
device or a huge file where a screenshot should be. So the path is never
resolved as a string: each component is opened beneath the one before with
O_NOFOLLOW (a link anywhere is refused, not followed), the file is opened
without blocking and checked on its descriptor (a regular file, bounded in
size), and what it holds must be an image by its first bytes (PNG, JPEG or
WebP), whatever its name says.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from agent_model.browser import SCREENSHOT_DIR, screenshot_name

SCREENSHOT_LIMIT = 8 * 1024 * 1024
"""Bytes of one screenshot served; a full-page JPEG is well under."""
NAME = re.compile(r"step-\d{4,9}-\d{1,3}\.(?:jpg|jpeg|png|webp)")
"""What the browser tool names its screenshots (agent_model/browser.py screenshot_name), and nothing else."""
DIRECTORY_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
"""A run directory's name as agent_model/workspace_names.py makes it."""
HEAD_BYTES = 16
"""Bytes that tell an image's type."""
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NoScreenshot(Exception):
    """The screenshot cannot be served; the message says why, in a few words."""


def image_type(head: bytes) -> str | None:
    """The MIME type of an image by its magic bytes."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_names(run_dir: str, name: str) -> None:
    if not DIRECTORY_NAME.fullmatch(run_dir) or ".." in run_dir:
        raise NoScreenshot("not a run directory name")
    if not NAME.fullmatch(name):
        raise NoScreenshot("not a screenshot name")


def read_screenshot(
    root: Path, run_dir: str, name: str, limit: int = SCREENSHOT_LIMIT, whole: bool = True
) -> tuple[bytes, str]:
    """(the image's bytes, its MIME type); NoScreenshot when it cannot be
    served. `whole=False` reads only enough to tell that it can."""
    check_names(run_dir, name)
    descriptors: list[int] = []
    try:
        try:
            # The root is the operator's (settings); what is beneath it is the agent's.
            descriptors.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            for directory in (run_dir, SCREENSHOT_DIR):
                descriptors.append(os.open(directory, _OPEN | os.O_DIRECTORY, dir_fd=descriptors[-1]))
            descriptors.append(os.open(name, _OPEN, dir_fd=descriptors[-1]))
        except FileNotFoundError:
            raise NoScreenshot("no such screenshot") from None
        except OSError as e:  # ELOOP: a link; ENOTDIR: a file where a directory should be
            raise NoScreenshot(f"refused ({os.strerror(e.errno) if e.errno else e})") from None
        fd = descriptors[-1]
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NoScreenshot("not a regular file")
        if status.st_size > limit:
            raise NoScreenshot(f"larger than {limit} bytes")
        data = os.pread(fd, limit + 1 if whole else HEAD_BYTES, 0)
        if len(data) > limit:
            raise NoScreenshot(f"larger than {limit} bytes")
    finally:
        for descriptor in reversed(descriptors):
            os.close(descriptor)
    kind = image_type(data[:HEAD_BYTES])
    if kind is None:
        raise NoScreenshot("not an image")
    return data, kind


def step_screenshots(root: Path, run_dir: str, step: int, calls: list[str]) -> dict[int, str]:
    """For the calls of step `step` (their tool names, in reply order), the
    screenshot names that the browser calls left and that can be served, by call index."""
    found = {}
    for index, tool in enumerate(calls):
        if tool != "browser_use":
            continue
        name = screenshot_name(step, index)
        try:
            read_screenshot(root, run_dir, name, whole=False)
        except NoScreenshot:
            continue
        found[index] = name
    return found
