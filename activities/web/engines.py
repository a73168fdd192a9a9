"""The web_search engines: one function each, from a query to results.

Every engine's endpoint can be replaced (`[search.endpoints]`), which is how
tests point them at local fakes. An engine that is rate limited, answers with
an error or a challenge page, or finds nothing raises EngineFailure with a
short reason; the chain (search.py) then tries the next one.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, urljoin, urlsplit

from activities.web.access import Page, Refused, WebAccess, WebError
from activities.web.readable import Node, parse
from agent_model.tool_arguments import MAX_ARGUMENT_DEPTH, nesting_depth

DEFAULT_ENDPOINTS = {
    "duckduckgo": "https://html.duckduckgo.com/html/",
    "google": "https://www.google.com/search",
    "bing": "https://www.bing.com/search",
    "baidu": "https://www.baidu.com/s",
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
}
"""searxng has none: `[search.endpoints] searxng` is the instance's base URL."""

RESULT_PAGE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str = ""


@dataclass(frozen=True)
class Query:
    text: str
    num_results: int
    lang: str
    country: str


class EngineFailure(Exception):
    """This engine gave no results; the message says why, in a few words.
    `unreachable`: no answer came at all (no route, name or connection), as
    opposed to an answer that was an error, a challenge or nothing found."""

    def __init__(self, reason: str, unreachable: bool = False) -> None:
        super().__init__(reason)
        self.unreachable = unreachable


Engine = Callable[[WebAccess, Query, str, "str | None"], Awaitable[list[SearchResult]]]
"""(access, query, endpoint, api key) -> results."""


async def _get(access: WebAccess, url: str, **options) -> Page:  # noqa: ANN003
    try:
        page = await access.request(url, max_bytes=RESULT_PAGE_BYTES, **options)
    except Refused as e:
        raise EngineFailure(f"refused: {e}") from None
    except WebError as e:
        raise EngineFailure(str(e), unreachable=True) from None
    if page.status == 429:
        raise EngineFailure("rate limited (HTTP 429)")
    if page.status >= 400:
        raise EngineFailure(f"HTTP {page.status}")
    return page


def _json(page: Page) -> dict:
    text = page.text()
    if nesting_depth(text) > MAX_ARGUMENT_DEPTH:  # json.loads would recurse that deep
        raise EngineFailure("answered with JSON nested too deeply")
    try:
        data = json.loads(text)
    except ValueError:
        raise EngineFailure("answered with something that is not JSON") from None
    if not isinstance(data, dict):
        raise EngineFailure("answered with unexpected JSON")
    return data


def _nonempty(results: list[SearchResult], limit: int) -> list[SearchResult]:
    unique = list({r.url: r for r in results if r.url.startswith(("http://", "https://")) and r.title}.values())
    if not unique:
        raise EngineFailure("no results")
    return unique[:limit]


def _text(value: object) -> str:
    """A JSON field as plain text (Brave marks matches with <strong>)."""
    return " ".join(html.unescape(re.sub(r"<[^>]{0,200}>", "", str(value or ""))).split())


# --- HTML result pages (no key) ---------------------------------------------


async def duckduckgo(access: WebAccess, query: Query, endpoint: str, key: str | None) -> list[SearchResult]:
    page = await _get(access, endpoint, params={"q": query.text, "kl": f"{query.country}-{query.lang}".lower()})
    root = parse(page.text())
    if page.status == 202 or root.find(cls="anomaly-modal__title") is not None:
        raise EngineFailure(f"rate limited (HTTP {page.status}, a challenge page)")
    results = []
    for item in root.find_all(cls="result"):
        if "result--ad" in item.classes:
            continue
        link = item.find("a", cls="result__a")
        if link is None:
            continue
        snippet = item.find(cls="result__snippet")
        results.append(SearchResult(link.text(), _unwrap_duckduckgo(link.attrs.get("href", "")), snippet.text() if snippet else ""))
    return _nonempty(results, query.num_results)


def _unwrap_duckduckgo(href: str) -> str:
    return _redirect_target("https:" + href if href.startswith("//") else href, "/l/", ("uddg",))


def _redirect_target(url: str, redirect_path: str, keys: tuple[str, ...]) -> str:
    """Where an engine's redirect link (path starting with `redirect_path`)
    leads, as its query names it; any other link as it is."""
    parts = urlsplit(url)
    if parts.path.startswith(redirect_path):
        fields = parse_qs(parts.query)
        for key in keys:
            if fields.get(key):
                return fields[key][0]
    return url


async def google(access: WebAccess, query: Query, endpoint: str, key: str | None) -> list[SearchResult]:
    page = await _get(
        access, endpoint,
        params={"q": query.text, "num": query.num_results + 2, "hl": query.lang, "gl": query.country},
    )
    if "/sorry/" in urlsplit(page.url).path:
        raise EngineFailure("rate limited (sent to a captcha page)")
    root = parse(page.text())
    results = []
    for heading in root.find_all("h3"):
        link = _ancestor(heading, lambda n: n.tag == "a" and bool(n.attrs.get("href")))
        if link is None:
            continue
        url = _redirect_target(urljoin(page.url, link.attrs["href"]), "/url", ("q", "url"))
        block = _ancestor(link, lambda n: "g" in n.classes or "MjjYud" in n.classes) or link.parent
        snippet = ""
        if block is not None:
            found = block.find(where=lambda n: bool(n.classes & {"VwiC3b", "IsZvec", "st", "s3v9rd"}))
            snippet = found.text() if found else block.text().replace(heading.text(), "", 1).strip()
        results.append(SearchResult(heading.text(), url, snippet[:400]))
    return _nonempty(results, query.num_results)


