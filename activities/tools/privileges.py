"""What a forked child does before it execs a tool's sandbox: give up gaining
privileges (used by activities/tools/sandbox.py and run_sandbox.py)."""

from __future__ import annotations

import ctypes

_PR_SET_NO_NEW_PRIVS = 38
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def no_new_privs() -> None:
    """Runs in a forked child before exec: no later exec may gain privileges
    (setuid binaries, file capabilities)."""
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
