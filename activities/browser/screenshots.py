"""Screenshots after each action: files under <run>/browser/, written without
following any link out of the run directory (a tool may have replaced
`browser` with a symlink to /etc)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Literal

from activities.safe_files import Beneath, UnsafeFile
from agent_model.browser import SCREENSHOT_DIR
from activities.tools.sandbox import ToolSandbox

log = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}")


ImageKind = Literal["jpeg", "png"]
_KINDS: dict[str, ImageKind] = {"jpg": "jpeg", "jpeg": "jpeg", "png": "png"}


def image_kind(name: str) -> ImageKind | None:
    """"jpeg" or "png" for a plain file name with that extension, else None."""
    if not NAME.fullmatch(name) or ".." in name:
        return None
    return _KINDS.get(name.rsplit(".", 1)[-1].lower())


def save_screenshot(run_dir: Path, sandbox: ToolSandbox, name: str, image: bytes) -> str | None:
    """The path relative to the run directory, or None if it could not be written."""
    relative = f"{SCREENSHOT_DIR}/{name}"
    try:
        sandbox.prepare_run_dir(run_dir)  # files the worker makes belong to the tool user
        with Beneath(run_dir) as directory:
            directory.write_file(relative, image)
    except (OSError, UnsafeFile) as e:
        log.warning("browser screenshot %s not written: %s", relative, e)
        return None
    return relative
