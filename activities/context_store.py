"""Think context that every worker can read: content-addressed blobs in the
shared workspace volume.

A think carries only the messages its run has not sent before
(agent_model/think_context.py). The worker that receives them writes each one
here, named by the sha256 of its bytes, so any other worker can serve the run's
next think without the workflow sending the window again.

Layout: `<workspace root>/.context/<first 2 hex>/<digest>`. Run names never start
with ".", so this tree is in no run directory, and the tool sandbox shows
tool code only its run's directory (activities/tools/sandbox.py): tools can
neither read nor write it. Directories are 0700 and blobs 0600, private to the
worker's user like the rest of the workspace.

A blob is trusted only if its bytes hash to its name: a torn, truncated or
tampered file reads as missing, and the think falls back to the workflow
resending the window. Never stale text.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from pathlib import Path

from activities.workspace import make_private

CONTEXT_DIR_NAME = ".context"

MAX_BLOB_BYTES = 8 * 1024 * 1024
"""Largest blob read. A window is kept under 1 MiB of JSON (agent_model/memory.py),
so a bigger file is not one this store wrote."""

UNUSED_FOR = 7 * 24 * 3600
"""Blobs no think has written or read for this long (seconds) are pruned; a run
that was idle longer gets its window resent by the workflow, once."""

MIN_NAME_CHARS = 16
_NAME = re.compile(r"[0-9a-f]+")


def blob_name(data: bytes, length: int) -> str:
    return hashlib.sha256(data).hexdigest()[:length]


class ContextStore:
    def __init__(self, workspace_root: Path | str) -> None:
        self.root = Path(workspace_root) / CONTEXT_DIR_NAME
        if self.root.is_dir():
            make_private(self.root)  # made 0755 by an older version

    def _path(self, name: str) -> Path | None:
        if len(name) < MIN_NAME_CHARS or len(name) > 64 or not _NAME.fullmatch(name):
            return None
        return self.root / name[:2] / name

    def put(self, data: bytes, length: int) -> str:
        """Stores `data` under the first `length` hex characters of its sha256;
        returns that name."""
        name = blob_name(data, length)
        path = self._path(name)
        assert path is not None
        if self.get(name) is not None:
            os.utime(path)  # still in use: keep it from being pruned
            return name  # a damaged blob is written again
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        # Readers on other workers must never see a partly written blob.
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return name

    def get(self, name: str) -> bytes | None:
        """The blob's bytes, or None if it is absent, too large, or does not hash to its name."""
        path = self._path(name)
        if path is None:
            return None
        try:
            with open(path, "rb") as blob:
                data = blob.read(MAX_BLOB_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_BLOB_BYTES or blob_name(data, len(name)) != name:
            return None
        return data

    def prune(self, unused_for: float = UNUSED_FOR) -> int:
        """Remove blobs (and temp files of crashed writers) older than
        `unused_for` seconds; returns how many. Safe beside running workers: a
        think that finds a blob gone falls back to the workflow's resend."""
        cutoff = time.time() - unused_for
        removed = 0
        for folder in self.root.glob("??"):
            for blob in folder.iterdir():
                try:
                    if blob.stat(follow_symlinks=False).st_mtime < cutoff:
                        blob.unlink()
                        removed += 1
                except OSError:
                    continue
        return removed
