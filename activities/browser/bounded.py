"""Every call into the browser has a deadline, and a page that stops
answering becomes an exception the session handles, never a stuck worker."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

GRACE_SECONDS = 5.0
"""Beyond a Playwright call's own timeout: time for Playwright to report it
before the page is declared unresponsive."""


class Unresponsive(Exception):
    """The browser or a page did not answer in time; the session is closed."""

    def __init__(self, message: str, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        """The page that hung, when the call was into one."""


async def bounded(call: Awaitable[T], seconds: float, what: str) -> T:
    """`call`'s result, or Unresponsive after `seconds`."""
    try:
        return await asyncio.wait_for(call, seconds)
    except asyncio.TimeoutError:
        raise Unresponsive(f"{what} got no answer within {seconds:g} s") from None


def short_error(error: BaseException) -> str:
    """Playwright's message without its call log: the first line, without the
    "Page.goto: " style prefix."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    head, colon, rest = text.partition(": ")
    if colon and "." in head and " " not in head:
        text = rest
    return text[:300]