async def bing(access: WebAccess, query: Query, endpoint: str, key: str | None) -> list[SearchResult]:
    page = await _get(
        access, endpoint,
        params={"q": query.text, "count": query.num_results, "setlang": query.lang, "cc": query.country},
    )
    root = parse(page.text())
    if root.find(where=lambda n: n.attrs.get("id") == "b_captcha") is not None or "/challenge" in urlsplit(page.url).path:
        raise EngineFailure("rate limited (a challenge page)")
    results = []
    for item in root.find_all("li", cls="b_algo"):
        heading = item.find("h2")
        link = heading.find("a") if heading else None
        if link is None:
            continue
        caption = item.find(cls="b_caption")
        paragraph = (caption or item).find("p")
        results.append(SearchResult(link.text(), _unwrap_bing(link.attrs.get("href", "")), paragraph.text(BING_DECORATIONS) if paragraph else ""))
    return _nonempty(results, query.num_results)


BING_DECORATIONS = frozenset({"algoSlug_icon", "news_dt"})
"""Parts of a Bing snippet that are not its text (a label, a date)."""


def _unwrap_bing(href: str) -> str:
    parts = urlsplit(href)
    if parts.path.startswith("/ck/a"):
        encoded = (parse_qs(parts.query).get("u") or [""])[0]
        if encoded.startswith("a1"):
            data = encoded[2:]
            try:
                return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                pass
    return href


async def baidu(access: WebAccess, query: Query, endpoint: str, key: str | None) -> list[SearchResult]:
    page = await _get(access, endpoint, params={"wd": query.text, "rn": query.num_results})
    host = urlsplit(page.url).hostname or ""
    text = page.text()
    if host.startswith("wappass.") or "安全验证" in text[:20000]:
        raise EngineFailure("rate limited (a security check page)")
    root = parse(text)
    results = []
    for item in root.find_all(where=lambda n: bool(n.classes & {"result", "c-container"}) and n.tag == "div"):
        heading = item.find("h3")
        link = heading.find("a") if heading else None
        if link is None:
            continue
        url = item.attrs.get("mu") or link.attrs.get("href", "")
        snippet = item.find(where=lambda n: any(c.startswith(("c-abstract", "content-right")) for c in n.classes))
        results.append(SearchResult(link.text(), url, snippet.text() if snippet else ""))
    return _nonempty(results, query.num_results)


def _ancestor(node: Node, match: Callable[[Node], bool], depth: int = 8) -> Node | None:
    current = node if match(node) else node.parent
    while current is not None and depth > 0:
        if match(current):
            return current
        current, depth = current.parent, depth - 1
    return None


# --- JSON APIs ----------------------------------------------------------------


async def searxng(access: WebAccess, query: Query, endpoint: str, key: str | None) -> list[SearchResult]:
    url = endpoint if endpoint.rstrip("/").endswith("/search") else endpoint.rstrip("/") + "/search"
    page = await _get(access, url, params={"q": query.text, "format": "json", "language": query.lang, "pageno": 1})
    items = _json(page).get("results") or []
    results = [SearchResult(_text(i.get("title")), str(i.get("url") or ""), _text(i.get("content"))) for i in items if isinstance(i, dict)]
    return _nonempty(results, query.num_results)


async def brave(access: WebAccess, query: Query, endpoint: str, key: str | None) -> list[SearchResult]:
    page = await _get(
        access, endpoint,
        params={"q": query.text, "count": query.num_results, "search_lang": query.lang, "country": query.country},
        headers={"Accept": "application/json"},
        credentials={"X-Subscription-Token": key or ""},
    )
    items = (_json(page).get("web") or {}).get("results") or []
    results = [SearchResult(_text(i.get("title")), str(i.get("url") or ""), _text(i.get("description"))) for i in items if isinstance(i, dict)]
    return _nonempty(results, query.num_results)


async def tavily(access: WebAccess, query: Query, endpoint: str, key: str | None) -> list[SearchResult]:
    page = await _get(
        access, endpoint, method="POST",
        headers={"Accept": "application/json"},
        credentials={"Authorization": f"Bearer {key or ''}"},
        json={"query": query.text, "max_results": query.num_results, "search_depth": "basic"},
    )
    items = _json(page).get("results") or []
    results = [SearchResult(_text(i.get("title")), str(i.get("url") or ""), _text(i.get("content"))) for i in items if isinstance(i, dict)]
    return _nonempty(results, query.num_results)


ENGINES: dict[str, Engine] = {
    "duckduckgo": duckduckgo, "searxng": searxng, "brave": brave, "tavily": tavily,
    "google": google, "bing": bing, "baidu": baidu,
}
