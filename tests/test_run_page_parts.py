"""The run page's parts without a Temporal server: the screenshot reader's
refusals, the HTTP reader's bounds, the guard's checks, the escaping of
hostile text, and the `ui` command line."""

from __future__ import annotations

import asyncio
import os
import socket
from datetime import datetime, timezone
from pathlib import Path

import pytest

from agent_model.outcome_words import StateClass
from agent_model.records import StepRecord, ToolCallRecord
from runtime.command_line import RunPage, parse_command
from runtime.run_list import RunRow
from runtime.run_page import http_server
from runtime.run_page.events import event, resume_point
from runtime.run_page.guard import Guard
from runtime.run_page.html_text import esc, run_url
from runtime.run_page.http_server import BadRequest, Request, read_request
from runtime.run_page.pages import runs_page, step_item
from runtime.run_page.screenshots import NoScreenshot, image_type, read_screenshot, step_screenshots
from runtime.user_errors import UsageError

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 32
WEBP = b"RIFF\x10\0\0\0WEBPVP8 " + b"\0" * 32
HOSTILE = "<script>alert(1)</script>\x1b]52;c;aGk=\x07\x1b[2J<img src=x onerror=alert(2)>\"'"


# ---- screenshots -------------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path) -> Path:
    (tmp_path / "run-a" / "browser").mkdir(parents=True)
    return tmp_path / "run-a" / "browser"


def test_an_image_is_served_by_what_it_holds_not_by_its_name(tmp_path, run_dir):
    for name, data, kind in (("step-0001-1.jpg", JPEG, "image/jpeg"), ("step-0002-1.jpg", PNG, "image/png"),
                             ("step-0003-1.webp", WEBP, "image/webp")):
        (run_dir / name).write_bytes(data)
        assert read_screenshot(tmp_path, "run-a", name) == (data, kind)
    (run_dir / "step-0004-1.jpg").write_bytes(b"<html><script>alert(1)</script>")
    with pytest.raises(NoScreenshot, match="not an image"):
        read_screenshot(tmp_path, "run-a", "step-0004-1.jpg")
    assert image_type(b"GIF89a") is None


def test_links_fifos_paths_and_huge_files_are_refused(tmp_path, run_dir):
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)
    os.symlink(secret, run_dir / "step-0001-1.jpg")  # a link to an image outside
    with pytest.raises(NoScreenshot, match="refused"):
        read_screenshot(tmp_path, "run-a", "step-0001-1.jpg")
    os.mkfifo(run_dir / "step-0002-1.jpg")  # opening it must not wait for a writer
    with pytest.raises(NoScreenshot, match="not a regular file"):
        read_screenshot(tmp_path, "run-a", "step-0002-1.jpg")
    (run_dir / "step-0003-1.jpg").write_bytes(JPEG + b"\0" * 2000)
    with pytest.raises(NoScreenshot, match="larger than"):
        read_screenshot(tmp_path, "run-a", "step-0003-1.jpg", limit=1000)
    for name in ("../secret.png", "..", "step-0001-1.jpg/..", "secret.png", "step-1-1.jpg", "step-0001-1.svg"):
        with pytest.raises(NoScreenshot, match="not a screenshot name"):
            read_screenshot(tmp_path, "run-a", name)
    for directory in ("..", ".", "run-a/../run-a", "", "../tmp"):
        with pytest.raises(NoScreenshot):
            read_screenshot(tmp_path, directory, "step-0003-1.jpg")


def test_a_linked_directory_anywhere_on_the_way_is_refused(tmp_path):
    outside = tmp_path / "outside" / "browser"
    outside.mkdir(parents=True)
    (outside / "step-0001-1.jpg").write_bytes(JPEG)
    root = tmp_path / "root"
    (root / "run-b").mkdir(parents=True)
    os.symlink(outside, root / "run-b" / "browser")  # the tool replaced browser/ with a link
    os.symlink(tmp_path / "outside", root / "run-c")  # or the run directory itself
    for directory in ("run-b", "run-c"):
        with pytest.raises(NoScreenshot, match="refused"):
            read_screenshot(root, directory, "step-0001-1.jpg")


