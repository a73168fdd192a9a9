"""The text the model gets after a browser action: what the action did, in
our words, then the page -- marked as untrusted data -- with its text and its
interactive elements by index."""

from __future__ import annotations

from activities.browser.actions import Outcome
from activities.browser.page_map import PageMap
from activities.web.fetch import untrusted_header


def observation(notes: list[str], outcome: Outcome, snapshot: PageMap | None, limit: int) -> str:
    lines = [*notes, outcome.line, ""]
    if snapshot is None:
        lines.append("No tab is open.")
        return within("\n".join(lines), limit)
    below = max(0, snapshot.page_height - snapshot.scroll_y - snapshot.viewport_height)
    lines += [
        untrusted_header(snapshot.url),
        f"Title: {snapshot.title[:200] or '(none)'}",
        f"Scroll: {snapshot.scroll_y} px above the view, {below} px below it",
    ]
    if outcome.details:
        lines += ["", *outcome.details]
    page = snapshot.lines()
    lines += ["", "The page (its text, and interactive elements as [index]<tag>text</tag>):" if page else "The page shows nothing."]
    lines += page
    return within("\n".join(lines), limit)


def within(text: str, limit: int) -> str:
    """`text`, cut so that it and the note saying so fit in `limit` characters."""
    if len(text) <= limit:
        return text
    note = f"\n[... cut at {limit} of {len(text)} characters]"
    return text[: max(0, limit - len(note))] + note
