"""The run page in a real Chromium (Playwright): opened with its token link, a
run started from the form, its steps arriving without a reload, its question
answered and its gated call approved from the page, the screenshot its
browser call took opened; the page's own screenshots (docs/run-page/) are
taken on the way, as docs/run-page/screenshots.py takes them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from config.settings import WebSettings
from runtime.worker_factory import build_worker
from testkit.fake_site import FakeSite
from testkit.run_page import serving_page
from testkit.run_page_scene import play, scene_responder
from testkit.settings import make_settings
from tests.test_browser_engine import BROWSER_MISSING

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bool(BROWSER_MISSING), reason=BROWSER_MISSING or "")]


@pytest.fixture
def site():
    served = FakeSite().start()
    yield served
    served.stop()


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head.startswith(b"\x89PNG\r\n\x1a\n"), path
    return struct.unpack(">II", head[16:24])


async def test_a_run_is_started_watched_answered_and_approved_in_chromium(dev_env, fake_llm, site, tmp_path):
    fake_llm.responder = scene_responder(site.url("/"))
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace", tool_sandbox="auto").model_copy(
        update={"web": WebSettings(allow=(site.origin,))}
    )
    shots = tmp_path / "shots"
    shots.mkdir()
    async with build_worker(dev_env.client, settings), serving_page(dev_env.client, settings) as page:
        result = await play(page, shots)
    assert result.saw == ["step 1", "question", "answered", "screenshot", "approval", "approved", "finished"]
    assert result.reloaded is False  # every step, the question, the approval came in without a reload
    assert result.screenshot_type == "image/jpeg" and result.screenshot_width > 0
    for name in ("question", "approval", "finished", "screenshot", "runs"):  # what the docs' script commits
        width, height = png_size(shots / f"{name}.png")
        assert (width, height) == (1100, 900), name
