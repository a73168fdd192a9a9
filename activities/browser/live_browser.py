"""One run's live browser on this worker: its context, its tabs in order, the
active tab, and what the workflow is told about them.

Pages may open tabs themselves (target=_blank, window.open); they join the
list up to MAX_TABS and are closed beyond it. Dialogs are answered at once
(beforeunload by leaving, the others by dismissing) so no page can hold an
action. Every call into a page is bounded; one that gets no answer raises
Unresponsive, naming the page, and the session is then closed.

A tab whose renderer crashed answers nothing any more: reopen_crashed()
puts a new tab in its place at its last URL. Tabs opened that way, or by a
restore, carry no element indexes until the page is read (ensure_indexed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from playwright.async_api import Browser, BrowserContext, Dialog, Page
from playwright.async_api import Error as PlaywrightError

from agent_model.browser import MAX_TABS, MAX_TITLE_CHARS, BrowserState, BrowserTab
from activities.browser.bounded import GRACE_SECONDS, Unresponsive, bounded, short_error
from activities.browser.destination_check import RecentRefusals
from activities.browser.jail import BrowserJail
from activities.browser.page_map import COLLECT, COLLECT_ARGUMENTS, PageMap
from activities.browser.screenshots import ImageKind

log = logging.getLogger(__name__)

T = TypeVar("T")

PROBE_SECONDS = 10.0
"""Longest wait for reading a page's elements or scrolling it: quick on any
page that still runs its event loop, even a huge one."""
TITLE_SECONDS = 2.0
"""Wait for a background tab's title; past it the title is left empty."""
CLOSE_SECONDS = 10.0
"""A browser that has not closed by then is killed."""
JPEG_QUALITY = 70
WEB_SCHEMES = ("http", "https")
SHOWN_SCHEMES = frozenset({"http", "https", "about", "blob", "chrome-error"})
"""Where a tab may stay after an action; anything else (file:, chrome:) is left."""


def is_web_url(url: str) -> bool:
    return urlsplit(url).scheme.lower() in WEB_SCHEMES


