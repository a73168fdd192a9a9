"""A token count for workflow code: pure, deterministic, and on the high side.

The think activity counts a request's tokens exactly (activities/token_count.py,
tiktoken), but workflow code cannot load tokenizer tables: the memory window is
trimmed to a token budget by this estimate instead. It weighs the UTF-8 bytes of
a text by kind, computed with C-speed passes (bytes.translate, count and two
regular expressions; ~40 ns a byte, under a millisecond for a 20,000-character
observation), and each message is estimated once, when memory takes it:

- a quarter token per ASCII letter (English words are ~4-5 letters a token);
- a third of a token per digit, plus one per number (tokenizers split numbers
  into groups of at most three digits);
- one per change between lowercase, uppercase and digits (what makes base64,
  hex and identifiers like `aB3x` dense in tokens);
- three quarters per ASCII punctuation mark;
- a twentieth per space, a quarter per tab or line break, and two more per
  run of whitespace other than a single space (a line break, an indentation,
  the padding of aligned columns);
- one per control character and per byte of a non-ASCII character (no token
  is shorter than one byte, so this part can never be low).

Measured against cl100k_base (tests/test_window_budget.py), the estimate is
above the real count for English prose (by ~15-35%), source code (~40-60%),
JSON (~30-55%) and base64 (~35-40%), and about equal for `ls -l`-style
listings and digit strings. It is low for long runs of random lowercase
letters (about half the real count) and of spaces mixed with line breaks
(~60%), and for lists of short numbers each after a space (~85%); none of
these is what prose, code or encodings look like. o200k_base (the encoding of
newer OpenAI models) generally needs fewer tokens than cl100k_base for the
same text, but is not installed here to measure against.
"""

from __future__ import annotations

import re

from agent_model.messages import Message

TOKENS_PER_MESSAGE = 8
"""Role, separators and tool-call framing around each message: twice what the
chat format spends (activities/token_count.py counts 4)."""
IMAGE_TOKENS = 1445
"""The most one image can cost at high detail: OpenAI's tile formula gives at
most 2 x 4 tiles of 170 tokens (after fitting in 2048 px and scaling the short
side to 768 px), plus 85."""

_SCALE = 60
"""Weights below are in sixtieths of a token, so the sum is exact integer math."""
_LETTER, _DIGIT, _SPACE, _BREAK, _PUNCT, _ONE, _WHITESPACE_RUN = 15, 20, 3, 15, 45, 60, 120

_CLASSES = bytes(
    ord(
        "n" if b >= 128
        else "l" if 97 <= b <= 122
        else "u" if 65 <= b <= 90
        else "d" if 48 <= b <= 57
        else "s" if b == 32
        else "w" if b in (9, 10, 13)
        else "p" if 33 <= b <= 126
        else "c"
    )
    for b in range(256)
)
"""Each byte's kind: lowercase, uppercase, digit, space, other whitespace,
punctuation, control, non-ASCII."""
_CHANGES = (b"lu", b"ul", b"ld", b"dl", b"ud", b"du")
_NUMBER = re.compile(r"[0-9]+")
_WHITESPACE_RUNS = re.compile(r"[ \t\r\n]{2,}|[\t\r\n]")


def estimate_tokens(text: str | None) -> int:
    """Tokens of `text`, estimated on the high side (see the module's notes)."""
    if not text:
        return 0
    kinds = text.encode("utf-8", "surrogatepass").translate(_CLASSES)
    count = kinds.count
    sixtieths = (
        _LETTER * (count(b"l") + count(b"u"))
        + _DIGIT * count(b"d")
        + _SPACE * count(b"s")
        + _BREAK * count(b"w")
        + _PUNCT * count(b"p")
        + _ONE * (count(b"c") + count(b"n") + sum(count(pair) for pair in _CHANGES))
        + _ONE * len(_NUMBER.findall(text))
        + _WHITESPACE_RUN * len(_WHITESPACE_RUNS.findall(text))
    )
    return -(-sixtieths // _SCALE)


def message_tokens(message: Message) -> int:
    """Estimated tokens that `message` adds to a request."""
    tokens = TOKENS_PER_MESSAGE + estimate_tokens(message.content) + estimate_tokens(message.name)
    tokens += estimate_tokens(message.tool_call_id)
    for call in message.tool_calls or []:
        tokens += TOKENS_PER_MESSAGE + estimate_tokens(call.id)
        tokens += estimate_tokens(call.function.name) + estimate_tokens(call.function.arguments)
    if message.base64_image or message.image_file:
        tokens += IMAGE_TOKENS
    return tokens
