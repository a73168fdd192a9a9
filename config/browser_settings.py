"""`[browser]`: the browser_use tool."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from config.validation import table, validated


class BrowserProxy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str
    username: str | None = None
    password: SecretStr | None = None


class BrowserSettings(BaseModel):
    """`[browser]`: the browser_use tool (OpenManus's keys, plus the worker's bounds).

    The browser is Chromium driven by Playwright, one per run on a worker, in
    the tool sandbox (activities/browser/): its only way out is a proxy of the
    worker's that applies the [web] rules."""

    model_config = ConfigDict(extra="forbid")

    headless: bool = True
    """Always headless on a worker (there is no display in the sandbox);
    false is accepted and noted."""
    disable_security: bool = True
    """OpenManus's key, accepted and not used: page security is never turned off here."""
    extra_chromium_args: list[str] = Field(default_factory=list)
    chrome_instance_path: str | None = None
    """The Chromium executable; default: Debian's (/usr/lib/chromium/chromium) or
    the first chromium/chrome on PATH."""
    wss_url: str | None = None
    cdp_url: str | None = None
    """An operator's running browser to connect to instead (not confined, and
    its traffic is not checked: the operator's choice, logged at start)."""
    proxy: BrowserProxy | None = None
    max_content_length: int = Field(20000, ge=200, le=200000)
    """Characters of page text extract_content reads."""
    idle_seconds: float = Field(600.0, ge=10, le=86400, allow_inf_nan=False)
    """A run's browser not used for this long is closed (its next action
    reopens the tabs the run last had)."""
    max_sessions: int = Field(4, ge=1, le=64)
    """Browsers one worker keeps open at once (one per run); the least
    recently used is closed to make room."""
    navigation_timeout: float = Field(30.0, gt=0, le=120, allow_inf_nan=False)
    """Seconds one navigation or action may take."""



def parse_browser(source: str, raw: Any, notes: list[str]) -> BrowserSettings:
    raw = table(source, "[browser]", raw)
    proxy = raw.get("proxy")
    if isinstance(proxy, dict) and not proxy.get("server"):
        # As in OpenManus: a proxy table without a server is no proxy.
        raw = {k: v for k, v in raw.items() if k != "proxy"}
        notes.append("[browser.proxy] is ignored: it has no server")
    return validated(BrowserSettings, source, "[browser]", raw)
