"""Whether a process of this machine still runs, by its pid."""

from __future__ import annotations

import os


def is_alive(pid: int) -> bool:
    """True while `pid` names a process (one of another user's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
