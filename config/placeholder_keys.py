"""Telling a placeholder from an API key: the example config's `sk-...` copied
as it is would otherwise be sent to the provider, which answers 401 on the
run's first think, after a server and a worker were started for it."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(
    r"""
      .*(\.\.\.|…).*                      # sk-...  the example file's literal, or any elided key
    | (sk-)?(x{3,}|\*{3,}|0{3,})           # sk-xxxx, ****
    | .*your.*key.*                       # YOUR_API_KEY, your-key-here
    | <.*>                                # <key>
    | (changeme|change-me|replace-?me|placeholder|api[-_]?key)
    """,
    re.IGNORECASE | re.VERBOSE,
)


def is_placeholder(key: str) -> bool:
    """True when `key` is plainly not a key but the words standing for one."""
    return PLACEHOLDER.fullmatch(key.strip()) is not None
