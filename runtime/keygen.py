"""`python starter.py keygen PATH`: a payload key file (config/key_file.py), or
a new current key in one. The keys themselves are never printed."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from config.key_file import add_new_key


def keygen(path: str, out: TextIO) -> int:
    target = Path(path).expanduser()
    ring = add_new_key(target)
    where = target.resolve()
    older = sorted(key_id for key_id in ring.keys if key_id != ring.current)
    if not older:
        print(
            f"wrote payload key {ring.current} to {where} (0600); to encrypt every payload, set "
            f'[encryption] key_file = "{where}" (or DURABLE_MANUS_ENCRYPTION_KEY_FILE) for every starter, worker and '
            "MCP server, and restart those running (docs/security.md#encrypted-payloads)",
            file=out,
        )
    else:
        print(
            f"added payload key {ring.current} to {where}, now the one that encrypts; older keys kept "
            f"({', '.join(older)}), so what they sealed stays readable; restart the workers, starters, MCP servers "
            "and codec server using the file",
            file=out,
        )
    return 0
