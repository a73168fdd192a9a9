"""The images a think sends: screenshots the run's tools saved as files
(Message.image_file), read from the run's directory and attached to the request."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from activities.safe_files import Beneath, UnsafeFile
from activities.workspace import InvalidWorkspaceName, Workspace
from agent_model.messages import Message, Role

MAX_IMAGES_SENT = 1
"""Images from files (Message.image_file) attached to one call: each costs up
to ~1.1k tokens, and the newest screenshot is the one that shows the page now."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Largest image file read (5 MiB); a larger one is not sent."""


@dataclass(frozen=True)
class Attachment:
    """What a call carries for one message's image_file: the image, or a note."""

    url: str | None = None
    """The image as a data URL; None: `note` is sent in its place."""
    note: str = ""


def image_type(data: bytes) -> str | None:
    """The MIME type of a PNG, JPEG or WebP image, told by its first bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def read_image(run_dir: Path, path: str) -> str | None:
    """The image at `path` in the run directory as a data URL, or None when it
    is missing, no image, too large, or not a regular file inside run_dir (a
    tool may have swapped it for a symlink out, or for a FIFO)."""
    try:
        with Beneath(run_dir) as directory:
            data = directory.read_file(directory.relative(path), limit=MAX_IMAGE_BYTES)
    except (OSError, ValueError, UnsafeFile):
        return None
    mime = image_type(data)
    return f"data:{mime};base64,{base64.b64encode(data).decode()}" if mime else None


def attach_images(messages: list[Message], workspace: Workspace | None, name: str | None) -> dict[int, Attachment]:
    """By position in `messages`, what stands for each user message's
    image_file: the newest MAX_IMAGES_SENT readable images, notes for the rest."""
    run_dir = None
    if workspace is not None and name is not None:
        try:
            run_dir = workspace.run_dir(name)
        except (InvalidWorkspaceName, OSError):
            pass
    shown: dict[int, Attachment] = {}
    attached = 0
    for position in reversed(range(len(messages))):
        message = messages[position]
        path = message.image_file
        if path is None or message.role != Role.USER:
            continue
        if attached >= MAX_IMAGES_SENT:
            shown[position] = Attachment(note=f"[screenshot {path}: not shown, a newer one follows]")
            continue
        url = read_image(run_dir, path) if run_dir is not None else None
        if url is None:
            shown[position] = Attachment(note=f"[screenshot {path}: no longer available]")
        else:
            shown[position] = Attachment(url=url)
            attached += 1
    return shown


def wire_message(message: Message, attachment: Attachment | None) -> dict[str, Any]:
    """The message as the API expects it, with `attachment` for its image_file."""
    out = message.to_openai()
    if attachment is None:
        return out
    content = out["content"]
    if isinstance(content, list):  # it has an inline image too
        parts = content
    else:
        parts = [{"type": "text", "text": content}] if content else []
    if attachment.url is not None:
        parts.append({"type": "image_url", "image_url": {"url": attachment.url}})
    else:
        parts.append({"type": "text", "text": attachment.note})
    out["content"] = parts
    return out


def as_counted(message: Message, attachment: Attachment) -> Message:
    """The message as count_prompt_tokens sees it with `attachment`."""
    if attachment.url is not None:
        return message.model_copy(update={"base64_image": attachment.url.partition(",")[2]})
    return message.model_copy(update={"content": f"{message.content or ''}\n{attachment.note}"})
