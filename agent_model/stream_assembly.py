"""A streamed Chat Completions reply put back together: the chunks of
`stream=True` assembled into the body the same call answers without
streaming, so the think reads one shape either way (activities/reply_reading.py).

Pure and defensive: a chunk is any JSON the server sent. What is not a string
where text belongs is left out, as the reader would make it text anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_model.live_events import Channel

Delta = tuple[Channel, str]
"""(channel, text) that a chunk added: "content", or "tool_call" for a call's name and arguments."""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _index(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


@dataclass
class _Call:
    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: str = ""


@dataclass
class _Choice:
    content: str = ""
    refusal: str = ""
    has_content: bool = False
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: Any = None
    shown: bool = False
    """Some text of this choice went to the live feed already."""


class ChunkAssembler:
    """Feed it each chunk (a parsed `data:` line); `completion()` is the
    non-streamed body's equivalent."""

    def __init__(self) -> None:
        self.id: Any = None
        self.model: Any = None
        self.created: Any = None
        self.usage: Any = None
        self.system_fingerprint: Any = None
        self.choices: dict[int, _Choice] = {}
        self.characters = 0
        """Of content, refusals, tool-call names and arguments, all choices together."""

    def add(self, chunk: Any) -> list[Delta]:
        """Takes one chunk in; returns the text it added to the first choice, for the live feed."""
        if not isinstance(chunk, dict):
            return []
        for name in ("id", "model", "created", "system_fingerprint"):
            if getattr(self, name) is None and chunk.get(name) is not None:
                setattr(self, name, chunk[name])
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        added: list[Delta] = []
        for position, choice in enumerate(choices if isinstance(choices, list) else []):
            if not isinstance(choice, dict):
                continue
            index = _index(choice.get("index"), position)
            own = self.choices.setdefault(index, _Choice())
            if choice.get("finish_reason") is not None:
                own.finish_reason = choice["finish_reason"]
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            deltas = self._delta(own, delta)
            self.characters += sum(len(text) for _, text in deltas) + len(_text(delta.get("refusal")))
            if index == 0:
                added += deltas
        return added

    @staticmethod
    def _delta(own: _Choice, delta: dict[str, Any]) -> list[Delta]:
        added: list[Delta] = []
        if "content" in delta and delta["content"] is not None:
            own.has_content = True
            piece = _text(delta["content"])
            own.content += piece
            if piece:
                own.shown = True
                added.append(("content", piece))
        own.refusal += _text(delta.get("refusal"))
        calls = delta.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else []):
            if not isinstance(call, dict):
                continue
            index = _index(call.get("index"), position)
            mine = own.calls.setdefault(index, _Call())
            # Some servers repeat the id (or the whole name) in every chunk: keep the first.
            if not mine.id:
                mine.id = _text(call.get("id"))
            if isinstance(call.get("type"), str) and call["type"]:
                mine.type = call["type"]
            function = call.get("function")
            if not isinstance(function, dict):
                continue
            name, arguments = _text(function.get("name")), _text(function.get("arguments"))
            text = ""
            if name and name != mine.name:
                # A call's name is shown once, ahead of its arguments; calls one per line.
                text = ("\n" if own.shown and not mine.name else "") + name
                mine.name += name
            if arguments and not mine.arguments and mine.name:
                text += " "
            mine.arguments += arguments
            text += arguments
            if text:
                own.shown = True
                added.append(("tool_call", text))
        return added

    @property
    def finished(self) -> bool:
        """A choice has its finish reason: what follows is the usage and the end."""
        return any(choice.finish_reason is not None for choice in self.choices.values())

    def completion(self) -> dict[str, Any]:
        """The body a non-streamed call would have answered."""
        choices = []
        for index, own in sorted(self.choices.items()):
            message: dict[str, Any] = {
                "role": "assistant",
                # A streamed call's content often comes as "": a non-streamed reply says null.
                "content": own.content or (None if own.calls or not own.has_content else ""),
                "refusal": own.refusal or None,
            }
            if own.calls:
                message["tool_calls"] = [
                    {"id": call.id, "type": call.type, "function": {"name": call.name, "arguments": call.arguments}}
                    for _, call in sorted(own.calls.items())
                ]
            choices.append({"index": index, "message": message, "logprobs": None, "finish_reason": own.finish_reason})
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage,
        }
        if self.system_fingerprint is not None:
            body["system_fingerprint"] = self.system_fingerprint
        return body
