"""Images by file (Message.image_file): read by the think activity from the run
directory, so their bytes stay out of the run's history."""

from __future__ import annotations

import asyncio
import base64
import os
import time

import pytest
from temporalio.testing import ActivityEnvironment

from activities import safe_files
from activities.llm import LLMActivities
from activities.workspace import Workspace
from agent_model.llm_io import ThinkRequest
from agent_model.memory import MAX_USER_MESSAGE_BYTES, Memory
from agent_model.messages import Message, assistant_message, tool_message, user_message
from agent_model.think_context import message_digest
from agent_model.token_estimate import IMAGE_TOKENS, message_tokens
from config.settings import LLMSettings
from testkit.fake_openai import FakeOpenAI, Reply

RUN = "run-images"

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 40
JPEG = b"\xff\xd8\xff\xe0" + b"\x00\x10JFIF" + b"\x01" * 40
WEBP = b"RIFF\x30\x00\x00\x00WEBPVP8 " + b"\x02" * 40


def answer_ok(body: dict, attempt: int) -> Reply:
    return Reply(content="ok")


@pytest.fixture
def workspace(tmp_path) -> Workspace:
    return Workspace(tmp_path / "workspace")


def write(workspace: Workspace, path: str, data: bytes) -> None:
    target = workspace.run_dir(RUN) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def activities_for(fake: FakeOpenAI, workspace: Workspace | None, vision: FakeOpenAI | None = None) -> LLMActivities:
    profiles = {"default": LLMSettings(model="gpt-4o", base_url=fake.base_url, api_key="test-key")}
    if vision is not None:
        profiles["vision"] = LLMSettings(model="vision-model", base_url=vision.base_url, api_key="vision-key")
    return LLMActivities(profiles, workspace=workspace)


def screenshots(*paths: str, workspace: str | None = RUN) -> ThinkRequest:
    messages: list[Message] = [user_message("open the page")]
    for path in paths:
        messages += [assistant_message("looking"), user_message("The page now:", image_file=path)]
    return ThinkRequest(system_prompt="be brief", messages=messages, workspace=workspace)


async def think(activities: LLMActivities, request: ThinkRequest):
    # Bounded: a FIFO read as the image must not hang the think.
    return await asyncio.wait_for(ActivityEnvironment().run(activities.think, request), timeout=20)


def parts_of(body: dict, kind: str) -> list[dict]:
    return [
        part
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == kind
    ]


@pytest.mark.parametrize("data, mime", [(PNG, "image/png"), (JPEG, "image/jpeg"), (WEBP, "image/webp")])
async def test_only_the_newest_image_is_attached(fake_llm, workspace, data, mime):
    fake_llm.responder = answer_ok
    write(workspace, "browser/step-0001-1.png", PNG)
    write(workspace, "browser/step-0002-1.jpg", JPEG)
    # Named .png whatever it holds: the type comes from the bytes.
    write(workspace, "browser/step-0003-1.png", data)
    request = screenshots("browser/step-0001-1.png", "browser/step-0002-1.jpg", "browser/step-0003-1.png")
    await think(activities_for(fake_llm, workspace), request)

    body = fake_llm.requests[0].body
    images = parts_of(body, "image_url")
    assert images == [{"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}]
    assert body["messages"][-1]["content"][-1] == images[0]
    notes = [p["text"] for p in parts_of(body, "text") if p["text"].startswith("[screenshot")]
    assert notes == [
        "[screenshot browser/step-0001-1.png: not shown, a newer one follows]",
        "[screenshot browser/step-0002-1.jpg: not shown, a newer one follows]",
    ]
    # The request the workflow sent kept the path, not the bytes.
    assert request.messages[-1].image_file == "browser/step-0003-1.png"
    assert request.messages[-1].base64_image is None


def symlink_out(workspace: Workspace, tmp_path) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)  # an image, so only the refusal to leave keeps it out
    (workspace.run_dir(RUN) / "browser").mkdir()
    os.symlink(secret, workspace.run_dir(RUN) / "browser/shot.png")


def fifo(workspace: Workspace, tmp_path) -> None:
    (workspace.run_dir(RUN) / "browser").mkdir()
    os.mkfifo(workspace.run_dir(RUN) / "browser/shot.png")


def not_an_image(workspace: Workspace, tmp_path) -> None:
    write(workspace, "browser/shot.png", b"<html>not an image</html>")


def missing(workspace: Workspace, tmp_path) -> None:
    pass


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
@pytest.mark.parametrize("prepare", [symlink_out, fifo, not_an_image, missing])
async def test_an_unreadable_image_becomes_a_note(fake_llm, workspace, tmp_path, monkeypatch, prepare, openat2):
    monkeypatch.setattr(safe_files, "USE_OPENAT2", openat2)
    fake_llm.responder = answer_ok
    prepare(workspace, tmp_path)
    started = time.monotonic()
    response = await think(activities_for(fake_llm, workspace), screenshots("browser/shot.png"))
    assert time.monotonic() - started < 10
    assert response.message.content == "ok"
    body = fake_llm.requests[0].body
    assert parts_of(body, "image_url") == []
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "The page now:"},
        {"type": "text", "text": "[screenshot browser/shot.png: no longer available]"},
    ]


