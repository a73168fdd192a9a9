"""The browser_use actions (OpenManus's set), each on a LiveBrowser.

An action returns an Outcome: one line in our words saying what it did or
why it failed, and any page data it produced (dropdown options, search
results), which the observation shows under the untrusted-data header.
Element indices are those of the last observation (page_map.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from agent_model.browser import MAX_TABS
from activities.browser.bounded import short_error
from activities.browser.live_browser import LiveBrowser, is_web_url
from activities.browser.page_map import selector
from activities.web.engines import ENGINES, EngineFailure, Query, SearchResult
from activities.web.fetch import clip_text
from activities.web.readable import readable_text
from activities.web.search import WebSearch

SETTLE_SECONDS = 0.25
"""A click's or a key's navigation or new tab starts a moment after it."""
NEW_TAB_WAIT_SECONDS = 3.0
"""How long a click on a link that targets a new tab waits for the tab to
appear: the settle time above is enough on an idle machine, not on a busy one."""
DEFAULT_WAIT_SECONDS = 3
MAX_OPTIONS = 100
"""Options of one <select> listed."""
MAX_HTML_CHARS = 5_000_000
"""Characters of a page's HTML that extract_content parses (in a thread; the
worker's CPU is shared with every other run)."""
SEARCH_RESULTS = 5
"""Results web_search asks for and lists; the first is opened."""
SHOWN_TEXT = 100
"""Characters of the model's own text repeated in a result line."""


@dataclass
class Outcome:
    line: str
    error: bool = False
    details: list[str] = field(default_factory=list)
    """Page data the action produced (shown under the untrusted-data header)."""
    page_text: str | None = None


@dataclass(frozen=True)
class Tools:
    """What actions need besides the browser."""

    max_content_length: int
    search: WebSearch | None = None


Action = Callable[[LiveBrowser, dict[str, Any], Tools], Awaitable[Outcome]]

NO_TAB = Outcome("No tab is open; open a page with go_to_url or open_tab first.", error=True)


def _shown(text: str) -> str:
    return repr(text if len(text) <= SHOWN_TEXT else text[:SHOWN_TEXT] + "...")


# ---- navigation -------------------------------------------------------------------


async def navigate(browser: LiveBrowser, page: Page, url: str) -> Outcome:
    if not is_web_url(url):
        return Outcome(f"Refused to open {url[:200]}: only http and https URLs are opened.", error=True)
    mark = browser.refusals.count
    try:
        response = await browser.on_page(
            page, page.goto(url, wait_until="domcontentloaded", timeout=browser.timeout_ms),
            browser.call_seconds, f"opening {url[:200]}",
        )
    except PlaywrightTimeout:
        return Outcome(f"{url} did not finish loading within {browser.timeout:g} s; the page may be incomplete.", error=True)
    except PlaywrightError as e:
        return Outcome(_failure(browser, url, mark, e), error=True)
    refusal = browser.refusals.reason_for(url, mark)
    if refusal:
        return Outcome(f"Could not open {url}: the browser's proxy refused it ({refusal}).", error=True)
    if response is not None and response.status >= 400:
        return Outcome(f"Opened {page.url} (HTTP {response.status}: the server reports an error).", error=True)
    return Outcome(f"Opened {page.url}.")


def _failure(browser: LiveBrowser, url: str, mark: int, error: PlaywrightError) -> str:
    refusal = browser.refusals.reason_for(url, mark)
    if refusal:
        return f"Could not open {url}: the browser's proxy refused it ({refusal})."
    return f"Could not open {url}: {short_error(error)}."


async def settle(browser: LiveBrowser, page: Page) -> str | None:
    """Wait for what an interaction started; returns a note if it is still loading."""
    await asyncio.sleep(SETTLE_SECONDS)
    try:
        await browser.on_page(
            page, page.wait_for_load_state("domcontentloaded", timeout=browser.timeout_ms),
            browser.call_seconds, "waiting for the page",
        )
    except PlaywrightTimeout:
        return f"the page was still loading after {browser.timeout:g} s"
    except PlaywrightError:
        pass  # the page closed itself
    return None


async def after_interaction(browser: LiveBrowser, page: Page, before: str, line: str) -> Outcome:
    """`line`, completed with where the interaction led from URL `before`: a
    new tab, another page."""
    still_loading = await settle(browser, page)
    if browser.opened:
        newest = browser.opened[-1]
        if newest in browser.tabs:
            await browser.activate(browser.tabs.index(newest))
            await settle(browser, newest)
            line += f"; it opened a new tab [{browser.active}] ({newest.url[:200]}), now the active tab"
    elif page.url != before:
        line += f"; the tab is now at {page.url[:200]}"
    if still_loading:
        line += f" ({still_loading})"
    return Outcome(line + ".")