def test_a_steps_screenshots_are_its_browser_calls_files(tmp_path, run_dir):
    (run_dir / "step-0003-2.jpg").write_bytes(JPEG)
    (run_dir / "step-0003-1.jpg").write_bytes(JPEG)  # a python call's index: not a browser's screenshot
    assert step_screenshots(tmp_path, "run-a", 3, ["python_execute", "browser_use", "browser_use"]) == {1: "step-0003-2.jpg"}


# ---- the HTTP reader -----------------------------------------------------------------------


async def read(raw: bytes) -> Request:
    reader = asyncio.StreamReader(limit=http_server.LINE_LIMIT)
    reader.feed_data(raw)
    reader.feed_eof()
    return await read_request(reader)


async def test_a_request_is_read_within_its_bounds():
    request = await read(
        b"POST /run/a%2Fstep-1/answer?x=1&x=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\ntext=blue&y"
    )
    assert request.segments() == ["run", "a/step-1", "answer"] and request.query == {"x": "1"}
    assert request.form() == {"text": "blue", "y": ""}
    for raw, status in (
        (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(100)) + b"\r\n", 431),
        (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n", 431),
        (b"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\n\r\n", 411),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET http://evil/ HTTP/1.1\r\n\r\n", 400),
        (b"NONSENSE\r\n\r\n", 400),
    ):
        with pytest.raises(BadRequest) as refused:
            await read(raw)
        assert refused.value.status == status, raw[:60]


# ---- the guard -----------------------------------------------------------------------------


def request_with(**headers: str) -> Request:
    return Request("POST", "/runs", {}, {k.replace("_", "-"): v for k, v in headers.items()})


def test_the_guard_takes_only_its_own_host_origin_and_token():
    guard = Guard("127.0.0.1", 8239)
    cookie = f"{guard.cookie_name}={guard.token}"
    assert guard.host_ok(request_with(host="127.0.0.1:8239")) and guard.host_ok(request_with(host="localhost:8239"))
    for host in ("evil.example:8239", "127.0.0.1:8240", "127.0.0.1", ""):
        assert not guard.host_ok(request_with(host=host)), host
    ok = request_with(host="localhost:8239", origin="http://localhost:8239")
    assert guard.origin_ok(ok)
    for headers in (
        {"host": "localhost:8239"}, {"host": "localhost:8239", "origin": "http://evil.example"},
        {"host": "localhost:8239", "origin": "null"},
        {"host": "localhost:8239", "origin": "http://localhost:8239", "sec_fetch_site": "cross-site"},
    ):
        assert not guard.origin_ok(request_with(**headers)), headers
    assert guard.cookie_ok(request_with(cookie=f"other=1; {cookie}"))
    assert not guard.cookie_ok(request_with(cookie=f"{guard.cookie_name}={guard.token[:-1]}x"))
    assert not guard.cookie_ok(request_with(cookie=f"durable_manus_page_9999={guard.token}"))
    assert guard.token != Guard("127.0.0.1", 8239).token  # new at every start
    name, value = guard.set_cookie()
    assert name == "Set-Cookie" and "HttpOnly" in value and "SameSite=Strict" in value


# ---- escaping ------------------------------------------------------------------------------


