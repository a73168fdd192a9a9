"""This worker's browsers: one per run (the session key), launched at its first
action, closed at the run's end, when idle, or to make room for another.

act() runs one action at a time per session. With no live browser for the
key, it launches one and reopens the tabs the workflow last knew (`restore`).
A browser whose process died is noticed at the next action and relaunched
the same way; one that stops answering during an action is closed, and the
action fails with the state from before it (a tab whose page hung is
emptied, so the restore does not walk into it again). A tab whose renderer
crashed is reopened in place (crash_recovery.py).

Playwright is imported only when a browser is needed, so a worker without it
still starts (problem() says why browser_use is refused there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agent_model.browser import MAX_TABS, BrowserRequest, BrowserResult, BrowserState, BrowserTab
from activities.browser.launcher import Launcher
from activities.browser.screenshots import image_kind, save_screenshot
from activities.tools.sandbox import ToolSandbox
from activities.web.access import WebAccess
from activities.web.search import WebSearch
from activities.workspace import Workspace
from config.settings import BrowserSettings

if TYPE_CHECKING:  # imports Playwright, which a worker may lack
    from activities.browser.live_browser import LiveBrowser

log = logging.getLogger(__name__)

REAPER_MAX_INTERVAL = 60.0
"""The idle check runs at least this often (and at least four times per idle
period), so a browser outlives its idle time by at most that much."""
HUNG_TAB_TITLE = "(closed: the page stopped responding)"


class BrowserSessions:
    def __init__(
        self,
        settings: BrowserSettings,
        workspace: Workspace | None,
        sandbox: ToolSandbox,
        access: WebAccess,
        own_queue: str | None,
        search: WebSearch | None = None,
    ) -> None:
        self.settings, self.workspace, self.sandbox = settings, workspace, sandbox
        self.own_queue, self.search = own_queue, search
        self.launcher = Launcher(settings, sandbox, access)
        self._refusal: str | None = None
        self._live: dict[str, LiveBrowser] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        """Calls holding or awaiting each session's lock: such a session is busy."""
        self._playwright: Any = None
        self._playwright_lock: asyncio.Lock | None = None
        self._reaper: asyncio.Task | None = None
        self._closing: set[asyncio.Task] = set()
        if self.launcher.remote:
            log.warning("%s", self.launcher.describe())

    @classmethod
    def unavailable(cls, problem: str) -> BrowserSessions:
        """Sessions that refuse every action, saying `problem`."""
        sessions = cls(BrowserSettings(), None, ToolSandbox.refused(problem), WebAccess(), None)
        sessions._refusal = problem
        return sessions

    def problem(self) -> str | None:
        """Why browsers cannot start on this worker, else None (nothing is launched)."""
        return self._refusal or self.launcher.problem()

    def describe(self) -> str:
        return self.launcher.describe() if self._refusal is None else f"browser: UNAVAILABLE ({self._refusal})"

    @property
    def open_sessions(self) -> list[str]:
        return list(self._live)

    # ---- actions -------------------------------------------------------------------

    async def act(self, request: BrowserRequest) -> BrowserResult:
        problem = self.problem()
        if problem is not None:
            return BrowserResult(
                output=f"browser_use is disabled on this worker: {problem}. Use web_fetch or web_search instead.",
                error=True,
                state=request.restore.without_session(),
            )
        self._start_reaper()
        async with self._turn(request.session):
            return await self._act(request)

    @contextlib.asynccontextmanager
    async def _turn(self, key: str) -> AsyncIterator[None]:
        """One call at a time per session; a lock nobody holds or awaits is
        dropped with its session, so the worker keeps none per finished run."""
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with self._locks.setdefault(key, asyncio.Lock()):
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key]
                if key not in self._live:
                    self._locks.pop(key, None)

    async def _act(self, request: BrowserRequest) -> BrowserResult:
        from playwright.async_api import Error as PlaywrightError

        from activities.browser.bounded import Unresponsive, short_error

        key = request.session
        notes: list[str] = []
        browser = self._live.get(key)
        if browser is not None and not browser.connected:
            await self._discard(key)
            browser = None
            notes.append("The browser had stopped; it was started again and its tabs reopened.")
        restored = False
        if browser is None:
            try:
                browser, failures = await self._open(request)
            except Unresponsive as e:
                return self._hung_result(request.restore, notes, False, e)
            except (PlaywrightError, OSError) as e:
                log.warning("browser for %s did not start: %s", key, e)
                return BrowserResult(
                    output=f"The browser could not be started: {short_error(e)}",
                    error=True,
                    state=request.restore.without_session(),
                )
            restored = bool(request.restore.tabs)
            if failures:
                notes.append("Some tabs could not be reopened: " + "; ".join(failures))
        browser.begin_action()
        try:
            return await self._perform(browser, request, notes, restored)
        except Unresponsive as e:
            await self._discard(key)
            return self._hung_result(browser.last_state or request.restore, notes, restored, e)
        except PlaywrightError as e:
            crashed = not browser.connected
            await self._discard(key)
            what = "The browser stopped during the action" if crashed else "The action failed"
            return BrowserResult(
                output="\n".join([*notes, f"{what} ({short_error(e)}); the browser was closed and the "
                                  "next action reopens its tabs."]),
                error=True,
                state=(browser.last_state or request.restore).without_session(),
                restored=restored,
            )

    async def _open(self, request: BrowserRequest) -> tuple[LiveBrowser, list[str]]:
        """A new browser for the request's session, its tabs reopened."""
        await self._make_room()
        playwright = await self._ensure_playwright()
        browser = await self.launcher.launch(playwright)
        self._live[request.session] = browser
        try:
            failures = await browser.restore(request.restore) if request.restore.tabs else []
        except BaseException:  # unresponsive, or cancelled: no half-restored session stays
            await self._discard(request.session)
            raise
        return browser, failures

    async def _perform(self, browser: LiveBrowser, request: BrowserRequest, notes: list[str], restored: bool) -> BrowserResult:
        from playwright.async_api import Error as PlaywrightError

        from activities.browser.actions import ACTIONS, Outcome, Tools
        from activities.browser.bounded import short_error
        from activities.browser.crash_recovery import outcome_despite_crashes
        from activities.browser.observation import observation

        action = request.action
        tools = Tools(max_content_length=self.settings.max_content_length, search=self.search)

        async def attempt() -> Outcome:
            try:
                return await ACTIONS[action["action"]](browser, action, tools)
            except PlaywrightError as e:
                if not browser.connected:
                    raise
                return Outcome(f"{action['action']} failed: {short_error(e)}.", error=True)

        outcome = await outcome_despite_crashes(browser, action["action"], attempt, notes)
        if browser.refused_tabs:
            notes.append(f"The page tried to open {browser.refused_tabs} more tab(s); closed (at most {MAX_TABS} tabs).")
        left = await browser.leave_unshown_scheme()
        if left:
            notes.append(left)
        snapshot = await browser.snapshot()
        if browser.crashed:  # while it was being read: the model is shown the reopened page
            notes += await browser.reopen_crashed()
            snapshot = await browser.snapshot()
        state = await browser.state(snapshot, self.own_queue)
        screenshot = await self._screenshot(browser, request)
        browser.last_used = time.monotonic()
        return BrowserResult(
            output=observation(notes, outcome, snapshot, request.observe_limit),
            error=outcome.error,
            state=state,
            restored=restored,
            screenshot=screenshot,
            page_text=outcome.page_text,
        )

    async def _screenshot(self, browser: LiveBrowser, request: BrowserRequest) -> str | None:
        kind = image_kind(request.screenshot_name)
        if kind is None or self.workspace is None:
            log.warning("browser screenshot name %r refused", request.screenshot_name)
            return None
        image = await browser.screenshot(kind)
        if image is None:
            return None
        try:
            run_dir = self.workspace.run_dir(request.workspace)
        except Exception as e:  # noqa: BLE001 - a screenshot never fails the action
            log.warning("browser screenshot: no run directory %r (%s)", request.workspace, e)
            return None
        return await asyncio.to_thread(save_screenshot, run_dir, self.sandbox, request.screenshot_name, image)

    @staticmethod
    def _hung_result(before: BrowserState, notes: list[str], restored: bool, hung: Exception) -> BrowserResult:
        """A browser that stopped answering was closed: the workflow keeps the
        state from before the action, without the page that hung (so the
        restore does not walk into it again)."""
        url = getattr(hung, "url", None)
        tabs = [
            BrowserTab(url="about:blank", title=HUNG_TAB_TITLE) if url is not None and tab.url == url else tab
            for tab in before.tabs
        ]
        state = before.model_copy(update={"tabs": tabs}).without_session()
        line = (
            f"The browser stopped responding ({hung}), so it was closed. The next action reopens "
            "the tabs as they were before this one"
            + (", except the page that hung." if tabs != before.tabs else ".")
        )
        return BrowserResult(output="\n".join([*notes, line]), error=True, state=state, restored=restored)

    # ---- lifetime ----------------------------------------------------------------------

    async def _ensure_playwright(self) -> Any:
        if self._playwright_lock is None:
            self._playwright_lock = asyncio.Lock()
        async with self._playwright_lock:
            if self._playwright is None:
                from playwright.async_api import async_playwright

                from activities.browser.jail import sweep_stale_jails

                swept = await asyncio.to_thread(sweep_stale_jails)
                if swept:
                    log.info("browser: removed %d directories of browsers a killed worker left", swept)
                self._playwright = await async_playwright().start()
            return self._playwright

    async def _make_room(self) -> None:
        """Close the least recently used idle browsers until one more fits."""
        while len(self._live) >= self.settings.max_sessions:
            idle = [k for k in self._live if k not in self._users]
            if not idle:
                log.warning("browser: %d sessions are all busy; opening one more", len(self._live))
                return
            oldest = min(idle, key=lambda k: self._live[k].last_used)
            await self._discard(oldest)

    async def _discard(self, key: str) -> None:
        browser = self._live.pop(key, None)
        if key not in self._users:
            self._locks.pop(key, None)
        if browser is None:
            return
        # Shielded: a cancelled action must not leave a browser, its proxy
        # or its directory behind half-closed.
        closing = asyncio.ensure_future(browser.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        await asyncio.shield(closing)

    async def close(self, session: str) -> None:
        """Close the session's browser (the run ended); waits for its action."""
        if session not in self._live and session not in self._users:
            return
        async with self._turn(session):
            await self._discard(session)

    async def close_all(self) -> None:
        """Worker shutdown: every browser, the reaper and Playwright."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for key in list(self._live):
            with contextlib.suppress(Exception):
                await self._discard(key)
        await asyncio.gather(*self._closing, return_exceptions=True)
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    async def _reap(self) -> None:
        interval = min(self.settings.idle_seconds / 4, REAPER_MAX_INTERVAL)
        while True:
            await asyncio.sleep(interval)
            await self.close_idle()

    async def close_idle(self) -> None:
        """Close the browsers not used for [browser] idle_seconds (and not busy)."""
        now = time.monotonic()
        for key, browser in list(self._live.items()):
            if now - browser.last_used >= self.settings.idle_seconds and key not in self._users:
                log.info("browser for %s idle for %.0f s; closing it", key, now - browser.last_used)
                with contextlib.suppress(Exception):
                    await self._discard(key)
