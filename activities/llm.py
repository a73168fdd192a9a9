"""The think activity: one Chat Completions call through the OpenAI SDK.

Temporal owns retries (the SDK's are off), so this module's job is to classify
each failure as worth retrying or not, and to say so in the ApplicationError.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import httpx2
import openai
from openai._constants import RAW_RESPONSE_HEADER
from openai.types.chat import ChatCompletion
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.context_store import ContextStore
from activities.lost_worker import release_run_from_lost_worker
from activities.think_context_cache import Resolved, ThinkContextCache
from activities.token_count import count_prompt_tokens
from agent_model.activity_specs import (
    MAX_THINK_RETRY_SECONDS,
    NON_RETRYABLE_THINK_ERRORS,
    REPLY_TOO_LARGE_ERROR,
    THINK_CONFIG,
    TOKEN_LIMIT_ERROR,
)
from agent_model.llm_io import ThinkRequest, ThinkResponse
from agent_model.messages import Function, Message, ToolCall, assistant_message
from agent_model.payload import json_size
from agent_model.usage import TokenUsage
from agent_model.think_context import (
    MESSAGE_DIGEST_CHARS,
    ContextSync,
    canonical,
    message_bytes,
)
from config.settings import LLMSettings

HEARTBEAT_INTERVAL = 1.0
"""Seconds between heartbeats while a think runs. A cancellation
reaches the activity only in a heartbeat's response, so this (with the worker's
max_heartbeat_throttle_interval of 1 s) bounds how long a cancelled run's call
goes on."""
ABANDON_WAIT = 1.0
"""Seconds a cancelled think waits for its HTTP call to unwind (closing the
connection) before it reports the cancellation."""
RETRYABLE_STATUS = {408, 409, 429}
"""Plus every 5xx: timeouts, conflicts, rate limits and server errors pass."""
REASONING_MODEL_PREFIXES = ("o1", "o3", "o4")
"""Models that take max_completion_tokens and no temperature."""

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

NON_RETRYABLE_ERRORS = list(NON_RETRYABLE_THINK_ERRORS)

THINK_OPTIONS: dict[str, Any] = THINK_CONFIG.options()
"""Options for workflow.execute_activity("think", ...); each bound's reason is in
agent_model/activity_specs.py."""


def is_reasoning_model(model: str) -> bool:
    return model.startswith(REASONING_MODEL_PREFIXES)


def make_client(settings: LLMSettings) -> openai.AsyncOpenAI:
    key = settings.api_key.get_secret_value() if settings.api_key else None
    if settings.api_type == "azure":
        return openai.AsyncAzureOpenAI(
            azure_endpoint=settings.base_url,
            api_key=key,
            api_version=settings.api_version,
            max_retries=0,
            timeout=settings.request_timeout,
        )
    return openai.AsyncOpenAI(
        base_url=settings.base_url, api_key=key, max_retries=0, timeout=settings.request_timeout
    )


def request_params(settings: LLMSettings, request: ThinkRequest, parts: Resolved) -> dict[str, Any]:
    """The Chat Completions body; `parts` is the request as the context cache resolved it."""
    messages = [m.to_openai() for m in parts.messages]
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


def _retry_after(error: openai.APIStatusError) -> timedelta | None:
    value = error.response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    if seconds is None or seconds < 0:
        return None
    # Never wait longer than the retry policy's own longest interval.
    return timedelta(seconds=min(seconds, MAX_RETRY_INTERVAL.total_seconds()))


def as_sdk_error(error: httpx2.TransportError) -> openai.OpenAIError:
    if isinstance(error, httpx2.TimeoutException):
        return openai.APITimeoutError(request=error.request)
    return openai.APIConnectionError(request=error.request)


def classify(error: Exception, model: str) -> ApplicationError:
    """The ApplicationError to raise for an SDK failure."""
    if isinstance(error, openai.APITimeoutError):
        return ApplicationError(f"LLM call timed out ({model})", type="LLMTimeout")
    if isinstance(error, openai.APIConnectionError):
        return ApplicationError(f"cannot reach the LLM endpoint: {error}", type="LLMConnectionError")
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        message = f"LLM endpoint answered {status}: {error.message}"
        if status in RETRYABLE_STATUS or status >= 500:
            return ApplicationError(
                message, type="LLMUnavailable", next_retry_delay=_retry_after(error)
            )
        if status == 400 and "tool" in str(error.message).lower():
            message += f" (does model {model!r} support function calling?)"
        return ApplicationError(message, type="LLMRequestRejected", non_retryable=True)
    return ApplicationError(f"LLM call failed: {error!r}", type="LLMError")


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
        raise ApplicationError("the LLM answered with a body that is not a JSON object", type="LLMInvalidResponse")
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

    def __init__(self, llm_profiles: dict[str, LLMSettings], context_store: ContextStore | None = None) -> None:
        self._profiles = llm_profiles
        self._clients: dict[str, openai.AsyncOpenAI] = {}
        self.context_cache = ThinkContextCache()
        self.context_store = context_store

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
            while True:
                done, _ = await asyncio.wait({work}, timeout=HEARTBEAT_INTERVAL)
                if done:
                    return work.result()
                activity.heartbeat()
        finally:
            if not work.done():  # cancelled while waiting: abandon the model's call
                work.cancel()
                # The endpoint sees the connection close before the run hears that
                # the think is over.
                await asyncio.wait({work}, timeout=ABANDON_WAIT)

    async def _answer(self, request: ThinkRequest) -> ThinkResponse:
        await release_run_from_lost_worker()
        settings = self._profiles.get(request.llm)
        if settings is None:
            raise ApplicationError(
                f"the worker has no LLM profile {request.llm!r}", type="UnknownLLMProfile", non_retryable=True
            )
        parts = await self._resolve(request)
        if settings.max_input_tokens is not None:
            needed = count_prompt_tokens(settings.model, parts.messages, parts.system_prompt, parts.tools)
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
        body = request_params(settings, request, parts)
        asked = time.monotonic()
        try:
            completion = await self._complete(request.llm, body)
        except openai.OpenAIError as e:
            raise classify(e, settings.model) from None
        except httpx2.TransportError as e:  # while reading the body, outside the SDK
            raise classify(as_sdk_error(e), settings.model) from None

        if not completion.choices:
            raise ApplicationError("LLM answered with no choices", type="LLMEmptyResponse")
        choice = completion.choices[0]
        tool_calls = [
            ToolCall(id=c.id, function=Function(name=c.function.name, arguments=c.function.arguments or ""))
            for c in choice.message.tool_calls or []
            if getattr(c, "function", None) is not None
        ]
        usage = TokenUsage(
            prompt_tokens=completion.usage.prompt_tokens if completion.usage else 0,
            completion_tokens=completion.usage.completion_tokens if completion.usage else 0,
        )
        record_call(request.llm, settings.model, time.monotonic() - asked, usage)
        message = assistant_message(choice.message.content, tool_calls)
        check_reply_size(message)
        return ThinkResponse(
            message=message,
            usage=usage,
            finish_reason=choice.finish_reason,
            model=completion.model or settings.model,
        )
