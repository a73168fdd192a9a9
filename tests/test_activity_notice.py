"""A long activity says what it is doing: web_search names each engine it
asks, the line rides on its heartbeats, and the starter's watch prints each
new line once while it follows the run (issue 22: no silent wait)."""

from __future__ import annotations

import asyncio
import time
import uuid

from activities.heartbeats import DOING_CHARACTERS, heartbeating, say_doing
from agent_model.run import AgentRunInput
from config.settings import SearchSettings, WebSettings
from runtime.follow import Watch
from runtime.worker_factory import build_worker
from testkit import fake_web
from testkit.fake_openai import Reply, call, terminate
from testkit.fake_web import Answer, FakeWeb
from testkit.settings import make_settings
from tests.test_agent_workflow import PROFILE
from workflows.agent import AgentWorkflow

ENGINE_SECONDS = 2.5
"""Each fake engine answers this late: longer than the watch's check interval."""


class Lines:
    """Where the watch writes what it tells (a terminal, in the starter)."""

    def __init__(self, run_id: str) -> None:
        self.run_id, self.said = run_id, []

    def watched(self) -> list[str]:
        return [self.run_id]

    def say(self, text: str) -> None:
        self.said.append(text)


def slowly(answer: Answer):
    def route(seen) -> Answer:
        time.sleep(ENGINE_SECONDS)
        return answer

    return route


async def test_the_starter_tells_each_engine_web_search_asks(dev_env, fake_llm, tmp_path) -> None:
    web = FakeWeb().start()
    try:
        web.route("/html/", slowly(Answer(500, "down")))
        web.route("/brave", slowly(Answer(
            body=fake_web.brave_json([("A page", web.url("/page"), "about it")]), content_type="application/json",
        )))
        settings = make_settings(fake_llm.base_url, tmp_path / "workspace").model_copy(update={
            "search": SearchSettings(
                engine="duckduckgo", fallback_engines=["brave"], retry_delay=0, max_retries=0,
                endpoints={"duckduckgo": web.url("/html/"), "brave": web.url("/brave")}, brave_api_key="key-0123456789",
            ),
            "web": WebSettings(allow=(web.origin,)),
        })
        fake_llm.turns = [Reply(tool_calls=[call("web_search", {"query": "q"})]), terminate("done")]
        profile = PROFILE.model_copy(update={"tools": ["web_search", "terminate"]})
        async with build_worker(dev_env.client, settings):
            handle = await dev_env.client.start_workflow(
                AgentWorkflow.run, AgentRunInput(task="search", profile=profile),
                id=f"notice-{uuid.uuid4().hex[:8]}", task_queue=settings.task_queue,
            )
            lines = Lines(handle.id)

            async def no_stall(run_id: str, waited: float):
                return None

            watch = Watch(dev_env.client, no_stall)
            result = asyncio.ensure_future(handle.result())
            while not result.done():
                await watch.check(lines)
                await asyncio.wait({result}, timeout=0.2)
            assert result.result().succeeded
    finally:
        web.stop()
    told = [line for line in lines.said if line.startswith("web_search:")]
    assert told == ["web_search: asking duckduckgo (1 of 2)", "web_search: asking brave (2 of 2)"]


async def test_a_line_is_one_short_line_and_needs_a_heartbeating_block() -> None:
    say_doing("outside: nothing to carry it")  # no error, no effect
    seen: list[str] = []
    async with heartbeating(on_beat=lambda: None):
        say_doing("a\nmulti-line\x1b[31m line " + "x" * 500)
        from activities import heartbeats

        holder = heartbeats._doing.get()
        assert holder is not None
        seen.append(holder[0])
    assert heartbeats._doing.get() is None
    assert "\n" not in seen[0] and len(seen[0]) == DOING_CHARACTERS
