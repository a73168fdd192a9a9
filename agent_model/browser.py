"""The browser_use tool's data: its actions and their bounds, what the workflow
knows of a run's browser, and the activity's request and result.

Pure: the workflow keeps a BrowserState (tabs, the active one, scroll) and the
worker-specific task queue of the worker that holds the live page
(tools/browser_use.py); the worker side is activities/browser/.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent_model.tool_arguments import bad_arguments
from agent_model.tool_io import ProducedObservation

TOOL_NAME = "browser_use"
MAX_URL_CHARS = 2048
MAX_TEXT_CHARS = 10_000
MAX_QUERY_CHARS = 500
MAX_KEYS_CHARS = 100
MAX_INDEX = 100_000
MAX_TABS = 8
MAX_WAIT_SECONDS = 30
MAX_SCROLL_PIXELS = 100_000
MAX_TITLE_CHARS = 200
SCREENSHOT_DIR = "browser"
"""Under the run's directory: the screenshot taken after each browser action."""


def screenshot_name(step: int, call_index: int) -> str:
    """The file name of the screenshot after the call at `call_index` (from 0)
    of step `step`'s reply; the run page finds a step's screenshots by it."""
    return f"step-{step:04d}-{call_index + 1}.jpg"


ACTIONS: dict[str, tuple[str, ...]] = {
    "go_to_url": ("url",),
    "click_element": ("index",),
    "input_text": ("index", "text"),
    "scroll_down": (),
    "scroll_up": (),
    "scroll_to_text": ("text",),
    "send_keys": ("keys",),
    "get_dropdown_options": ("index",),
    "select_dropdown_option": ("index", "text"),
    "go_back": (),
    "web_search": ("query",),
    "wait": (),
    "extract_content": ("goal",),
    "switch_tab": ("tab_id",),
    "open_tab": ("url",),
    "close_tab": ("tab_id",),
}
"""Every action, with the arguments it requires (OpenManus's action set)."""

READ_ONLY_ACTIONS = frozenset({"scroll_down", "scroll_up", "scroll_to_text", "get_dropdown_options", "wait", "extract_content"})
"""Actions whose repetition on a restored page changes nothing: after a lost
worker they are run again on the restored session; the others are not."""

STRING_LIMITS = {
    "url": MAX_URL_CHARS,
    "text": MAX_TEXT_CHARS,
    "query": MAX_QUERY_CHARS,
    "keys": MAX_KEYS_CHARS,
    "goal": MAX_QUERY_CHARS,
}
INTEGER_LIMITS = {
    "index": (0, MAX_INDEX),
    "tab_id": (0, MAX_TABS - 1),
    "scroll_amount": (1, MAX_SCROLL_PIXELS),
    "seconds": (0, MAX_WAIT_SECONDS),
}


def checked_action(arguments: dict[str, Any], tool: str = "browser_use") -> dict[str, Any]:
    """The action and its arguments, each present, typed and bounded; raises
    BadToolArguments (an observation for the model) otherwise."""
    action = arguments.get("action")
    if not isinstance(action, str) or action not in ACTIONS:
        raise bad_arguments(f"{tool}: action must be one of {', '.join(ACTIONS)}.")
    checked: dict[str, Any] = {"action": action}
    for name, value in arguments.items():
        if name == "action" or value is None:
            continue
        if name in STRING_LIMITS:
            if not isinstance(value, str):
                raise bad_arguments(f"{tool}: {name} must be a string.")
            if len(value) > STRING_LIMITS[name]:
                raise bad_arguments(f"{tool}: {name} is longer than {STRING_LIMITS[name]} characters.")
            checked[name] = value
        elif name in INTEGER_LIMITS:
            low, high = INTEGER_LIMITS[name]
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise bad_arguments(f"{tool}: {name} must be a whole number from {low} to {high}.")
            checked[name] = value
    missing = [name for name in ACTIONS[action] if name not in checked or checked[name] == ""]
    if missing:
        raise bad_arguments(f"{tool}: the action {action} needs {' and '.join(missing)}.")
    if "url" in checked and not checked["url"].strip().lower().startswith(("http://", "https://")):
        raise bad_arguments(f"{tool}: url must start with http:// or https://.")
    return checked


class BrowserTab(BaseModel):
    url: str
    title: str = ""


class BrowserState(BaseModel):
    """What the workflow knows of its run's browser after the last action."""

    tabs: list[BrowserTab] = Field(default_factory=list)
    active: int = 0
    """Index in `tabs` of the tab the actions apply to."""
    scroll_y: int = 0
    """Pixels of the page above the viewport."""
    viewport_height: int = 0
    page_height: int = 0
    session_queue: str | None = None
    """The task queue of the worker that holds the live page (its own queue);
    None before the first action and after that worker was lost."""

    @property
    def open(self) -> bool:
        return bool(self.tabs)

    @property
    def current(self) -> BrowserTab | None:
        return self.tabs[self.active] if 0 <= self.active < len(self.tabs) else None

    def prompt_lines(self) -> str:
        """The browser part of the next-step prompt: URL, title, tabs, scroll."""
        current = self.current
        if current is None:
            return "Browser: no page is open yet."
        below = max(0, self.page_height - self.scroll_y - self.viewport_height)
        lines = [
            f"Browser: {current.url}",
            f"Title: {current.title[:MAX_TITLE_CHARS] or '(none)'}",
            f"Scroll: {self.scroll_y} px above the viewport, {below} px below it",
        ]
        if len(self.tabs) > 1:
            tabs = "; ".join(
                f"[{i}]{' (active)' if i == self.active else ''} {tab.title[:60] or tab.url[:80]}"
                for i, tab in enumerate(self.tabs)
            )
            lines.append(f"Tabs: {tabs}")
        return "\n".join(lines)

    def without_session(self) -> BrowserState:
        return self.model_copy(update={"session_queue": None})


class BrowserRequest(BaseModel):
    """One browser action, as the workflow hands it to the browser activity."""

    workspace: str
    """Name of the run's directory (screenshots are written beneath it)."""
    session: str
    """The run's browser on a worker: one live browser per session key."""
    action: dict[str, Any]
    """checked_action's result."""
    restore: BrowserState
    """What the workflow last knew: reopened when this worker holds no live
    session for the key (a new worker, or the browser closed when idle)."""
    screenshot_name: str
    """File name for the screenshot after the action, e.g. "step-0003-1.png"."""
    observe_limit: int = 20_000
    """Characters of the output the observation keeps."""
    call_id: str | None = None
    """The model's id for the call: the worker then finishes the observation
    message and writes it to the shared context store (activities/produced_messages.py)."""


class BrowserResult(ProducedObservation):
    output: str
    """What the action did, then the page: interactive elements by index."""
    error: bool = False
    state: BrowserState
    """The browser after the action, session_queue = this worker's own queue."""
    restored: bool = False
    """The session was reopened from the request's `restore` before the action."""
    screenshot: str | None = None
    """Path of the screenshot, relative to the run directory."""
    page_text: str | None = None
    """extract_content: the page's readable text, for the extraction call."""


class ExtractRequest(BaseModel):
    """extract_content's LLM call: the goal, and the page text to read it in."""

    llm: str = "default"
    goal: str
    url: str
    page_text: str


class ExtractResult(BaseModel):
    text: str
