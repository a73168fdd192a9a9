"""Starting one run's browser: Chromium in its jail (activities/browser/jail.py),
or a context in the operator's own browser when [browser] cdp_url / wss_url
names one."""

from __future__ import annotations

import importlib.util
import logging
from typing import TYPE_CHECKING, Any

from activities.browser.destination_check import RecentRefusals, web_rules
from activities.browser.jail import BrowserJail, find_chromium
from activities.tools.sandbox import ToolSandbox
from activities.web.access import WebAccess
from config.settings import BrowserSettings

if TYPE_CHECKING:  # imports Playwright, which a worker may lack
    from activities.browser.live_browser import LiveBrowser

log = logging.getLogger(__name__)

LAUNCH_SECONDS = 30.0
"""Chromium starts in about half a second; a loaded machine may take many times that."""
VIEWPORT = {"width": 1280, "height": 800}
CONTEXT_OPTIONS = {
    "accept_downloads": False,  # a page cannot drop files anywhere
    "service_workers": "block",  # no script outlives its page or answers for the network
    "viewport": VIEWPORT,
}
IGNORED_PLAYWRIGHT_ARGS = ["--disable-popup-blocking"]
"""Playwright turns Chromium's popup blocker off; pages here get it back."""


class Launcher:
    def __init__(self, settings: BrowserSettings, sandbox: ToolSandbox, access: WebAccess) -> None:
        self.settings, self.sandbox, self.access = settings, sandbox, access
        self.remote = settings.cdp_url or settings.wss_url

    def problem(self) -> str | None:
        """Why no browser can start here; cheap (nothing is launched)."""
        if importlib.util.find_spec("playwright") is None:
            return "the Python package playwright is not installed"
        if self.remote:
            return None
        if find_chromium(self.settings.chrome_instance_path) is None:
            where = self.settings.chrome_instance_path or "/usr/lib/chromium/chromium or on PATH"
            return f"no Chromium executable ({where}); install the Debian package chromium"
        if self.sandbox.mode == "refused":
            return f"the tool sandbox cannot start ({self.sandbox.problem})"
        return None

    def describe(self) -> str:
        if self.remote:
            return (
                f"browser: the operator's browser at {self.remote} (NOT confined, and its traffic is "
                "not checked against [web] rules)"
            )
        problem = self.problem()
        if problem:
            return f"browser: UNAVAILABLE ({problem}); browser_use is refused"
        confinement = (
            "in the tool sandbox" if self.sandbox.mode == "bwrap"
            else "UNCONFINED ([tools] sandbox = \"none\")"
        )
        notes = []
        if not self.settings.headless:
            notes.append("headless = false is ignored: a worker has no display")
        if self.settings.proxy is not None:
            notes.append("[browser] proxy is not used: the browser's only way out is the worker's checking proxy")
        extra = f"; {'; '.join(notes)}" if notes else ""
        return (
            f"browser: Chromium {confinement}, its traffic through a proxy applying the [web] rules; "
            f"at most {self.settings.max_sessions} open at once{extra}"
        )

    async def launch(self, playwright: Any) -> LiveBrowser:
        from activities.browser.live_browser import LiveBrowser

        timeout = self.settings.navigation_timeout
        if self.remote:
            return LiveBrowser(*await self._connect(playwright), timeout=timeout)
        refusals = RecentRefusals()
        chromium = find_chromium(self.settings.chrome_instance_path)
        assert chromium is not None, "problem() is checked before launching"
        jail = BrowserJail(self.sandbox, chromium, web_rules(self.access, refusals), self.settings.extra_chromium_args)
        plan = await jail.open()
        browser = None
        try:
            browser = await playwright.chromium.launch(
                executable_path=plan.executable,
                args=plan.args,
                env=plan.env,
                headless=True,
                ignore_default_args=IGNORED_PLAYWRIGHT_ARGS,
                timeout=LAUNCH_SECONDS * 1000,
                # The worker's own shutdown closes the browsers, after its activities finished.
                handle_sigint=False,
                handle_sigterm=False,
                handle_sighup=False,
            )
            context = await browser.new_context(**CONTEXT_OPTIONS)
        except BaseException:
            jail.kill()
            await jail.close()
            raise
        return LiveBrowser(browser, context, timeout=timeout, jail=jail, refusals=refusals)

    async def _connect(self, playwright: Any) -> tuple[Any, Any]:
        if self.settings.cdp_url:
            browser = await playwright.chromium.connect_over_cdp(self.settings.cdp_url, timeout=LAUNCH_SECONDS * 1000)
        else:
            browser = await playwright.chromium.connect(self.settings.wss_url, timeout=LAUNCH_SECONDS * 1000)
        options = dict(CONTEXT_OPTIONS)
        if self.settings.proxy is not None:
            proxy = self.settings.proxy
            options["proxy"] = {
                "server": proxy.server,
                **({"username": proxy.username} if proxy.username else {}),
                **({"password": proxy.password.get_secret_value()} if proxy.password else {}),
            }
        try:
            context = await browser.new_context(**options)
        except BaseException:
            await browser.close()
            raise
        return browser, context