def test_hostile_text_is_inert_and_escaped_in_text_and_attributes():
    assert esc(HOSTILE) == "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&quot;&#x27;"
    record = StepRecord(step=2, thought=HOSTILE, tool_calls=[
        ToolCallRecord(id="c", name=HOSTILE, arguments=HOSTILE, observation=HOSTILE, error=True)
    ], note=HOSTILE)
    markup = step_item(record, None, {}, lambda r: {})
    row = RunRow(HOSTILE, HOSTILE, HOSTILE, "RUNNING", HOSTILE, StateClass.RUNNING, 1, datetime.now(timezone.utc))
    listing = runs_page([row], datetime.now(timezone.utc), None, HOSTILE, (False, HOSTILE))
    for text in (markup, listing):
        assert "<script>" not in text and "<img src=x" not in text and "\x1b" not in text and "\x07" not in text
        assert "&lt;script&gt;" in text
    assert run_url("flow-1/step-2", "events") == "/run/flow-1%2Fstep-2/events"
    assert run_url('"><script>') == "/run/%22%3E%3Cscript%3E"


def test_an_event_keeps_its_data_on_data_lines():
    assert event("step", "a\nb", 3) == b"event: step\nid: 3\ndata: a\ndata: b\n\n"
    assert resume_point("2", None) == 2 and resume_point("2", "5") == 5 and resume_point("x", "1" * 20) == 0


# ---- the command line ---------------------------------------------------------------------


def test_ui_parses_its_port_and_host_and_refuses_bad_ones():
    assert parse_command(["ui"]) == RunPage()
    assert parse_command(["ui", "--port", "9000", "--host", "0.0.0.0", "--worker", "never"]) == RunPage(
        port=9000, host="0.0.0.0", worker="never"
    )
    for argv in (["ui", "--port", "0"], ["ui", "--port", "70000"], ["ui", "--port", "x"], ["ui", "--host", " "]):
        with pytest.raises(UsageError):
            parse_command(argv)


def test_a_taken_port_is_one_line_and_exit_1(cli):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = cli("ui", "--port", str(port))
    assert done.returncode == 1, done
    (line,) = done.stderr.strip().splitlines()
    assert f"127.0.0.1:{port}" in line and "--port" in line and "Traceback" not in line


# ---- the manual's screenshots ---------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent
MAX_SCREENSHOT_BYTES = 300_000


def test_the_manual_shows_the_committed_screenshots_the_script_takes():
    import re

    manual = (REPO / "docs" / "run-page.md").read_text(encoding="utf-8")
    shown = re.findall(r"\]\(run-page/([\w-]+\.png)\)", manual)
    scene = (REPO / "testkit" / "run_page_scene.py").read_text(encoding="utf-8")
    taken = [f"{name}.png" for name in re.findall(r'await shoot\(tab, "([\w-]+)"\)', scene)]
    assert sorted(shown) == sorted(taken) and len(taken) == 5
    for name in taken:
        data = (REPO / "docs" / "run-page" / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) <= MAX_SCREENSHOT_BYTES, name


# ---- the think tokens' plug ----------------------------------------------------------------


async def test_without_a_token_source_the_page_gets_no_tokens_and_with_one_each_is_bounded(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from runtime.run_page import think_tokens

    from runtime.live_feed import follow_think as the_live_feed

    assert think_tokens.SOURCE is the_live_feed
    monkeypatch.setattr(think_tokens, "SOURCE", None)  # no source: no tokens, none made up
    assert [e async for e in think_tokens.think_events(tmp_path, "run-a")] == []
    asked = []

    async def follow_think(root: Path, run_dir: str, step: int | None):
        asked.append((root, run_dir, step))
        for kind, text in (("think_started", ""), ("token", "x" * 10_000), ("bogus", "?"), ("think_ended", "")):
            yield SimpleNamespace(run_id="r", step=3, kind=kind, text=text, channel="content", at=0.0)

    monkeypatch.setattr(think_tokens, "SOURCE", follow_think)
    events = [e async for e in think_tokens.think_events(tmp_path, "run-a", 3)]
    assert asked == [(tmp_path, "run-a", 3)]
    assert [e.kind for e in events] == ["think_started", "token", "think_ended"]
    assert len(events[1].text) == think_tokens.TOKEN_TEXT_LIMIT and events[1].step == 3
