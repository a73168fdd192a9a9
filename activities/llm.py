"""The think activity: one Chat Completions call through the OpenAI SDK.

Temporal owns retries (the SDK's are off), so this module's job is to classify
each failure as worth retrying or not, and to say so in the ApplicationError.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import math
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai
from openai._constants import RAW_RESPONSE_HEADER
from openai.types.chat import ChatCompletion
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.context_store import ContextStore
from activities.heartbeats import heartbeating
from activities.lost_worker import release_run_from_lost_worker
from activities.reply_reading import response_of, unreadable_reply, usage_of
from activities.safe_files import Beneath, UnsafeFile
from activities.think_context_cache import Resolved, ThinkContextCache
from activities.token_count import count_prompt_tokens
from activities.workspace import InvalidWorkspaceName, Workspace
from agent_model.activity_specs import MAX_THINK_RETRY_SECONDS, NON_RETRYABLE_THINK_ERRORS, THINK_CONFIG
from agent_model.errors import (
    LLM_CONNECTION_ERROR,
    LLM_EMPTY_RESPONSE_ERROR,
    LLM_ERROR,
    LLM_INVALID_RESPONSE_ERROR,
    LLM_REQUEST_REJECTED_ERROR,
    LLM_TIMEOUT_ERROR,
    LLM_UNAVAILABLE_ERROR,
    REPLY_TOO_LARGE_ERROR,
    TOKEN_LIMIT_ERROR,
    UNKNOWN_LLM_PROFILE_ERROR,
)
from agent_model.llm_io import ThinkRequest, ThinkResponse
from agent_model.messages import Message, Role
from agent_model.payload import json_size
from agent_model.usage import TokenUsage
from agent_model.think_context import (
    MESSAGE_DIGEST_CHARS,
    ContextSync,
    canonical,
    message_bytes,
)
from config.settings import LLMSettings

ABANDON_WAIT = 1.0
"""Seconds a cancelled think waits for its HTTP call to unwind (closing the
connection) before it reports the cancellation."""
RETRYABLE_STATUS = {408, 409, 429}
"""Plus every 5xx: timeouts, conflicts, rate limits and server errors pass."""
REASONING_MODEL = re.compile(r"(o[1-9]|gpt-5(\.\d+)?)(-.*)?")
"""OpenAI's reasoning models (o1, o3-mini, o4-mini-2025-04-16, gpt-5, gpt-5.1,
gpt-5-mini, ...): they refuse max_tokens and any temperature but the default."""
CHAT_VARIANT = re.compile(r"gpt-5(\.\d+)?-chat(-.*)?")
"""gpt-5-chat-latest and the like: GPT-5's non-reasoning variants."""
KEY_PLACEHOLDER = "no-key"
"""Sent to a server that needs no key (KEYLESS_API_TYPES) when none is set:
the SDK will not make a client without one."""

MAX_RETRY_INTERVAL = timedelta(seconds=MAX_THINK_RETRY_SECONDS)

CHAT_COMPLETIONS_PATH = "/chat/completions"
"""Relative to base_url; the Azure client maps it to its deployment URL."""

MAX_REPLY_BYTES = 512 * 1024
"""Largest reply (its content and tool calls, as JSON) a think returns: the
reply is written into the run's history and result, which Temporal refuses
over 2 MiB."""
MAX_BODY_BYTES = 4 * MAX_REPLY_BYTES
"""Largest HTTP body read: the body of any reply within MAX_REPLY_BYTES is
smaller, since JSON escapes (\\u00e9) at most triple a character's size."""

MAX_IMAGES_SENT = 1
"""Images from files (Message.image_file) attached to one call: each costs up
to ~1.1k tokens, and the newest screenshot is the one that shows the page now."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Largest image file read (5 MiB); a larger one is not sent."""
VISION_LLM = "vision"
"""The LLM profile (`[llm.vision]`) that answers calls with an image attached,
when the worker has one."""

NON_RETRYABLE_ERRORS = list(NON_RETRYABLE_THINK_ERRORS)

THINK_OPTIONS: dict[str, Any] = THINK_CONFIG.options()
"""Options for workflow.execute_activity("think", ...); each bound's reason is in
agent_model/activity_specs.py."""


@functools.cache  # asked on every think; a profile's model does not change
def is_reasoning_model(model: str) -> bool:
    # Gateways name models with a provider in front: openai/o3-mini.
    name = model.rsplit("/", 1)[-1].lower()
    return REASONING_MODEL.fullmatch(name) is not None and CHAT_VARIANT.fullmatch(name) is None


