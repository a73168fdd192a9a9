"""One story on the run page in a real Chromium (Playwright), for the browser
test and for the docs' screenshots (docs/run-page/screenshots.py): open the
page with its token link, start a run from the form, watch its steps arrive
without a reload, answer its question, approve its gated call, open the
screenshot its browser call took.

The world is the test's: a dev server, the fake model (scene_responder), the
fixture web site and a worker in this process with the tool sandbox on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from activities.browser.jail import find_chromium
from testkit.fake_openai import Reply, call, python, terminate, turn_of
from testkit.run_page import Page

TASK = "Find the colour the fixture site is about, and check it with a shell"
QUESTION = "Which colour should I look for?"
ANSWER = "blue"
SIDE_TASKS = ("Summarise the release notes in three points", "Chart last year's sales from the missing file")
"""Runs the docs' script starts beside the story, so that the list has more to show: one finishes, one gives up."""
WAIT_MS = 60_000
"""A step of the scene may wait this long (a think, a sandboxed call, Chromium's start)."""
VIEWPORT = {"width": 1100, "height": 900}


def scene_responder(site_url: str):
    """The fake model's replies for the scene's run, by turn."""
    turns = [
        python("print('warming up: the sandbox answers')", content="I will first check that my tools work."),
        Reply(content="I need to know what to look for.", tool_calls=[call("ask_human", {"inquire": QUESTION})]),
        Reply(
            content="Now the site itself.",
            tool_calls=[call("browser_use", {"action": "go_to_url", "url": site_url})],
        ),
        python(
            "import subprocess\nprint(subprocess.run(['echo', 'blue checked'], capture_output=True, text=True).stdout)",
            content="A shell command confirms it (this call is gated: it names subprocess).",
        ),
        terminate("The colour is blue: the fixture home page is open and the shell agrees."),
    ]

    def respond(body: dict, attempt: int) -> Reply:
        task = next((m.get("content") for m in body["messages"] if m["role"] == "user"), "")
        if isinstance(task, str) and task.startswith(SIDE_TASKS[1]):
            return terminate("The data is not there.", status="failure")
        if isinstance(task, str) and task.startswith(SIDE_TASKS[0]):
            return terminate("Summary: three points.")
        turn = turn_of(body)
        return turns[turn] if turn < len(turns) else terminate("done")

    return respond


async def said_after(tab: Any, button: str, expected: str) -> None:
    """Click `button` and check the line the page says for it."""
    await tab.evaluate("document.getElementById('said').hidden = true")
    await tab.click(button)
    box = await tab.wait_for_selector("#said:not([hidden])", timeout=WAIT_MS)
    line = (await box.text_content()) or ""
    assert line.startswith(expected) and "ok" in ((await box.get_attribute("class")) or ""), (line, await tab.content())


@dataclass
class SceneResult:
    run_id: str = ""
    reloaded: bool = True
    screenshot_type: str = ""
    screenshot_width: int = 0
    saw: list[str] = field(default_factory=list)
    """What the page showed, in order: one word per moment the scene waited for."""
    shots: list[Path] = field(default_factory=list)


async def play(page_server: Page, shots: Path | None = None) -> SceneResult:
    """The story in a headless Chromium; with `shots`, PNGs of the page on the way."""
    from playwright.async_api import async_playwright

    result = SceneResult()
    executable = find_chromium(None)
    assert executable is not None, "no Chromium on this machine"

    async def shoot(tab: Any, name: str) -> None:
        if shots is not None:
            path = shots / f"{name}.png"
            await tab.screenshot(path=str(path), full_page=False)
            result.shots.append(path)

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            context = await browser.new_context(viewport=VIEWPORT)
            tab = await context.new_page()
            await tab.goto(page_server.link())
            assert tab.url == f"{page_server.origin}/", tab.url  # the token is gone from the address
            cookies = await context.cookies()
            assert any(c["name"] == page_server.guard.cookie_name and c["httpOnly"] for c in cookies), cookies

            await tab.fill("form.start textarea[name=task]", TASK)
            await tab.select_option("form.start select[name=approve]", "risky")
            await tab.click("form.start button[type=submit]")
            await tab.wait_for_url(f"{page_server.origin}/run/**", timeout=WAIT_MS)
            result.run_id = tab.url.rsplit("/run/", 1)[1]
            await tab.wait_for_selector("body[data-following=yes]", timeout=WAIT_MS)
            await tab.evaluate("window.sceneMarker = 'not reloaded'")

            await tab.wait_for_selector("#step-1 .observation", timeout=WAIT_MS)
            result.saw.append("step 1")
            await tab.wait_for_selector("form.question-form", timeout=WAIT_MS)
            result.saw.append("question")
            await shoot(tab, "question")
            await tab.fill("form.question-form textarea[name=text]", ANSWER)
            await said_after(tab, "form.question-form button[type=submit]", "answered question 2.1")
            result.saw.append("answered")

            await tab.wait_for_selector("#step-3 a.shot img", timeout=WAIT_MS)
            result.saw.append("screenshot")
            await tab.wait_for_selector("form.approval-form", timeout=WAIT_MS)
            result.saw.append("approval")
            await shoot(tab, "approval")
            await said_after(tab, "form.approval-form button[value=approve]", "approved call 4.1")
            result.saw.append("approved")
            await tab.wait_for_selector("body[data-following=ended]", timeout=WAIT_MS)
            await tab.wait_for_selector("#status p.state.finished", timeout=WAIT_MS)
            result.saw.append("finished")
            result.reloaded = await tab.evaluate("window.sceneMarker") != "not reloaded"
            await shoot(tab, "finished")
            await tab.locator("#step-3").scroll_into_view_if_needed()
            await shoot(tab, "screenshot")

            image = tab.locator("#step-3 a.shot img")
            result.screenshot_width = await image.evaluate("img => img.naturalWidth")
            async with context.expect_page() as opened:
                await tab.click("#step-3 a.shot")
            shot_tab = await opened.value
            await shot_tab.wait_for_load_state()
            answer = await shot_tab.request.get(shot_tab.url)
            result.screenshot_type = answer.headers.get("content-type", "")
            await shot_tab.close()

            await tab.goto(f"{page_server.origin}/")
            await tab.wait_for_selector("table.runs", timeout=WAIT_MS)
            await shoot(tab, "runs")
        finally:
            await browser.close()
    return result