async def go_to_url(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page or await browser.new_tab()
    return await navigate(browser, page, action["url"])


async def go_back(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    before = page.url
    try:
        response = await browser.on_page(
            page, page.go_back(wait_until="domcontentloaded", timeout=browser.timeout_ms),
            browser.call_seconds, "going back",
        )
    except PlaywrightTimeout:
        return Outcome(f"The previous page did not finish loading within {browser.timeout:g} s.", error=True)
    except PlaywrightError as e:
        return Outcome(f"Could not go back: {short_error(e)}.", error=True)
    if response is None and page.url == before:
        return Outcome("There is no previous page in this tab.", error=True)
    return Outcome(f"Went back to {page.url}.")


async def web_search(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    if tools.search is None:
        return Outcome("web_search is not available in the browser on this worker; use go_to_url.", error=True)
    found = await first_results(tools.search, action["query"])
    if isinstance(found, str):
        return Outcome(f"The search for {_shown(action['query'])} failed: {found}.", error=True)
    engine, results = found
    page = browser.page or await browser.new_tab()
    opened = await navigate(browser, page, results[0].url)
    listing = [f"Search results from {engine}:"] + [
        f"{n}. {r.title[:200]} - {r.url[:300]}" for n, r in enumerate(results, start=1)
    ]
    line = f"Searched {engine} for {_shown(action['query'])} and opened the first result. {opened.line}"
    return Outcome(line, error=opened.error, details=listing)


async def first_results(search: WebSearch, text: str) -> tuple[str, list[SearchResult]] | str:
    """The first engine of the chain with results, or why every one failed.
    One round only: the action cannot wait out the chain's retry delays."""
    try:
        return await asyncio.wait_for(_first_results(search, text), search.budget_seconds)
    except asyncio.TimeoutError:
        return f"no engine answered within {search.budget_seconds:g} s"


async def _first_results(search: WebSearch, text: str) -> tuple[str, list[SearchResult]] | str:
    settings = search.settings
    query = Query(text, SEARCH_RESULTS, settings.lang, settings.country)
    failures = []
    for engine in settings.chain:
        try:
            results = await ENGINES[engine](search.access, query, search.endpoint(engine), settings.api_key(engine))
        except EngineFailure as e:
            failures.append(f"{engine}: {e}")
            continue
        results = [r for r in results if is_web_url(r.url)][:SEARCH_RESULTS]
        if results:
            return engine, results
        failures.append(f"{engine}: no results")
    return "; ".join(failures) or "no search engine is configured"


# ---- elements -----------------------------------------------------------------------


async def _element(browser: LiveBrowser, page: Page, index: int):  # noqa: ANN202
    """The locator of element [index], or None when the page has no such element."""
    await browser.ensure_indexed(page)
    locator = page.locator(selector(index))
    count = await browser.on_page(page, locator.count(), browser.probe_seconds, "finding the element")
    return locator.first if count else None


def _missing(index: int) -> Outcome:
    return Outcome(f"There is no element [{index}] on the page now; use an index from the list below.", error=True)


async def click_element(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    index = action["index"]
    element = await _element(browser, page, index)
    if element is None:
        return _missing(index)
    before = page.url
    try:
        new_tab = await browser.on_page(page, element.evaluate(TARGETS_A_NEW_TAB), browser.call_seconds, "reading")
    except (PlaywrightTimeout, PlaywrightError):
        new_tab = False
    try:
        await browser.on_page(page, element.click(timeout=browser.timeout_ms), browser.call_seconds, "clicking")
    except PlaywrightTimeout:
        return Outcome(f"Element [{index}] could not be clicked within {browser.timeout:g} s (hidden or covered?).", error=True)
    except PlaywrightError as e:
        return Outcome(f"Clicking element [{index}] failed: {short_error(e)}.", error=True)
    if new_tab is True:
        deadline = asyncio.get_running_loop().time() + NEW_TAB_WAIT_SECONDS
        while not browser.opened and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
    return await after_interaction(browser, page, before, f"Clicked element [{index}]")


TARGETS_A_NEW_TAB = """element => {
    const link = element.closest('a[href], area[href]');
    const target = link ? (link.getAttribute('target') || '').toLowerCase() : '';
    return target !== '' && !['_self', '_parent', '_top'].includes(target);
}"""


async def input_text(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    index, text = action["index"], action["text"]
    element = await _element(browser, page, index)
    if element is None:
        return _missing(index)
    try:
        await browser.on_page(page, element.fill(text, timeout=browser.timeout_ms), browser.call_seconds, "typing")
    except PlaywrightTimeout:
        return Outcome(f"Element [{index}] did not take input within {browser.timeout:g} s.", error=True)
    except PlaywrightError as e:
        return Outcome(f"Typing into element [{index}] failed: {short_error(e)}.", error=True)
    return Outcome(f"Typed {_shown(text)} into element [{index}].")


async def send_keys(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    keys, before = action["keys"], page.url
    try:
        await browser.on_page(page, page.keyboard.press(keys), browser.call_seconds, "pressing keys")
    except PlaywrightError as e:
        return Outcome(
            f"Could not press {_shown(keys)}: {short_error(e)} (use key names such as Enter, Tab, "
            "ArrowDown, Control+a).",
            error=True,
        )
    return await after_interaction(browser, page, before, f"Pressed {_shown(keys)}")


OPTIONS = """(el, limit) => el.tagName === 'SELECT'
  ? Array.from(el.options).slice(0, limit).map(o => [o.text, o.value, o.selected])
  : null"""


async def _options(browser: LiveBrowser, page: Page, index: int) -> tuple[Any, list | Outcome]:
    element = await _element(browser, page, index)
    if element is None:
        return None, _missing(index)
    options = await browser.on_page(
        page, element.evaluate(OPTIONS, MAX_OPTIONS + 1), browser.probe_seconds, "reading the options"
    )
    if options is None:
        return None, Outcome(f"Element [{index}] is not a dropdown (<select>); click it instead.", error=True)
    return element, options


async def get_dropdown_options(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    index = action["index"]
    _, options = await _options(browser, page, index)
    if isinstance(options, Outcome):
        return options
    listing = [f"Options of element [{index}]:"] + [
        f"{n}: {text[:200]!r} (value {value[:100]!r}){' (selected)' if selected else ''}"
        for n, (text, value, selected) in enumerate(options[:MAX_OPTIONS])
    ]
    if len(options) > MAX_OPTIONS:
        listing.append(f"[... more options past the first {MAX_OPTIONS}]")
    return Outcome(
        f"Element [{index}] has {len(options)}{'+' if len(options) > MAX_OPTIONS else ''} options; "
        "choose one by its text with select_dropdown_option.",
        details=listing,
    )


async def select_dropdown_option(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    index, wanted = action["index"], action["text"]
    element, options = await _options(browser, page, index)
    if isinstance(options, Outcome):
        return options
    texts = [text.strip() for text, _, _ in options]
    position = next((n for n, t in enumerate(texts) if t == wanted.strip()), None)
    if position is None:
        position = next((n for n, t in enumerate(texts) if t.lower() == wanted.strip().lower()), None)
    if position is None:
        return Outcome(
            f"Element [{index}] has no option {_shown(wanted)}; get_dropdown_options lists them.", error=True
        )
    before = page.url
    try:
        await browser.on_page(
            page, element.select_option(index=position, timeout=browser.timeout_ms), browser.call_seconds, "selecting"
        )
    except PlaywrightError as e:
        return Outcome(f"Selecting in element [{index}] failed: {short_error(e)}.", error=True)
    return await after_interaction(browser, page, before, f"Selected {_shown(texts[position])} in element [{index}]")


# ---- scrolling, waiting, reading ------------------------------------------------------

SCROLL_BY = """(dy) => {
  const before = window.scrollY;
  window.scrollBy({top: dy, behavior: 'instant'});
  return [before, window.scrollY];
}"""

SCROLL_TO_TEXT = """(needle) => {
  needle = needle.toLowerCase();
  const root = document.body || document.documentElement;
  if (!root) return false;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(), seen = 0; node && seen < 200000; node = walker.nextNode(), seen++) {
    if (!node.nodeValue.toLowerCase().includes(needle)) continue;
    const el = node.parentElement;
    if (!el || !el.getClientRects().length) continue;
    el.scrollIntoView({block: 'center', behavior: 'instant'});
    return true;
  }
  return false;
}"""


async def _scroll(browser: LiveBrowser, action: dict[str, Any], sign: int) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    amount: int | None = action.get("scroll_amount")
    if amount is None:
        amount = int(
            await browser.on_page(page, page.evaluate("window.innerHeight"), browser.probe_seconds, "scrolling")
        )
    before, after = await browser.on_page(
        page, page.evaluate(SCROLL_BY, sign * amount), browser.probe_seconds, "scrolling"
    )
    moved = abs(round(after - before))
    direction = "down" if sign > 0 else "up"
    if moved == 0:
        return Outcome(f"The page did not move: it is already at the {'bottom' if sign > 0 else 'top'}.")
    return Outcome(f"Scrolled {direction} {moved} px.")


async def scroll_down(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    return await _scroll(browser, action, +1)


async def scroll_up(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    return await _scroll(browser, action, -1)


async def scroll_to_text(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    text = action["text"]
    found = await browser.on_page(page, page.evaluate(SCROLL_TO_TEXT, text), browser.probe_seconds, "finding text")
    if not found:
        return Outcome(f"{_shown(text)} was not found in the visible text of the page.", error=True)
    return Outcome(f"Scrolled to {_shown(text)}.")


async def wait(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    seconds = action.get("seconds", DEFAULT_WAIT_SECONDS)
    await asyncio.sleep(seconds)
    return Outcome(f"Waited {seconds} s.")


async def extract_content(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    page = browser.page
    if page is None:
        return NO_TAB
    try:
        html = await browser.on_page(page, page.content(), browser.probe_seconds, "reading the page")
    except PlaywrightError as e:
        return Outcome(f"Could not read the page: {short_error(e)}.", error=True)
    text = await asyncio.to_thread(readable_text, html[:MAX_HTML_CHARS], page.url)
    text = clip_text(text.strip(), tools.max_content_length)
    return Outcome(f"Read the text of {page.url} ({len(text)} characters) for: {action['goal']}", page_text=text)


# ---- tabs -------------------------------------------------------------------------------


def _no_tab(tab_id: int, browser: LiveBrowser) -> Outcome:
    return Outcome(f"There is no tab [{tab_id}]; the open tabs are 0 to {len(browser.tabs) - 1}.", error=True)


async def switch_tab(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    tab_id = action["tab_id"]
    if not 0 <= tab_id < len(browser.tabs):
        return _no_tab(tab_id, browser) if browser.tabs else NO_TAB
    await browser.activate(tab_id)
    return Outcome(f"Switched to tab [{tab_id}] ({browser.tabs[tab_id].url[:200]}).")


async def open_tab(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    if len(browser.tabs) >= MAX_TABS:
        return Outcome(f"At most {MAX_TABS} tabs can be open; close one with close_tab first.", error=True)
    if not is_web_url(action["url"]):
        return Outcome(f"Refused to open {action['url'][:200]}: only http and https URLs are opened.", error=True)
    page = await browser.new_tab()
    opened = await navigate(browser, page, action["url"])
    return Outcome(f"Opened a new tab [{browser.active}]. {opened.line}", error=opened.error)


async def close_tab(browser: LiveBrowser, action: dict[str, Any], tools: Tools) -> Outcome:
    tab_id = action["tab_id"]
    if not 0 <= tab_id < len(browser.tabs):
        return _no_tab(tab_id, browser) if browser.tabs else NO_TAB
    page = browser.tabs[tab_id]
    try:
        await browser.on_page(page, page.close(run_before_unload=False), browser.call_seconds, "closing the tab")
    except PlaywrightError as e:
        return Outcome(f"Could not close tab [{tab_id}]: {short_error(e)}.", error=True)
    browser.forget(page)  # the close event may come after close() returns
    if not browser.tabs:
        return Outcome(f"Closed tab [{tab_id}]; no tab is open now.")
    await browser.activate(browser.active)
    return Outcome(f"Closed tab [{tab_id}]; the active tab is now [{browser.active}].")


ACTIONS: dict[str, Action] = {
    "go_to_url": go_to_url,
    "click_element": click_element,
    "input_text": input_text,
    "scroll_down": scroll_down,
    "scroll_up": scroll_up,
    "scroll_to_text": scroll_to_text,
    "send_keys": send_keys,
    "get_dropdown_options": get_dropdown_options,
    "select_dropdown_option": select_dropdown_option,
    "go_back": go_back,
    "web_search": web_search,
    "wait": wait,
    "extract_content": extract_content,
    "switch_tab": switch_tab,
    "open_tab": open_tab,
    "close_tab": close_tab,
}