def azure_address(base_url: str) -> dict[str, str]:
    """How AsyncAzureOpenAI is told where to send requests. A base_url with a
    path (OpenManus's `<endpoint>/openai/deployments/<id>`, or `<endpoint>/openai`)
    is the client's base URL as is, as OpenManus passes it; a bare `<endpoint>`
    is the resource endpoint. Without /deployments in the path the SDK adds
    /deployments/<model>, so the model names the deployment."""
    if urlsplit(base_url).path.strip("/"):
        return {"base_url": base_url}
    return {"azure_endpoint": base_url}


def make_client(settings: LLMSettings) -> openai.AsyncOpenAI:
    key = settings.api_key.get_secret_value() if settings.api_key else None
    if not key and not settings.needs_key:
        key = KEY_PLACEHOLDER
    common: dict[str, Any] = {"api_key": key, "max_retries": 0, "timeout": settings.request_timeout}
    if settings.api_type == "azure":
        return openai.AsyncAzureOpenAI(api_version=settings.api_version, **azure_address(settings.base_url), **common)
    return openai.AsyncOpenAI(base_url=settings.base_url, **common)


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


def request_params(
    settings: LLMSettings, request: ThinkRequest, parts: Resolved, shown: dict[int, Attachment] | None = None
) -> dict[str, Any]:
    """The Chat Completions body; `parts` is the request as the context cache
    resolved it, `shown` what stands for its messages' image files."""
    shown = shown or {}
    messages = [wire_message(m, shown.get(i)) for i, m in enumerate(parts.messages)]
    if parts.system_prompt:
        messages.insert(0, {"role": "system", "content": parts.system_prompt})
    params: dict[str, Any] = {"model": settings.model, "messages": messages, "stream": False}
    if is_reasoning_model(settings.model):
        params["max_completion_tokens"] = settings.max_tokens
    else:
        params["max_tokens"] = settings.max_tokens
        params["temperature"] = settings.temperature
    if parts.tools:
        params["tools"] = parts.tools
        params["tool_choice"] = request.tool_choice.value
    return params


