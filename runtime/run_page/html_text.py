"""HTML from hostile text: everything a model, a tool, a page or a user wrote
is made inert (no terminal escapes, no controls) and HTML-escaped, in text and
in attributes alike, before it is put in a page. Nothing else builds markup."""

from __future__ import annotations

import html
from urllib.parse import quote

from runtime.terminal_text import inert

STATIC_VERSION = "1"
"""Bumped when static/ changes, so a browser does not keep an old script."""


def esc(text: object) -> str:
    """`text` safe in an HTML text node or a quoted attribute."""
    return html.escape(inert("" if text is None else text), quote=True)


def clipped(text: str, limit: int, where: str) -> str:
    return text if len(text) <= limit else f"{text[:limit]}\n… ({len(text) - limit} more characters; {where})"


def run_url(run_id: str, *rest: str) -> str:
    """The page of a run (ids may hold "/": each is one encoded segment)."""
    return "/".join(["", "run", quote(run_id, safe=""), *(quote(part, safe="") for part in rest)])


def page(title: str, body: str, *, data: str = "") -> str:
    """A whole page: the shell around `body` (already markup)."""
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · durable-manus</title>"
        f'<link rel="stylesheet" href="/static/page.css?v={STATIC_VERSION}">'
        f'<script src="/static/page.js?v={STATIC_VERSION}" defer></script>'
        f"</head><body{data}>"
        '<header><a class="home" href="/">durable-manus runs</a></header>'
        f"<main>{body}</main></body></html>\n"
    )


def hidden(name: str, value: object) -> str:
    return f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">'


def option(value: str, label: str, selected: bool = False) -> str:
    return f'<option value="{esc(value)}"{" selected" if selected else ""}>{esc(label)}</option>'
