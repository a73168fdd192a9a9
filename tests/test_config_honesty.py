"""Config is honest: a placeholder key is refused at load, the worker says
which config and mcp.json it read and what they enable, and a running worker
says once that a file it read has changed (a restart applies it)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from config.placeholder_keys import is_placeholder
from config.settings import ConfigError, load_settings
from runtime.config_report import ConfigWatch, changed_line, config_lines, watch_config
from testkit.e2e import run_cli

PLACEHOLDER_LINE = "api_key is a placeholder (like the example's \"sk-...\"), not a key"


@pytest.mark.parametrize("key", ["sk-...", "YOUR_API_KEY", "your-key-here", "sk-xxxxxxxx", "<your key>", "sk-…"])
def test_a_placeholder_key_is_refused_at_load_without_quoting_it(tmp_path, key):
    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\napi_key = "{key}"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, env={})
    assert str(refused.value) == f"{config}: [llm] {PLACEHOLDER_LINE}: put your key there, or leave api_key out and set OPENAI_API_KEY"


def test_a_placeholder_in_the_environment_is_refused_too():
    with pytest.raises(ConfigError, match="placeholder"):
        load_settings(env={"DURABLE_MANUS_CONFIG": "", "OPENAI_API_KEY": "sk-..."})


@pytest.mark.parametrize("key", ["sk-test", "sk-proj-Ab3dE", "test-key", "k", "gsk_live_42"])
def test_real_looking_keys_pass(key):
    assert not is_placeholder(key)


def test_a_keyless_server_may_be_given_any_word(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[llm]\napi_type = "ollama"\nbase_url = "http://127.0.0.1:11434/v1"\napi_key = "none"\n')
    assert load_settings(config, env={}).llm["default"].api_key is not None


def test_the_starter_refuses_the_example_s_placeholder_before_reaching_any_server(cli, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[llm]\napi_key = "sk-..."\n', encoding="utf-8")
    proc = cli("run", "hello", env_extra={"DURABLE_MANUS_CONFIG": str(config), "OPENAI_API_KEY": None})
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert PLACEHOLDER_LINE in line and "cannot reach Temporal" not in line, line
    assert proc.stdout == ""


def write_config_and_mcp(tmp_path: Path) -> tuple[Path, Path]:
    config = tmp_path / "config.toml"
    config.write_text(
        '[llm]\nmodel = "m-test"\nbase_url = "http://user:pw@127.0.0.1:8000/v1"\napi_key = "sk-secret-42"\n'
        '[llm.vision]\nmodel = "v-test"\n',
        encoding="utf-8",
    )
    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"files": {"command": "true"}}}), encoding="utf-8")
    return config, mcp


def test_the_lines_name_the_files_and_what_they_enable_never_a_key_or_password(tmp_path):
    config, mcp = write_config_and_mcp(tmp_path)
    read, enables = config_lines(load_settings(config, env={}))
    assert read == f"config: {config}; MCP servers: {mcp}"
    assert enables.startswith("config enables: LLM m-test at 127.0.0.1:8000 (openai), profiles vision; web_search ")
    assert enables.endswith("MCP servers: files; payloads not encrypted")
    assert "sk-secret-42" not in read + enables and "pw" not in read + enables


def test_without_a_config_file_the_line_says_so(tmp_path):
    settings = load_settings(env={"DURABLE_MANUS_CONFIG": "", "OPENAI_API_KEY": "k"})
    if settings.config_file is not None:
        pytest.skip("this checkout has a config/config.toml")
    read, _ = config_lines(settings)
    assert read.startswith("config: no config file (config/config.toml is absent); the environment only"), read


def test_worker_py_logs_what_it_read_before_it_connects(tmp_path):
    config, mcp = write_config_and_mcp(tmp_path)
    proc = run_cli(
        "--connect-timeout", "1", script="worker.py",
        env_extra={
            "DURABLE_MANUS_CONFIG": str(config), "OPENAI_API_KEY": None, "WORKSPACE_ROOT": str(tmp_path / "ws"),
            "DURABLE_MANUS_TOOL_SANDBOX": "none",
        },
    )
    assert proc.returncode == 2, proc.stderr  # TEMPORAL_ADDRESS 127.0.0.1:9 does not answer
    assert f"config: {config}; MCP servers: {mcp}" in proc.stderr
    assert "config enables: LLM m-test at 127.0.0.1:8000 (openai)" in proc.stderr
    assert "sk-secret-42" not in proc.stderr


async def test_a_changed_config_file_is_told_once_with_what_to_do(tmp_path):
    config, mcp = write_config_and_mcp(tmp_path)
    watch = ConfigWatch.of(load_settings(config, env={}))
    said: list[str] = []
    watching = asyncio.create_task(watch_config(watch, said.append, every=0.01))
    try:
        await asyncio.sleep(0.05)
        assert said == []  # nothing changed yet
        stat = config.stat()
        config.write_text(config.read_text() + "# edited\n", encoding="utf-8")
        os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        for _ in range(200):
            if said:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # and no second line for the same change
    finally:
        watching.cancel()
    assert said == [changed_line(config)]
    assert "restart the worker" in said[0]


async def test_a_rotated_key_file_is_told_like_a_changed_config_file(tmp_path):
    from config.key_file import add_new_key

    keys = tmp_path / "keys.json"
    add_new_key(keys)
    settings = load_settings(env={"DURABLE_MANUS_CONFIG": "", "DURABLE_MANUS_ENCRYPTION_KEY_FILE": str(keys)})
    assert config_lines(settings)[1].endswith(f"payloads encrypted (key file {keys})")
    watch = ConfigWatch.of(settings)
    stat = keys.stat()
    add_new_key(keys)  # keygen again: a new current key
    os.utime(keys, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert keys in watch.changed() and watch.changed() == []