def _header_number(error: openai.APIStatusError, name: str) -> float | None:
    try:
        value = float(error.response.headers.get(name, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _retry_after(error: openai.APIStatusError) -> timedelta | None:
    """The wait the server asks for: retry-after-ms (OpenAI, Azure), else
    retry-after in seconds."""
    milliseconds = _header_number(error, "retry-after-ms")
    seconds = milliseconds / 1000 if milliseconds is not None else _header_number(error, "retry-after")
    if seconds is None:
        return None
    # Never wait longer than the retry policy's own longest interval.
    return timedelta(seconds=min(seconds, MAX_RETRY_INTERVAL.total_seconds()))


def _server_says_retry(error: openai.APIStatusError) -> bool | None:
    """The x-should-retry header: the server's own word on whether asking again may succeed."""
    value = error.response.headers.get("x-should-retry", "").strip().lower()
    return {"true": True, "false": False}.get(value)


def as_sdk_error(error: httpx2.TransportError) -> openai.OpenAIError:
    if isinstance(error, httpx2.TimeoutException):
        return openai.APITimeoutError(request=error.request)
    return openai.APIConnectionError(request=error.request)


def classify(error: Exception, model: str) -> ApplicationError:
    """The ApplicationError to raise for an SDK failure."""
    if isinstance(error, openai.APITimeoutError):
        return ApplicationError(f"LLM call timed out ({model})", type=LLM_TIMEOUT_ERROR)
    if isinstance(error, openai.APIConnectionError):
        return ApplicationError(f"cannot reach the LLM endpoint: {error}", type=LLM_CONNECTION_ERROR)
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        message = f"LLM endpoint answered {status}: {error.message}"
        retryable = status in RETRYABLE_STATUS or status >= 500
        verdict = _server_says_retry(error)
        if verdict is not None:
            retryable = verdict
        if retryable:
            return ApplicationError(
                message, type=LLM_UNAVAILABLE_ERROR, next_retry_delay=_retry_after(error)
            )
        if verdict is False:
            message += " (the endpoint says not to retry)"
        if status == 400 and "tool" in str(error.message).lower():
            message += f" (does model {model!r} support function calling?)"
        return ApplicationError(message, type=LLM_REQUEST_REJECTED_ERROR, non_retryable=True)
    return ApplicationError(f"LLM call failed: {error!r}", type=LLM_ERROR)


def reply_too_large(detail: str) -> ApplicationError:
    # Asking again costs as much and gets a reply as large.
    return ApplicationError(detail, type=REPLY_TOO_LARGE_ERROR, non_retryable=True)


async def read_body(response: httpx2.Response, limit: int = MAX_BODY_BYTES) -> bytes:
    """The response's body, refused (unread) when it declares or turns out to
    be over `limit` bytes."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise reply_too_large(f"the reply's body has {declared} bytes, over the limit of {limit}")
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise reply_too_large(f"the reply's body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def completion_from(body: bytes) -> ChatCompletion:
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ApplicationError("the LLM answered with a body that is not a JSON object", type=LLM_INVALID_RESPONSE_ERROR)
    return ChatCompletion.construct(**data)


def check_reply_size(message: Message) -> None:
    size = json_size(message)
    if size > MAX_REPLY_BYTES:
        raise reply_too_large(f"the reply has {size} bytes of content and tool calls, over the limit of {MAX_REPLY_BYTES}")


def record_call(llm: str, model: str, seconds: float, usage: TokenUsage) -> None:
    """The worker's metrics of one answered LLM call (worker.py --metrics)."""
    meter = activity.metric_meter().with_additional_attributes({"llm": llm, "model": model})
    meter.create_histogram("durable_manus_think_llm_ms", "Milliseconds the model took to answer a think", "ms").record(
        round(seconds * 1000)
    )
    meter.create_counter("durable_manus_prompt_tokens", "Prompt tokens the model reported").add(usage.prompt_tokens)
    meter.create_counter("durable_manus_completion_tokens", "Completion tokens the model reported").add(
        usage.completion_tokens
    )


def _fetch(store: ContextStore, lacking: list[tuple[str, str]]) -> dict[str, Any]:
    """What the store holds of `lacking`, parsed; the store has verified each blob's digest."""
    found: dict[str, Any] = {}
    for kind, name in lacking:
        data = store.get(name)
        if data is None:
            break  # the think cannot be completed: the workflow resends the window
        try:
            if kind == "message":
                found[name] = Message.model_validate_json(data)
            elif kind == "system":
                found[name] = data.decode()
            else:
                found[name] = json.loads(data)
        except ValueError:
            break
    return found


def _save(store: ContextStore, request: ThinkRequest) -> None:
    """Writes what the request carried, so any worker can serve the run's next think."""
    for message in request.messages:
        store.put(message_bytes(message), MESSAGE_DIGEST_CHARS)
    if request.system_prompt is not None:
        store.put(canonical(request.system_prompt), 32)
    if request.tools is not None:
        store.put(canonical(request.tools), 32)


class LLMActivities:
    """Holds the worker's LLM settings (and keys), one client per LLM profile,
    and the runs' cached context windows."""

    def __init__(
        self,
        llm_profiles: dict[str, LLMSettings],
        context_store: ContextStore | None = None,
        workspace: Workspace | None = None,
    ) -> None:
        self._profiles = llm_profiles
        self._clients: dict[str, openai.AsyncOpenAI] = {}
        self.context_cache = ThinkContextCache()
        self.context_store = context_store
        self.workspace = workspace
        """Where the runs' image files are; None: they are never sent."""

    async def _resolve(self, request: ThinkRequest) -> Resolved:
        """The complete request: from the request, this worker's cache, and
        what the shared store holds; the new parts are then written to the store."""
        meter = activity.metric_meter()
        fetched: dict[str, Any] = {}
        lacking = self.context_cache.lacking(request) if request.context is not None else []
        if lacking and self.context_store is not None:
            started = time.monotonic()
            # Twice: another think may evict this run's cached window while the first fetch runs.
            for _ in range(2):
                wanted = [(kind, name) for kind, name in self.context_cache.lacking(request) if name not in fetched]
                if not wanted or not all(name for _, name in wanted):
                    break
                found = await asyncio.to_thread(_fetch, self.context_store, wanted)
                fetched.update(found)
                if len(found) < len(wanted):
                    break  # the store lacks it too
            meter.create_histogram(
                "think_context_fetch_ms", "Time to fetch a think's missing context from the shared store", "ms"
            ).record(round((time.monotonic() - started) * 1000))
        try:
            parts = self.context_cache.resolve(request, fetched)
        except ApplicationError:
            meter.create_counter(
                "think_context_misses", "Thinks whose context neither the worker nor the shared store held"
            ).add(1)
            raise
        if request.context is not None:
            if lacking:
                meter.create_counter(
                    "think_context_store_fetches", "Thinks completed from the shared context store"
                ).add(1)
            elif not ContextSync.is_complete(request):
                meter.create_counter(
                    "think_context_hits", "Thinks whose context the worker held in memory"
                ).add(1)
            if self.context_store is not None:
                try:
                    await asyncio.to_thread(_save, self.context_store, request)
                except OSError as e:
                    # Only other workers' next thinks depend on it, and they fall back to a resend.
                    activity.logger.warning("cannot write the think's context to the shared store: %s", e)
        return parts

    def _client(self, name: str) -> openai.AsyncOpenAI:
        if name not in self._clients:
            self._clients[name] = make_client(self._profiles[name])
        return self._clients[name]

    async def _complete(self, name: str, body: dict[str, Any]) -> ChatCompletion:
        """One Chat Completions call whose reply body is read only up to MAX_BODY_BYTES."""
        response = await self._client(name).post(
            CHAT_COMPLETIONS_PATH,
            body=body,
            cast_to=ChatCompletion,
            # The SDK then hands back the response with its body still unread.
            options={"headers": {RAW_RESPONSE_HEADER: "stream"}},
        )
        try:
            return completion_from(await read_body(response.http_response))
        finally:
            await response.close()

    @activity.defn(name="think")
    async def think(self, request: ThinkRequest) -> ThinkResponse:
        # Heartbeats cover the whole attempt, not only the wait for the model:
        # fetching a window from the shared store may take a while too.
        work = asyncio.ensure_future(self._answer(request))
        try:
            async with heartbeating():
                await asyncio.wait({work})
            return work.result()
        finally:
            if not work.done():  # cancelled while waiting: abandon the model's call
                work.cancel()
                # The endpoint sees the connection close before the run hears that
                # the think is over.
                await asyncio.wait({work}, timeout=ABANDON_WAIT)

    async def _answer(self, request: ThinkRequest) -> ThinkResponse:
        await release_run_from_lost_worker()
        if request.llm not in self._profiles:
            raise ApplicationError(
                f"the worker has no LLM profile {request.llm!r}", type=UNKNOWN_LLM_PROFILE_ERROR, non_retryable=True
            )
        parts = await self._resolve(request)
        shown: dict[int, Attachment] = {}
        if any(m.image_file for m in parts.messages):
            shown = await asyncio.to_thread(attach_images, parts.messages, self.workspace, request.workspace)
        with_image = any(a.url is not None for a in shown.values())
        name = VISION_LLM if with_image and VISION_LLM in self._profiles else request.llm
        settings = self._profiles[name]
        if settings.max_input_tokens is not None:
            counted = [as_counted(m, shown[i]) if i in shown else m for i, m in enumerate(parts.messages)]
            needed = count_prompt_tokens(settings.model, counted, parts.system_prompt, parts.tools)
            if needed > settings.max_input_tokens:
                raise ApplicationError(
                    f"request needs {needed} input tokens, over the limit of {settings.max_input_tokens}",
                    needed,
                    settings.max_input_tokens,
                    type=TOKEN_LIMIT_ERROR,
                    non_retryable=True,
                )

        # The parameters are already in wire format: posting them directly skips
        # chat.completions.create's walk over every message and tool schema,
        # ~20 ms of CPU per call with a full memory window (BENCHMARKS.md, P1).
        body = request_params(settings, request, parts, shown)
        asked = time.monotonic()
        try:
            completion = await self._complete(name, body)
        except openai.OpenAIError as e:
            raise classify(e, settings.model) from None
        except httpx2.TransportError as e:  # while reading the body, outside the SDK
            raise classify(as_sdk_error(e), settings.model) from None

        choices = completion.choices
        if not choices:
            raise ApplicationError("LLM answered with no choices", type=LLM_EMPTY_RESPONSE_ERROR)
        # The call is paid for: from here on a reply that cannot be read is a
        # note for the model, never a failed attempt that Temporal would retry.
        usage = usage_of(completion)
        record_call(name, settings.model, time.monotonic() - asked, usage)
        try:
            first = choices[0] if isinstance(choices, list) else None
            response = response_of(completion, first, parts.messages, settings.model)
            check_reply_size(response.message)
        except ApplicationError:
            raise  # a reply too large: refused on purpose
        except Exception as e:  # noqa: BLE001 (whatever the reply held)
            activity.logger.warning("the model's reply could not be read: %s: %s", type(e).__name__, e)
            return unreadable_reply(e, usage, settings.model, parts.messages)
        return response
