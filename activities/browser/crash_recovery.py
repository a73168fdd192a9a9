"""Actions around a crashed renderer: the crashed tab is reopened before the
action when it crashed earlier, or right after the action it crashed
during. A read-only action is then run once more; any other is not, since
whether it took effect is unknown. A page that crashes again once reopened
is not reopened a second time (live_browser.py), so no page keeps a run's
actions failing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from agent_model.browser import READ_ONLY_ACTIONS
from activities.browser.actions import Outcome
from activities.browser.live_browser import LiveBrowser

NOT_REPEATED = "The page crashed and was reloaded; the action was not repeated."
CRASHED_AGAIN = "The page crashed again when the action was run once more; the action was not repeated."
RAN_AGAIN = "The page crashed during the action and was reloaded; the action was run once more: "


async def outcome_despite_crashes(
    browser: LiveBrowser, name: str, attempt: Callable[[], Awaitable[Outcome]], notes: list[str]
) -> Outcome:
    """The action's outcome (`attempt` runs it once); notes on reopened tabs go to `notes`."""
    notes += await browser.reopen_crashed()
    outcome = await attempt()
    if not browser.crashed:
        return outcome
    notes += await browser.reopen_crashed()
    if name not in READ_ONLY_ACTIONS:
        return Outcome(NOT_REPEATED, error=True)
    outcome = await attempt()
    if not browser.crashed:
        return Outcome(RAN_AGAIN + outcome.line, outcome.error, outcome.details, outcome.page_text)
    notes += await browser.reopen_crashed()
    return Outcome(CRASHED_AGAIN, error=True)
