"""A lean fake of the Chat Completions endpoint for the benchmarks.

Why not testkit/fake_openai.py: that one is a ThreadingHTTPServer (one OS thread
per connection) built for scripting failures in tests. Inside the benchmark
process it would share the GIL with the worker being measured, and 200
connections mean 200 threads. This one is a single asyncio loop in a child
process, so the worker under test never waits for the fake's CPU time. It still
speaks real HTTP/1.1 (keep-alive, Content-Length or chunked bodies) and returns
real `chat.completion` objects, so the openai SDK runs its full code path.

Every run carries its own script inside its task text (the first user message)
as ``[[bench:{json}]]``; keys:

    tool      name of the tool to call at every turn (default: no tool call)
    args      the tool's arguments (a JSON object)
    first_args
              the arguments of turn 0 instead (e.g. open a page, then scroll it)
    delay     seconds to wait before answering any turn (default 0)
    slow_turn / slow_delay
              the first attempt of turn ``slow_turn`` waits ``slow_delay``
              seconds instead (retries of that turn answer after ``delay``)
    turns     after this many tool-call turns, answer in plain text with no
              tool call (default: call the tool at every turn); the peers'
              agents (bench/peers/) end their runs on that answer
    run       any text that makes the script unique to one run

The turn of a request is the number of assistant messages in it, as in the
test fake; for a script with ``turns``, at least one past the highest turn
its tool call ids name (call_<turn>), so that a run whose window dropped its
oldest turns still ends after ``turns``. The reply text names the turn, so
no two replies of a run are identical (the agent's stuck detector stays quiet).

    python -m bench.fake_llm [--max-seconds S]

prints ``PORT <n>`` on stdout once it listens on 127.0.0.1, and exits when its
stdin closes, on SIGTERM, or after --max-seconds (default 3600).

``GET /stats`` returns every chat request seen so far as JSON: run, turn,
attempt, received/answered wall-clock times (time.time()).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time

DIRECTIVE = re.compile(r"\[\[bench:(\{.*?\})\]\]", re.S)

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


def directive_text(script: dict) -> str:
    """The marker to put in a run's task so the fake follows `script`."""
    return f"[[bench:{json.dumps(script, separators=(',', ':'), sort_keys=True)}]]"


class FakeLLM:
    def __init__(self) -> None:
        self.attempts: dict[tuple[str, int], int] = {}
        self.log: list[dict] = []
        self.count = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    return
                parts = request_line.decode("latin-1").split()
                if len(parts) < 2:
                    return
                method, path = parts[0], parts[1]
                headers: dict[str, str] = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await self._read_body(reader, headers)
                status, payload = await self._answer(method, path.split("?", 1)[0], body)
                head = (
                    f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                    "Content-Type: application/json\r\n"
                    f"Content-Length: {len(payload)}\r\n"
                    "\r\n"
                ).encode("latin-1")
                writer.write(head + payload)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return  # a client that went away (e.g. a killed worker)
        except asyncio.CancelledError:
            return  # shutting down
        finally:
            writer.close()

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            chunks = []
            while True:
                size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(await reader.readexactly(size))
                await reader.readline()
        length = int(headers.get("content-length") or 0)
        return await reader.readexactly(length) if length else b""

    async def _answer(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if method == "GET" and path.rstrip("/").endswith("/stats"):
            return 200, json.dumps(self.log).encode()
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            return 404, _error(f"no such path {method} {path}")
        received = time.time()
        try:
            request = json.loads(body)
            messages = request["messages"]
        except (ValueError, KeyError, TypeError):
            return 400, _error("body is not a chat completions request")
        script, key = _script_of(messages)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if "turns" in script:
            turn = max(turn, _turn_by_call_ids(messages))
        attempt = self.attempts.get((key, turn), 0)
        self.attempts[(key, turn)] = attempt + 1
        entry = {"run": script.get("run", ""), "turn": turn, "attempt": attempt, "received": received}
        self.log.append(entry)

        delay = float(script.get("delay", 0.0))
        if attempt == 0 and script.get("slow_turn") == turn:
            delay = float(script.get("slow_delay", delay))
        if delay > 0:
            await asyncio.sleep(delay)

        self.count += 1
        finished = "turns" in script and turn >= int(script["turns"])
        content = f"Turn {turn}: done, the final answer." if finished else f"Turn {turn}: next action."
        message: dict = {"role": "assistant", "content": content, "refusal": None}
        finish = "stop"
        if script.get("tool") and not finished:
            arguments = script.get("first_args") if turn == 0 and "first_args" in script else script.get("args") or {}
            message["tool_calls"] = [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": script["tool"], "arguments": json.dumps(arguments)},
                }
            ]
            finish = "tool_calls"
        prompt_tokens = len(body) // 4
        completion = {
            "id": f"chatcmpl-bench-{self.count}",
            "object": "chat.completion",
            "created": int(received),
            "model": request.get("model") or "fake",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 12, "total_tokens": prompt_tokens + 12},
        }
        entry["answered"] = time.time()
        return 200, json.dumps(completion).encode()


def _script_of(messages: list) -> tuple[dict, str]:
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            found = DIRECTIVE.search(message["content"])
            if found:
                return json.loads(found.group(1)), found.group(1)
            return {}, message["content"]
    return {}, ""


def _turn_by_call_ids(messages: list) -> int:
    """One past the highest turn named by a tool call id (call_<turn>) in the
    request: a long run's window drops its oldest turns, but the newest call
    it sent back is always there and still names its turn."""
    named = [
        int(call["id"][5:])
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
        if isinstance(call, dict) and str(call.get("id", "")).startswith("call_") and call["id"][5:].isdigit()
    ]
    return max(named) + 1 if named else 0


def _error(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": None}}).encode()


async def serve(max_seconds: float) -> None:
    fake = FakeLLM()
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    # stdin closing means the benchmark that started us is gone.
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not os.read(sys.stdin.fileno(), 64) else None)
    try:
        await asyncio.wait_for(stop.wait(), timeout=max_seconds)
    except asyncio.TimeoutError:
        pass
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Lean fake Chat Completions server for the benchmarks.")
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    args = parser.parse_args()
    asyncio.run(serve(args.max_seconds))


if __name__ == "__main__":
    main()
