"""Take the run page's screenshots for docs/run-page.md, in this directory:

    python docs/run-page/screenshots.py [OUT_DIR]

It plays the browser test's story (testkit/run_page_scene.py) on a dev server
of its own, with the fake model, the fixture site, a worker in this process
(tool sandbox on) and a headless Chromium, and writes question.png,
approval.png, finished.png, screenshot.png and runs.png. Nothing leaves this machine.
tests/test_run_page_browser.py runs this script's take() and checks what
the story saw and the PNGs; tests/test_run_page_parts.py checks that the
committed ones are here and the ones the manual shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from temporalio.client import WorkflowFailureError  # noqa: E402

from config.settings import WebSettings  # noqa: E402
from runtime.worker_factory import build_worker  # noqa: E402
from testkit.fake_openai import FakeOpenAI  # noqa: E402
from testkit.fake_site import FakeSite  # noqa: E402
from testkit.run_page import serving_page  # noqa: E402
from testkit.run_page_scene import SIDE_TASKS, SceneResult, play, scene_responder  # noqa: E402
from testkit.servers import start_dev_server  # noqa: E402
from testkit.settings import make_settings  # noqa: E402



async def take(out: Path) -> SceneResult:
    """The story played, its PNGs in `out`."""
    site, fake = FakeSite().start(), FakeOpenAI().start()
    env = await start_dev_server()
    try:
        fake.responder = scene_responder(site.url("/"))
        with tempfile.TemporaryDirectory() as scratch:
            settings = make_settings(fake.base_url, Path(scratch) / "workspace", tool_sandbox="auto").model_copy(
                update={"web": WebSettings(allow=(site.origin,))}
            )
            async with build_worker(env.client, settings), serving_page(env.client, settings) as page:
                for task in SIDE_TASKS:
                    done = await page.app.actions.start({"task": task, "kind": "agent:manus"})
                    with contextlib.suppress(WorkflowFailureError):  # the run that gives up ends FAILED
                        await env.client.get_workflow_handle(done.location.rsplit("/", 1)[1]).result()
                result = await play(page, out)
    finally:
        await env.shutdown()
        fake.stop()
        site.stop()
    return result


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(take(out)).shots:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
