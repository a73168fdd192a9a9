"""The run page in a real Chromium (Playwright), as docs/run-page/screenshots.py
plays it (this test runs that script's take()): opened with its token link,
a run started from the form, its steps arriving without a reload, its
question answered and its gated call approved from the page, the screenshot
its browser call took opened, and the page's own screenshots written."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest

from tests.test_browser_engine import BROWSER_MISSING

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bool(BROWSER_MISSING), reason=BROWSER_MISSING or "")]

SCRIPT = Path(__file__).resolve().parent.parent / "docs" / "run-page" / "screenshots.py"


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head.startswith(b"\x89PNG\r\n\x1a\n"), path
    return struct.unpack(">II", head[16:24])


async def test_a_run_is_started_watched_answered_and_approved_in_chromium(tmp_path):
    spec = importlib.util.spec_from_file_location("run_page_screenshots", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    result = await script.take(tmp_path)
    assert result.saw == ["step 1", "question", "answered", "screenshot", "approval", "approved", "finished"]
    assert result.reloaded is False  # every step, the question, the approval came in without a reload
    assert result.screenshot_type == "image/jpeg" and result.screenshot_width > 0
    assert [p.name for p in result.shots] == ["question.png", "approval.png", "finished.png", "screenshot.png", "runs.png"]
    for path in result.shots:
        assert png_size(path) == (1100, 900), path