@pytest.mark.parametrize("workspace_name", [None, "../escape", "other-run"])
async def test_without_the_run_directory_the_image_becomes_a_note(fake_llm, workspace, workspace_name):
    fake_llm.responder = answer_ok
    write(workspace, "browser/shot.png", PNG)
    await think(activities_for(fake_llm, workspace), screenshots("browser/shot.png", workspace=workspace_name))
    body = fake_llm.requests[0].body
    assert parts_of(body, "image_url") == []
    assert body["messages"][-1]["content"][-1]["text"] == "[screenshot browser/shot.png: no longer available]"


async def test_a_newer_unreadable_image_leaves_room_for_an_older_one(fake_llm, workspace):
    fake_llm.responder = answer_ok
    write(workspace, "browser/old.png", PNG)
    await think(activities_for(fake_llm, workspace), screenshots("browser/old.png", "browser/gone.png"))
    body = fake_llm.requests[0].body
    assert [p["image_url"]["url"] for p in parts_of(body, "image_url")] == [
        f"data:image/png;base64,{base64.b64encode(PNG).decode()}"
    ]
    assert body["messages"][-1]["content"][-1]["text"] == "[screenshot browser/gone.png: no longer available]"


@pytest.fixture
def vision_llm():
    server = FakeOpenAI(api_key="vision-key", responder=answer_ok).start()
    yield server
    server.stop()


async def test_calls_with_an_image_go_to_the_vision_profile(fake_llm, vision_llm, workspace):
    fake_llm.responder = answer_ok
    write(workspace, "browser/shot.png", PNG)
    activities = activities_for(fake_llm, workspace, vision=vision_llm)

    response = await think(activities, screenshots("browser/shot.png"))
    assert response.model == "vision-model"
    assert [r.model for r in vision_llm.requests] == ["vision-model"]
    assert len(parts_of(vision_llm.requests[0].body, "image_url")) == 1
    assert fake_llm.requests == []

    # No image actually attached (or none at all): the request's own profile.
    for request in (screenshots("browser/missing.png"), screenshots()):
        response = await think(activities, request)
        assert response.model == "gpt-4o"
    assert [r.model for r in fake_llm.requests] == ["gpt-4o", "gpt-4o"]
    assert len(vision_llm.requests) == 1


async def test_without_a_vision_profile_the_request_profile_sees_the_image(fake_llm, workspace):
    fake_llm.responder = answer_ok
    write(workspace, "browser/shot.png", PNG)
    response = await think(activities_for(fake_llm, workspace), screenshots("browser/shot.png"))
    assert response.model == "gpt-4o"
    assert len(parts_of(fake_llm.requests[0].body, "image_url")) == 1


def test_messages_from_before_image_files_load_and_keep_their_digests():
    old = '{"role":"user","content":"look","tool_calls":null,"name":null,"tool_call_id":null,"base64_image":null}'
    message = Message.model_validate_json(old)
    assert message.image_file is None
    assert message.model_dump_json() == old
    # Digests the workflow computed before image_file existed (they name stored messages).
    assert message_digest(user_message("look", base64_image="QUJD")) == "5d3e2aa8d9591753"
    assert message_digest(tool_message("out", "call_1", "bash")) == "e3e45cf36eb83272"
    request = ThinkRequest.model_validate_json('{"llm":"default","messages":[' + old + "]}")
    assert request.workspace is None and request.messages == [message]

    with_file = user_message("look", image_file="browser/a.png")
    assert Message.model_validate_json(with_file.model_dump_json()) == with_file
    assert message_digest(with_file) != message_digest(message)


def test_an_image_file_costs_an_image_and_is_never_cut():
    assert message_tokens(user_message("x", image_file="browser/a.png")) >= IMAGE_TOKENS + message_tokens(
        user_message("x")
    )
    memory = Memory()
    long = user_message("word " * MAX_USER_MESSAGE_BYTES, image_file="browser/a.png")
    memory.add(long)
    assert memory.messages == [long]
