"""The browser recovers: a restored session is indexed before an element
action, and a tab whose renderer crashed is reopened in place, with real
Chromium against the fixture site (testkit/fake_site.py).

Renderers crash for real: the crash tests' browser has a small JavaScript
heap, which the fixture's memory-hog pages fill in about a second.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from activities.workspace import Workspace
from tests.test_browser_engine import Driver, index_of, world  # noqa: F401 - world is the fixture

SMALL_HEAP = "--js-flags=--max-old-space-size=64"
CRASH_SECONDS = 30.0
"""A hog page crashes its renderer within a second or so; a loaded machine
may take many times that, and a page still loading would not have crashed yet."""
NOT_REPEATED = "The page crashed and was reloaded; the action was not repeated."
RAN_AGAIN = "The page crashed during the action and was reloaded; the action was run once more: "
CRASHED_AGAIN = "The page crashed again when the action was run once more; the action was not repeated."


@pytest.fixture(scope="module")
async def capped(world):
    """Another worker's sessions (the same web rules and sandbox), whose
    browsers have a small JavaScript heap."""
    from activities.browser.sessions import BrowserSessions

    settings = world.sessions.settings.model_copy(
        update={"extra_chromium_args": [SMALL_HEAP], "navigation_timeout": CRASH_SECONDS}
    )
    sessions = BrowserSessions(settings, Workspace(world.root), world.sandbox, world.sessions.launcher.access, "other-queue")
    yield Driver(sessions, world.site, world.root)
    await sessions.close_all()


def sent_texts(world) -> list[str]:
    return [seen.param("q") for seen in world.site.requests_to("/submitted")]


async def fill_and_send(driver: Driver, session: str, shown, text: str):
    """input_text into the text box and click Send, by the indexes `shown`
    listed; returns input_text's result."""
    typed = await driver.act(session=session, action="input_text", index=index_of(shown, "<input"), text=text)
    assert not typed.error, typed.output
    sent = await driver.act(session=session, action="click_element", index=index_of(shown, ">Send<"))
    assert not sent.error, sent.output
    return typed


# ---- a restored session ----------------------------------------------------------------


async def test_a_session_reopened_after_idle_types_into_the_element_the_model_saw(world):
    form = await world.act(session="run-idle-form", action="go_to_url", url=world.url("/form"))
    world.sessions._live["run-idle-form"].last_used -= world.sessions.settings.idle_seconds
    await world.sessions.close_idle()
    assert "run-idle-form" not in world.sessions.open_sessions

    typed = await fill_and_send(world, "run-idle-form", form, "after idle")
    assert typed.restored and sent_texts(world)[-1] == "after idle"
    await world.sessions.close("run-idle-form")


async def test_a_session_restored_on_another_worker_types_into_the_element_the_model_saw(world, capped):
    form = await world.act(session="run-moved", action="go_to_url", url=world.url("/form"))
    capped.states["run-moved"] = world.states["run-moved"]  # the workflow's state goes to the other worker

    typed = await fill_and_send(capped, "run-moved", form, "on another worker")
    assert typed.restored and sent_texts(world)[-1] == "on another worker"
    await world.sessions.close("run-moved")
    await capped.sessions.close("run-moved")


# ---- a crashed renderer ------------------------------------------------------------------


async def crash_between_actions(driver: Driver, session: str) -> None:
    """Crash the active tab's renderer outside any action, as a renderer dies of its own."""
    page, crashed = driver.sessions._live[session].page, asyncio.Event()
    page.once("crash", lambda _: crashed.set())
    with contextlib.suppress(Exception):  # the navigation is aborted by the crash
        await asyncio.wait_for(page.goto("chrome://crash"), 10)
    await asyncio.wait_for(crashed.wait(), 10)


async def test_a_renderer_that_crashed_between_actions_is_replaced_by_the_next_one(world, capped):
    form = await capped.act(session="run-crash-idle", action="go_to_url", url=world.url("/form"))
    await crash_between_actions(capped, "run-crash-idle")

    typed = await fill_and_send(capped, "run-crash-idle", form, "after a crash")
    assert f"tab [0] crashed (its renderer stopped); it was reopened at {world.url('/form')}" in typed.output
    assert sent_texts(world)[-1] == "after a crash"
    await capped.sessions.close("run-crash-idle")


async def test_an_action_that_crashes_the_renderer_is_reported_and_not_repeated(world, capped):
    hog = await capped.act(session="run-crash-click", action="go_to_url", url=world.url("/hog-on-click"))
    loads = len(world.site.requests_to("/hog-on-click"))

    clicked = await capped.act(session="run-crash-click", action="click_element", index=index_of(hog, "Fill the memory"))
    assert clicked.error and NOT_REPEATED in clicked.output, clicked.output
    assert "Page crashed" not in clicked.output and "Target crashed" not in clicked.output
    assert len(world.site.requests_to("/hog-on-click")) == loads + 1  # reopened once, not clicked again
    assert clicked.state.current.url == world.url("/hog-on-click") and "Fill the memory" in clicked.output

    typed = await capped.act(session="run-crash-click", action="input_text", index=index_of(clicked, "<input"), text="alive")
    assert not typed.error and 'value="alive"' in typed.output, typed.output
    moved = await capped.act(session="run-crash-click", action="go_to_url", url=world.url("/page2"))
    assert not moved.error and moved.state.current.title == "Second page", moved.output
    await capped.sessions.close("run-crash-click")


async def test_a_read_only_action_that_crashes_the_renderer_is_run_once_more(world, capped):
    await capped.act(session="run-crash-scroll", action="go_to_url", url=world.url("/hog-on-first-scroll"))

    scrolled = await capped.act(session="run-crash-scroll", action="scroll_down", scroll_amount=300)
    assert not scrolled.error, scrolled.output
    assert RAN_AGAIN + "Scrolled down 300 px." in scrolled.output
    assert scrolled.state.scroll_y == 300 and len(world.site.requests_to("/hog-on-first-scroll")) == 2
    await capped.sessions.close("run-crash-scroll")


async def test_a_page_that_crashes_as_it_loads_leaves_its_tab_empty(world, capped):
    await capped.act(session="run-crash-load", action="go_to_url", url=world.url("/form"))

    opened = await capped.act(session="run-crash-load", action="go_to_url", url=world.url("/hog-on-load"))
    assert opened.error and NOT_REPEATED in opened.output, opened.output
    assert "crashed it again, so the tab was left empty" in opened.output, opened.output
    assert opened.state.current.url == "about:blank" and len(opened.state.tabs) == 1

    after = await capped.act(session="run-crash-load", action="go_to_url", url=world.url("/form"))
    assert not after.error and after.state.current.title == "The form", after.output
    await capped.sessions.close("run-crash-load")


async def test_a_read_only_action_that_crashes_the_renderer_twice_is_not_run_a_third_time(world, capped):
    await capped.act(session="run-crash-twice", action="go_to_url", url=world.url("/hog-on-scroll"))

    scrolled = await capped.act(session="run-crash-twice", action="scroll_down", scroll_amount=300)
    assert scrolled.error and CRASHED_AGAIN in scrolled.output, scrolled.output
    assert "crashed (its renderer stopped) again after it was reopened, so the tab was left empty" in scrolled.output
    assert scrolled.state.current.url == "about:blank"
    assert len(world.site.requests_to("/hog-on-scroll")) == 2  # opened, reopened once
    after = await capped.act(session="run-crash-twice", action="go_to_url", url=world.url("/page2"))
    assert not after.error and after.state.current.title == "Second page", after.output
    await capped.sessions.close("run-crash-twice")
