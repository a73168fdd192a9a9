"""`[search]` (web_search) and `[web]` (what the web tools may reach)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

SEARCH_ENGINES = ("duckduckgo", "searxng", "brave", "tavily", "google", "bing", "baidu")
"""Every web_search engine (activities/web/engines.py)."""
KEYED_ENGINES = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
"""Engines that need an API key, and the variable that may hold it."""


def allow_entries(field: str, entries: Any) -> list[str]:
    """An allow list ([web] allow, [tools] egress_allow): origins, or networks with ports."""
    from activities.tools.egress_rules import ENTRY_FORMS, parse_allow_entry  # pure: the address rules

    if not isinstance(entries, (list, tuple)) or not all(isinstance(e, str) and e for e in entries):
        raise ValueError(f"{field} must be a list of strings, each {ENTRY_FORMS}")
    for entry in entries:
        try:
            parse_allow_entry(entry)
        except ValueError as e:
            raise ValueError(f"{field}: {e}") from None
    return list(entries)


class SearchSettings(BaseModel):
    """`[search]`: the web_search tool (OpenManus's keys, plus endpoints and keys)."""

    model_config = ConfigDict(extra="forbid")

    engine: str = "duckduckgo"
    """The primary engine."""
    fallback_engines: list[str] = Field(default_factory=lambda: ["bing", "google"])
    """Tried in order when the one before failed (rate limit, error, no results)."""
    retry_delay: float = Field(60.0, ge=0, le=120, allow_inf_nan=False)
    """Seconds to wait after every engine failed, before the whole chain again."""
    max_retries: int = Field(3, ge=0, le=5)
    """How many times the whole chain is tried again after every engine failed."""
    lang: str = "en"
    country: str = "us"
    endpoints: dict[str, str] = Field(default_factory=dict)
    """`[search.endpoints]`: engine -> URL replacing its public endpoint
    (searxng has none: its instance's base URL must be given)."""
    brave_api_key: SecretStr | None = None
    tavily_api_key: SecretStr | None = None
    """A key that is missing is reported at worker start (Settings.require_api_keys)."""

    @field_validator("engine", "fallback_engines", mode="before")
    @classmethod
    def _plain_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip().lower()
        if isinstance(value, list):
            return [n.strip().lower() if isinstance(n, str) else n for n in value]
        return value

    @model_validator(mode="after")
    def _known_engines(self) -> SearchSettings:
        known = ", ".join(SEARCH_ENGINES)
        for engine in self.chain:
            if engine not in SEARCH_ENGINES:
                raise ValueError(f"unknown engine {engine!r} (known: {known})")
        for engine, url in self.endpoints.items():
            if engine not in SEARCH_ENGINES:
                raise ValueError(f"[search.endpoints] unknown engine {engine!r} (known: {known})")
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"[search.endpoints] {engine} must be an http(s) URL, not {url!r}")
        if "searxng" in self.chain and "searxng" not in self.endpoints:
            raise ValueError(
                "searxng is in the engine chain but [search.endpoints] searxng (the instance's URL) is not set"
            )
        return self

    @property
    def chain(self) -> list[str]:
        return list(dict.fromkeys([self.engine, *self.fallback_engines]))

    def api_key(self, engine: str) -> str | None:
        key = getattr(self, f"{engine}_api_key", None)
        return key.get_secret_value() or None if key is not None else None


class WebSettings(BaseModel):
    """`[web]`: what web_search and web_fetch may reach and how much they read."""

    model_config = ConfigDict(extra="forbid")

    allow: tuple[str, ...] = ()
    """Origins reached although they are not public (loopback, private,
    link-local, CGNAT, this host's addresses): "http://127.0.0.1:8000", or a
    network and its ports, "10.0.0.0/8 ports 80,443"
    (activities/tools/egress_rules.py). The control plane never is."""
    control_plane: tuple[str, ...] = ()
    """More endpoints ("host:port" or URLs) that no web path and no tool code
    may reach, whatever `allow` says: a Temporal Web UI or HTTP API elsewhere,
    an internal admin API. The LLM, Temporal, MCP and metrics endpoints the
    worker knows of are refused without being listed."""
    timeout: float = Field(20.0, gt=0, le=60, allow_inf_nan=False)
    """Seconds for one HTTP exchange, redirects included."""
    max_bytes: int = Field(2 * 1024 * 1024, ge=1024, le=20 * 1024 * 1024)
    """Bytes of one response body read; the rest is not read."""
    max_chars: int = Field(20000, ge=200, le=200000)
    """Characters of text web_fetch returns for one page."""

    @field_validator("allow")
    @classmethod
    def _allow_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(allow_entries("allow", value))

    @field_validator("control_plane")
    @classmethod
    def _endpoints(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from activities.tools.control_plane import Endpoint  # pure: the address rules

        for entry in value:
            try:
                Endpoint.parse(entry, "")
            except ValueError as e:
                raise ValueError(f"control_plane: {e}") from None
        return value