class LiveBrowser:
    """A launched browser with one context; the tabs are that context's pages."""

    def __init__(
        self, browser: Browser, context: BrowserContext, *, timeout: float,
        jail: BrowserJail | None = None, refusals: RecentRefusals | None = None,
    ) -> None:
        self.browser, self.context, self.jail = browser, context, jail
        self.timeout = timeout
        self.refusals = refusals or RecentRefusals()
        self.tabs: list[Page] = []
        self.active = 0
        self.opened: list[Page] = []
        """Tabs opened by pages since the last action began."""
        self.refused_tabs = 0
        """Tabs pages tried to open beyond MAX_TABS since the last action began."""
        self.last_used = time.monotonic()
        self.last_state: BrowserState | None = None
        self._titles: dict[Page, tuple[str, str]] = {}
        self._closing: set[asyncio.Task] = set()
        self._crashed: set[Page] = set()
        self._reopened_at: dict[Page, str] = {}
        """Tabs put in place of crashed ones, and the URL they reopened."""
        self._unindexed: set[Page] = set()
        """Tabs reopened (restore, crash) whose page has not been read: no element has its index yet."""
        context.on("page", self._adopt)

    # ---- tabs -------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.browser.is_connected()

    @property
    def page(self) -> Page | None:
        return self.tabs[self.active] if 0 <= self.active < len(self.tabs) else None

    @property
    def probe_seconds(self) -> float:
        return min(self.timeout, PROBE_SECONDS)

    @property
    def call_seconds(self) -> float:
        """Bound of a Playwright call that has its own timeout of self.timeout."""
        return self.timeout + GRACE_SECONDS

    @property
    def timeout_ms(self) -> float:
        return self.timeout * 1000

    def _adopt(self, page: Page) -> None:
        if page in self.tabs:
            return
        if len(self.tabs) >= MAX_TABS:
            self.refused_tabs += 1
            self._close_later(page)
            return
        page.on("dialog", _answer_dialog)
        page.on("close", self.forget)
        page.on("crash", self._crashed_renderer)
        self.tabs.append(page)
        self.opened.append(page)

    def _crashed_renderer(self, page: Page) -> None:
        self._crashed.add(page)

    def _close_later(self, page: Page) -> None:
        closing = asyncio.ensure_future(_close_quietly(page))
        self._closing.add(closing)  # held until done: the loop keeps only weak references
        closing.add_done_callback(self._closing.discard)

    def forget(self, page: Page) -> None:
        if page not in self.tabs:
            return
        index = self.tabs.index(page)
        self.tabs.pop(index)
        self._titles.pop(page, None)
        self._crashed.discard(page)
        self._reopened_at.pop(page, None)
        self._unindexed.discard(page)
        if page in self.opened:
            self.opened.remove(page)
        if index < self.active or self.active >= len(self.tabs):
            self.active = max(0, self.active - 1)

    def begin_action(self) -> None:
        self.opened.clear()
        self.refused_tabs = 0
        self.last_used = time.monotonic()

    async def new_tab(self) -> Page:
        """A new blank tab, made the active one."""
        page = await bounded(self.context.new_page(), self.call_seconds, "opening a tab")
        self._adopt(page)
        if page in self.opened:
            self.opened.remove(page)
        if page not in self.tabs:
            raise PlaywrightError(f"at most {MAX_TABS} tabs can be open")
        self.active = self.tabs.index(page)
        return page

    async def activate(self, index: int) -> None:
        self.active = index
        page = self.tabs[index]
        with contextlib.suppress(PlaywrightError):
            await self.on_page(page, page.bring_to_front(), self.call_seconds, "showing the tab")

    async def on_page(self, page: Page, call: Awaitable[T], seconds: float, what: str) -> T:
        """`call` (a call into `page`), bounded; Unresponsive names the page."""
        try:
            return await bounded(call, seconds, what)
        except Unresponsive as hung:
            hung.url = page.url
            raise

    # ---- restore ----------------------------------------------------------------

    async def restore(self, state: BrowserState) -> list[str]:
        """Reopen the tabs of `state` at their URLs; returns the failures."""
        failures: list[str] = []
        for tab in state.tabs[:MAX_TABS]:
            page = await self.new_tab()
            self._unindexed.add(page)
            if not is_web_url(tab.url):
                continue  # about:blank, or a page only a navigation of its own could reach
            try:
                await self.on_page(
                    page, page.goto(tab.url, wait_until="domcontentloaded", timeout=self.timeout_ms),
                    self.call_seconds, f"reopening {tab.url}",
                )
            except PlaywrightError as e:
                failures.append(f"{tab.url}: {short_error(e)}")
        if self.tabs:
            await self.activate(min(max(state.active, 0), len(self.tabs) - 1))
            if state.scroll_y > 0 and self.page is not None:
                await self.scroll_to(self.page, state.scroll_y)
        return failures

    # ---- crashed renderers ----------------------------------------------------------

    @property
    def crashed(self) -> bool:
        """Some tab's renderer crashed: that tab answers nothing until reopened."""
        return any(page in self._crashed for page in self.tabs)

    async def reopen_crashed(self) -> list[str]:
        """Put a new tab in place of each crashed one, at the URL it showed;
        left empty (about:blank) if that page crashes again once reopened.
        Returns a note per tab."""
        notes = []
        for page in [p for p in self.tabs if p in self._crashed]:
            index, url = self.tabs.index(page), page.url
            again = self._reopened_at.get(page) == url
            fresh = await self._replace(page)
            line = f"The page in tab [{index}] crashed (its renderer stopped)"
            if again:
                notes.append(f"{line} again after it was reopened, so the tab was left empty.")
            elif not is_web_url(url):
                notes.append(f"{line}; the tab was reopened empty.")
            else:
                notes.append(await self._reopen(fresh, url, line))
        return notes

    async def _reopen(self, page: Page, url: str, line: str) -> str:
        self._reopened_at[page] = url
        try:
            await self.on_page(
                page, page.goto(url, wait_until="domcontentloaded", timeout=self.timeout_ms),
                self.call_seconds, f"reopening {url[:200]}",
            )
        except PlaywrightError as e:
            if page not in self._crashed:
                return f"{line}; reopening {url[:200]} failed: {short_error(e)}."
            await self._replace(page)
            return f"{line}; reopening {url[:200]} crashed it again, so the tab was left empty."
        return f"{line}; it was reopened at {url[:200]}."

    async def _replace(self, crashed: Page) -> Page:
        """A new blank tab at the crashed tab's place (and active if it was)."""
        index, active = self.tabs.index(crashed), self.page
        self.forget(crashed)
        self._close_later(crashed)
        page = await self.new_tab()
        self.tabs.insert(index, self.tabs.pop(self.tabs.index(page)))
        self.active = self.tabs.index(page if active is None or active is crashed else active)
        self._unindexed.add(page)
        return page

    async def ensure_indexed(self, page: Page) -> None:
        """Index a reopened page the way the observation does, so that [n] is
        the element the model was shown as [n]."""
        if page in self._unindexed:
            await self.snapshot_of(page)

    async def scroll_to(self, page: Page, y: int) -> None:
        with contextlib.suppress(PlaywrightError):
            await self.on_page(
                page, page.evaluate("(y) => window.scrollTo({top: y, behavior: 'instant'})", y),
                self.probe_seconds, "scrolling",
            )

    # ---- what the workflow and the model see --------------------------------------

    async def leave_unshown_scheme(self) -> str | None:
        """A tab that ended on file:, chrome: or the like is emptied; returns a note."""
        page = self.page
        if page is None or urlsplit(page.url).scheme.lower() in SHOWN_SCHEMES:
            return None
        left = page.url
        with contextlib.suppress(PlaywrightError):
            await self.on_page(page, page.goto("about:blank", timeout=self.timeout_ms), self.call_seconds, "leaving the page")
        return f"The tab had gone to {left[:200]}; only http and https pages are shown, so it was emptied."

    async def snapshot(self) -> PageMap | None:
        """The active page's elements (indexed afresh) and scroll position."""
        page = self.page
        return None if page is None else await self.snapshot_of(page)

    async def snapshot_of(self, page: Page) -> PageMap:
        for attempt in (1, 2):
            try:
                found: dict[str, Any] = await self.on_page(
                    page, page.evaluate(COLLECT, COLLECT_ARGUMENTS), self.probe_seconds, f"reading {page.url[:200]}"
                )
                break
            except PlaywrightError:
                if attempt == 2:  # e.g. navigating all the time: the page without elements
                    return PageMap(url=page.url, title=await self._title(page))
                # A navigation replaced the document meanwhile: read the new one.
                with contextlib.suppress(PlaywrightError):
                    await self.on_page(
                        page, page.wait_for_load_state("domcontentloaded", timeout=self.timeout_ms),
                        self.call_seconds, "waiting for the page",
                    )
        snapshot = PageMap.from_script(page.url, found)
        self._titles[page] = (page.url, snapshot.title)
        self._unindexed.discard(page)
        return snapshot

    async def state(self, snapshot: PageMap | None, own_queue: str | None) -> BrowserState:
        tabs = [BrowserTab(url=page.url, title=(await self._title(page))[:MAX_TITLE_CHARS]) for page in self.tabs]
        state = BrowserState(tabs=tabs, active=self.active if tabs else 0, session_queue=own_queue)
        if snapshot is not None:
            state.scroll_y, state.viewport_height, state.page_height = (
                snapshot.scroll_y, snapshot.viewport_height, snapshot.page_height,
            )
        self.last_state = state
        return state

    async def _title(self, page: Page) -> str:
        known = self._titles.get(page)
        if known is not None and known[0] == page.url:
            return known[1]
        try:
            title = await bounded(page.title(), min(self.timeout, TITLE_SECONDS), "reading a title")
        except (Unresponsive, PlaywrightError):
            return known[1] if known else ""
        self._titles[page] = (page.url, title)
        return title

    async def screenshot(self, kind: ImageKind) -> bytes | None:
        """The active tab's viewport as `kind`, or None."""
        page = self.page
        if page is None:
            return None
        quality = JPEG_QUALITY if kind == "jpeg" else None  # png has no quality
        try:
            return await bounded(
                page.screenshot(type=kind, timeout=self.timeout_ms, quality=quality), self.call_seconds, "the screenshot"
            )
        except (Unresponsive, PlaywrightError) as e:
            log.info("browser screenshot failed: %s", short_error(e))
            return None

    # ---- the end ------------------------------------------------------------------

    async def close(self) -> None:
        """Close the browser; kill it if it does not close in time."""
        try:
            if self.jail is None:  # an operator's browser: only our context goes
                with contextlib.suppress(PlaywrightError, Unresponsive):
                    await bounded(self.context.close(), CLOSE_SECONDS, "closing the context")
            await bounded(self.browser.close(), CLOSE_SECONDS, "closing the browser")
        except (PlaywrightError, Unresponsive) as e:
            log.info("browser did not close (%s); killing it", short_error(e))
            if self.jail is not None:
                self.jail.kill()
        finally:
            if self.jail is not None:
                await self.jail.close()


async def _answer_dialog(dialog: Dialog) -> None:
    """beforeunload: leave the page (a page must not trap the agent); alert,
    confirm, prompt: dismiss."""
    with contextlib.suppress(PlaywrightError):
        if dialog.type == "beforeunload":
            await dialog.accept()
        else:
            await dialog.dismiss()


async def _close_quietly(page: Page) -> None:
    with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
        await asyncio.wait_for(page.close(), CLOSE_SECONDS)
