"""Run directory names: a workflow id (any text) as a safe directory name.
Pure: the workflow derives its run's directory name from its id."""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 100
"""Longest directory name workspace_name_for produces; well under common
filesystem limits (255 bytes) so a run directory name is always valid."""

_DISALLOWED_CHAR = re.compile(r"[^A-Za-z0-9._-]")
_HASH_SUFFIX = re.compile(r"-[0-9a-f]{8}$")


def workspace_name_for(run_id: str) -> str:
    """Map a workflow id (any text) to a safe, unique directory name.

    An id that is already a safe name of at most MAX_NAME_LENGTH characters is
    used as is. Otherwise disallowed characters become "_", the result is
    shortened, and "-" plus 8 hex digits of the id's sha256 is appended, so
    e.g. "a/b" and "a_b" get different names. Ids that are safe but already end
    in such a suffix get one more, so a plain id can never impersonate the
    hashed name of another id.
    """
    name = _DISALLOWED_CHAR.sub("_", run_id)
    if name.startswith("."):
        name = "_" + name[1:]
    needs_suffix = (
        name != run_id
        or not name
        or len(name) > MAX_NAME_LENGTH
        or _HASH_SUFFIX.search(name) is not None
    )
    if not needs_suffix:
        return name
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name[: MAX_NAME_LENGTH - 9]}-{digest}"
