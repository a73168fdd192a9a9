"""Process exit for the command-line entry points."""

from __future__ import annotations

import os
import sys


def exit_now(code: int) -> None:
    """Exit without interpreter finalization: after a failed connect, the Temporal
    core's native threads can abort a normal shutdown (PyGILState_Release)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
