"""Text from a run made inert before it reaches a terminal.

What the model writes, what tools and web pages answer, a run's questions and
notes are all hostile: printed as they are, an escape sequence could clear the
screen, retitle the window, write the clipboard (OSC 52), rewrite earlier
lines (a carriage return, cursor moves) or make a prompt lie. Every CLI line
that carries such text goes through `inert`, which keeps printable characters,
newlines and tabs only.
"""

from __future__ import annotations

import logging
import re
from typing import TextIO

from agent_model.reply_repair import valid_utf8

_ESCAPE_SEQUENCE = re.compile(
    r"""
    (?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?          # CSI: cursor, erase, colours
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])                  # OSC, DCS, SOS, PM, APC ...
      [^\n\x07\x1b\x90\x98\x9c-\x9f]*(?:\x07|\x1b\\|\x9c)        # ... up to BEL or ST on its line
    | \x1b[\x20-\x2f]*[\x30-\x7e]?                             # any other escape: ESC ( B, ESC c, ...
    """,
    re.VERBOSE,
)
"""An escape sequence; one left unterminated loses only its introducer (to
_CONTROL), so the text after it stays readable. A string sequence ends on
its line: one left open cannot hide the lines that follow up to some later
BEL."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but newline and tab (a carriage return too: \r\n ends a line
as well without it), DEL, C1 controls, and the bidirectional overrides and
isolates, with which a line can show its words in another order than they
were written."""


def inert(text: object) -> str:
    """`text` (made a string) with every escape sequence and control character
    removed but newline and tab, and lone surrogates (which no terminal
    encoding can print) replaced: printing it only ever prints it."""
    text = str(text)
    if text.isprintable():
        return text
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", valid_utf8(text)))


class InertFormatter(logging.Formatter):
    """A log formatter whose records are inert: a message may quote what an
    MCP server, a model or a page sent."""

    def format(self, record: logging.LogRecord) -> str:
        return inert(super().format(record))


def print_ending(headline: str, note: str | None, answer: str | None, out: TextIO) -> None:
    """How a run, a flow or a turn ended: its headline, then its note and its
    answer (texts of the run, so made inert)."""
    print(f"\n{headline}", file=out)
    if note:
        print(f"note: {inert(note)}", file=out)
    if answer:
        print(f"\n{inert(answer)}", file=out)
