"""The live events of a think: what the worker streams to followers beside
the run's history (activities/live_feed.py writes them, runtime/live_feed.py
reads them).

One think is a journal of JSON lines: `think_started`, then `token` events
carrying the text the model streamed since the last one, then `think_ended`.
The history never holds them: it keeps only the think's final message. Pure:
encoding, bounded decoding and where the journal lives.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from agent_model.reply_repair import valid_utf8
from agent_model.workspace_names import workspace_name_for

LIVE_DIR_NAME = ".live"
"""Under the workspace root, beside the run directories (a run name never
starts with "."), so tool code, which sees only its own run directory, can
neither read nor forge a journal."""
JOURNAL_NAME = "think.jsonl"
"""The current think of a run; a new think replaces the file."""

Kind = Literal["think_started", "token", "think_ended"]
Channel = Literal["content", "tool_call"]
KINDS: frozenset[str] = frozenset(get_args(Kind))
CHANNELS: frozenset[str] = frozenset(get_args(Channel))

MAX_EVENT_CHARS = 2000
"""Characters of text in one event; the writer splits longer text."""
MAX_LINE_BYTES = 16 * 1024
"""Longest line decode accepts: an event of MAX_EVENT_CHARS characters, each
escaped as \\uXXXX at worst (6 bytes), and its other fields."""
MAX_ID_CHARS = 300
"""Of an event's run id (a workflow id is at most 1000 bytes by default; the
journal's directory names the run already)."""


@dataclass(frozen=True)
class LiveEvent:
    run_id: str
    """The workflow id of the run whose think this is."""
    step: int | None
    """The run's step (None: a think outside a step, such as a flow's planning)."""
    kind: Kind
    text: str = ""
    """What the model streamed since the previous event (`token`), else ""."""
    channel: Channel = "content"
    """`content`: the reply's text; `tool_call`: a tool call's name and arguments as they stream."""
    at: float = 0.0
    """Seconds since the epoch when the worker wrote the event."""


def encode(event: LiveEvent) -> str:
    """One JSON line (ending in a newline), valid UTF-8 whatever the text held."""
    record = {
        "run_id": valid_utf8(event.run_id),
        "step": event.step,
        "kind": event.kind,
        "text": valid_utf8(event.text),
        "channel": event.channel,
        "at": event.at,
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def _step(value: object) -> tuple[bool, int | None]:
    if value is None:
        return True, None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return True, value
    return False, None


def decode(line: str | bytes) -> LiveEvent | None:
    """The event of one journal line; None for anything else (too long, not
    JSON, a field of the wrong kind, an unknown kind or channel)."""
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    run_id, kind, text = record.get("run_id"), record.get("kind"), record.get("text", "")
    channel, at = record.get("channel", "content"), record.get("at", 0.0)
    good_step, step = _step(record.get("step"))
    if not (isinstance(run_id, str) and len(run_id) <= MAX_ID_CHARS and good_step):
        return None
    if kind not in KINDS or channel not in CHANNELS:
        return None
    if not isinstance(text, str) or len(text) > MAX_EVENT_CHARS:
        return None
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
        return None
    return LiveEvent(run_id=run_id, step=step, kind=kind, text=text, channel=channel, at=float(at))


def journal_dir_name(run_id: str) -> str:
    """The directory of a run's journal under LIVE_DIR_NAME: named as a run's
    directory is for its workflow id (agent_model/workspace_names.py)."""
    return workspace_name_for(run_id)


def journal_path(root: Path, run_dir: str) -> Path:
    """Where the journal of the run whose directory name is `run_dir` lives
    under workspace root `root`."""
    return root / LIVE_DIR_NAME / run_dir / JOURNAL_NAME


def split_text(text: str, size: int = MAX_EVENT_CHARS) -> list[str]:
    """`text` in pieces of at most `size` characters (none for "")."""
    return [text[i : i + size] for i in range(0, len(text), size)]
