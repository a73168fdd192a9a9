"""What a run's desks (a question to the user, a call waiting for approval)
share: which reply may close the waiting item, and the bounded memory of the
items closed before, so a late reply is refused for its reason."""

from __future__ import annotations

CLOSED_KEPT = 100
"""Closed items remembered, newest first: a late reply to an older one is
refused as "not the one waiting", and the carried state stays bounded."""


def not_the_waiting_one(
    kind: str, asked: str, waiting: str | None, closed: dict[str, str], nothing_waiting: str
) -> str | None:
    """Why a reply to item `asked` cannot be taken when it is not the waiting
    one (None when it is): closed earlier, nothing waits, or another waits."""
    if waiting is not None and asked == waiting:
        return None
    why = closed.get(asked)
    if why is not None:
        return f"{kind} {asked} is closed: {why}"
    if waiting is None:
        return nothing_waiting
    return f"{kind} {asked} is not the one waiting ({kind} {waiting})"


def remember_closed(closed: dict[str, str], item: str, why: str) -> None:
    closed[item] = why
    for oldest in list(closed)[: max(0, len(closed) - CLOSED_KEPT)]:
        del closed[oldest]
