"""Take the run page's screenshots for docs/run-page.md, in this directory:

    python docs/run-page/screenshots.py [OUT_DIR]

It plays the browser test's story (testkit/run_page_scene.py) on a dev server
of its own, with the fake model, the fixture site, a worker in this process
(tool sandbox on) and a headless Chromium, and writes question.png,
approval.png, finished.png, screenshot.png and runs.png. Nothing leaves this machine.
tests/test_run_page_browser.py plays the same story and checks its shots;
tests/test_run_page.py checks that the committed ones are here and named by
the manual.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from config.settings import WebSettings  # noqa: E402
from runtime.worker_factory import build_worker  # noqa: E402
from testkit.fake_openai import FakeOpenAI  # noqa: E402
from testkit.fake_site import FakeSite  # noqa: E402
from testkit.run_page import serving_page  # noqa: E402
from testkit.run_page_scene import play, scene_responder  # noqa: E402
from testkit.servers import start_dev_server  # noqa: E402
from testkit.settings import make_settings  # noqa: E402



async def take(out: Path) -> list[Path]:
    site, fake = FakeSite().start(), FakeOpenAI().start()
    env = await start_dev_server()
    try:
        fake.responder = scene_responder(site.url("/"))
        with tempfile.TemporaryDirectory() as scratch:
            settings = make_settings(fake.base_url, Path(scratch) / "workspace", tool_sandbox="auto").model_copy(
                update={"web": WebSettings(allow=(site.origin,))}
            )
            async with build_worker(env.client, settings), serving_page(env.client, settings) as page:
                result = await play(page, out)
    finally:
        await env.shutdown()
        fake.stop()
        site.stop()
    return result.shots


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(take(out)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
