"""Configuration loading and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import REPO_DIR, ConfigError, load_settings
from testkit.settings import config_error, load_config, write_config

EXAMPLE = REPO_DIR / "config" / "config.example.toml"


def test_example_file_parses(tmp_path):
    settings = load_settings(EXAMPLE, env={})
    assert settings.llm["default"].model == "gpt-4o"
    assert settings.workspace_root == REPO_DIR / "workspace"
    assert settings.task_queue == "durable-manus"


def test_profiles_inherit_from_llm_and_env_overrides(tmp_path):
    path = write_config(tmp_path, '[llm]\nmodel = "m1"\napi_key = "k"\nmax_tokens = 10\n[llm.vision]\nmodel = "m2"\n')
    settings = load_settings(path, env={"OPENAI_BASE_URL": "http://x/v1", "TEMPORAL_TASK_QUEUE": "q", "WORKSPACE_ROOT": "/tmp/ws"})
    assert settings.llm["vision"].model == "m2"
    assert settings.llm["vision"].max_tokens == 10
    assert settings.llm["vision"].base_url == "http://x/v1"
    assert settings.llm["default"].api_key.get_secret_value() == "k"
    assert settings.task_queue == "q"
    assert settings.workspace_root == Path("/tmp/ws")
    settings.require_api_keys()


def test_env_only_without_a_file():
    settings = load_settings(env={"OPENAI_API_KEY": "sk-x", "OPENAI_MODEL": "gpt-4o-mini", "DURABLE_MANUS_CONFIG": ""})
    assert settings.llm["default"].model == "gpt-4o-mini"
    assert "sk-x" not in repr(settings)  # keys never show up in logs or reprs


@pytest.mark.parametrize(
    "text, message",
    [
        ("[llm]\nmax_tokens = 'many'\n", "config.toml: [llm] max_tokens: Input should be a valid integer"),
        ("[llm]\nmodle = 'x'\n", "config.toml: [llm] modle: Extra inputs are not permitted"),
        ("[llm]\napi_type = 'aws'\n", "config.toml: [llm] api_type"),
        ("[llm.fast]\ntemperature = 'hot'\n", "config.toml: [llm.fast] temperature"),
        ("[llm\n", "config.toml: not valid TOML"),
        ("[server]\nx = 1\n", "config.toml: unknown section [server]"),
        ("[workspace]\nrot = 'x'\n", "config.toml: [workspace] rot: Extra inputs are not permitted; [workspace] accepts only the field root"),
    ],
)
def test_bad_fields_are_one_line_naming_file_and_field(tmp_path, text, message):
    assert message in config_error(tmp_path, text)


def test_missing_explicit_file_is_an_error_not_a_fallback(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "absent.toml", env={})
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(env={"DURABLE_MANUS_CONFIG": str(tmp_path / "absent.toml")})


def test_missing_key_is_reported_at_start(tmp_path):
    settings = load_config(tmp_path, '[llm]\nmodel = "m"\n')
    with pytest.raises(ConfigError, match=r"\[llm\] api_key is missing; set OPENAI_API_KEY"):
        settings.require_api_keys()


def test_unreadable_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(path, env={})


def test_workflow_sandbox_is_on_unless_turned_off(tmp_path):
    assert load_settings(EXAMPLE, env={}).workflow_sandbox is True
    off = write_config(tmp_path, "[worker]\nworkflow_sandbox = false\n")
    assert load_settings(off, env={}).workflow_sandbox is False
    assert load_settings(off, env={"DURABLE_MANUS_WORKFLOW_SANDBOX": "1"}).workflow_sandbox is True
    assert load_settings(EXAMPLE, env={"DURABLE_MANUS_WORKFLOW_SANDBOX": "false"}).workflow_sandbox is False


@pytest.mark.parametrize(
    "text, env, message",
    [
        ("[worker]\nworkflow_sandbox = 'no'\n", {}, "config.toml: [worker] workflow_sandbox must be true or false, not 'no'"),
        ("[worker]\nsandbox = true\n", {}, "config.toml: [worker] sandbox: Extra inputs are not permitted; [worker] accepts only the fields build_id, deployment_name, workflow_sandbox"),
        ("", {"DURABLE_MANUS_WORKFLOW_SANDBOX": "maybe"}, "workflow_sandbox must be true or false, not 'maybe'"),
    ],
)
def test_bad_workflow_sandbox_values(tmp_path, text, env, message):
    assert message in config_error(tmp_path, text, env)


def test_worker_version_from_the_file_or_the_environment(tmp_path):
    unversioned = load_settings(EXAMPLE, env={})
    assert (unversioned.worker_deployment_name, unversioned.worker_build_id) == (None, None)
    path = write_config(tmp_path, '[worker]\ndeployment_name = "manus"\nbuild_id = "2024-06-01"\n')
    from_file = load_settings(path, env={})
    assert (from_file.worker_deployment_name, from_file.worker_build_id) == ("manus", "2024-06-01")
    env = {"DURABLE_MANUS_DEPLOYMENT_NAME": "agents", "DURABLE_MANUS_BUILD_ID": "git-3f2a1c9"}
    overridden = load_settings(path, env=env)
    assert (overridden.worker_deployment_name, overridden.worker_build_id) == ("agents", "git-3f2a1c9")
    only_env = load_settings(EXAMPLE, env=env)
    assert (only_env.worker_deployment_name, only_env.worker_build_id) == ("agents", "git-3f2a1c9")
    # Compose passes an unset host variable through as empty: that is "not set".
    empty = load_settings(EXAMPLE, env={"DURABLE_MANUS_DEPLOYMENT_NAME": "", "DURABLE_MANUS_BUILD_ID": ""})
    assert empty.worker_deployment_name is None and empty.worker_build_id is None


@pytest.mark.parametrize(
    "text, env, message",
    [
        ('[worker]\ndeployment_name = "manus"\n', {}, "config.toml: [worker] build_id (DURABLE_MANUS_BUILD_ID) is missing"),
        ("", {"DURABLE_MANUS_BUILD_ID": "v2"}, "[worker] deployment_name (DURABLE_MANUS_DEPLOYMENT_NAME) is missing"),
        ('[worker]\ndeployment_name = "durable.manus"\nbuild_id = "v1"\n', {}, "deployment_name must not contain '.'"),
        ('[worker]\ndeployment_name = "manus"\nbuild_id = 7\n', {}, "[worker] build_id must be a non-empty string"),
        ('[worker]\ndeployment_name = " "\nbuild_id = "v1"\n', {}, "[worker] deployment_name must be a non-empty string"),
        ("", {"DURABLE_MANUS_DEPLOYMENT_NAME": "manus", "DURABLE_MANUS_BUILD_ID": "v" * 256}, "build_id is longer than 255"),
    ],
)
def test_bad_worker_versions_are_one_line(tmp_path, text, env, message):
    assert message in config_error(tmp_path, text, env)


@pytest.mark.parametrize(
    "text, field",
    [
        ("[llm]\nrequest_timeout = 0\n", "[llm] request_timeout: Input should be greater than 0"),
        ("[llm]\nrequest_timeout = -5.0\n", "[llm] request_timeout"),
        ("[llm]\nmax_tokens = 0\n", "[llm] max_tokens: Input should be greater than 0"),
        ("[llm]\nmax_input_tokens = -1\n", "[llm] max_input_tokens"),
        ("[llm]\ntemperature = 2.5\n", "[llm] temperature: Input should be less than or equal to 2"),
        ("[llm]\ntemperature = -0.1\n", "[llm] temperature: Input should be greater than or equal to 0"),
        ("[llm]\ntemperature = nan\n", "[llm] temperature"),
        ("[llm.fast]\nmax_tokens = -3\n", "[llm.fast] max_tokens"),
    ],
)
def test_llm_numbers_out_of_range_are_refused_naming_the_field(tmp_path, text, field):
    assert f"config.toml: {field}" in config_error(tmp_path, text)
    bounds = "[llm]\nrequest_timeout = 0.5\nmax_tokens = 1\nmax_input_tokens = 1\ntemperature = 2\n"
    assert load_config(tmp_path, bounds).llm["default"].temperature == 2


def test_a_workspace_root_that_is_a_file_or_under_one_is_refused(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for root, problem in ((a_file, "is not a directory"), (a_file / "below", "cannot be created: Not a directory")):
        settings = load_settings(env={"WORKSPACE_ROOT": str(root), "DURABLE_MANUS_CONFIG": ""})
        with pytest.raises(ConfigError) as err:
            settings.require_workspace_root()
        assert f"workspace root {root} (WORKSPACE_ROOT or [workspace] root) {problem}" in str(err.value)


def test_a_missing_workspace_root_is_created(tmp_path):
    root = tmp_path / "new" / "root"
    load_settings(env={"WORKSPACE_ROOT": str(root), "DURABLE_MANUS_CONFIG": ""}).require_workspace_root()
    assert root.is_dir()


def test_the_starter_s_wait_for_a_lost_server_is_read_from_the_environment():
    assert load_settings(env={"DURABLE_MANUS_SERVER_WAIT": "8"}).server_wait_seconds == 8
    assert load_settings(env={}).server_wait_seconds == 60
    for bad in ("0", "-1", "soon", "nan", "1e9"):
        with pytest.raises(ConfigError, match="DURABLE_MANUS_SERVER_WAIT must be a number of seconds from 1 to 3600"):
            load_settings(env={"DURABLE_MANUS_SERVER_WAIT": bad})


def load_in_time(load, path: Path) -> BaseException | None:
    """What `load(path)` raised, failing the test instead of hanging when it
    blocks (opening a FIFO for reading waits for a writer)."""
    import os
    import threading

    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            load(path)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome.append(e)

    reader = threading.Thread(target=attempt, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # lets the stuck reader go
        pytest.fail(f"loading {path.name} blocked")
    return outcome[0]


@pytest.mark.parametrize("kind", ["fifo", "directory", "huge"])
def test_a_config_that_is_not_a_small_regular_file_is_one_line_not_a_wait(tmp_path, kind):
    import os

    from config.mcp_config import load_mcp_servers

    for name, load in (("config.toml", lambda p: load_settings(p, env={})), ("mcp.json", load_mcp_servers)):
        path = tmp_path / kind / name
        path.parent.mkdir(exist_ok=True)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        else:
            path.write_text("# " + "x" * (2 * 1024 * 1024))
        error = load_in_time(load, path)
        assert isinstance(error, ConfigError), error
        expected = {"fifo": "it is a FIFO", "directory": "it is a directory", "huge": "larger than"}[kind]
        assert expected in str(error) and "\n" not in str(error)


def test_a_config_reached_through_a_symlink_is_read(tmp_path):
    real = tmp_path / "real.toml"
    real.write_text('[llm]\nmodel = "linked-model"\n')
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    assert load_settings(link, env={}).llm["default"].model == "linked-model"


def test_a_deeply_nested_config_is_one_line(tmp_path):
    depth = 100_000
    assert "nested too deeply" in config_error(tmp_path, "x = " + "[" * depth + "]" * depth + "\n")


# ---- the environment variables (config/environment.py) ----------------------------------

BAD_VALUES = {
    "DURABLE_MANUS_CONFIG": "/nonexistent/durable-manus.toml",
    "DURABLE_MANUS_MCP_CONFIG": "config\n/mcp.json",
    "OPENAI_API_KEY": "sk-secret-\n123",
    "OPENAI_BASE_URL": " http://127.0.0.1:8000/v1",
    "OPENAI_MODEL": "gpt-4o\t",
    "OPENAI_API_VERSION": "2024-08-01\n",
    "WORKSPACE_ROOT": "/tmp/runs\n",
    "DURABLE_MANUS_TOOL_SANDBOX": "docker",
    "DURABLE_MANUS_TOOL_NETWORK": "lan",
    "DURABLE_MANUS_WORKFLOW_SANDBOX": "maybe",
    "DURABLE_MANUS_DEPLOYMENT_NAME": "durable.manus",
    "DURABLE_MANUS_BUILD_ID": "v" * 256,
    "BRAVE_API_KEY": "brave-secret\n",
    "TAVILY_API_KEY": " tvly-secret",
    "DURABLE_MANUS_SESSION_IDLE_MINUTES": "0",
    "DURABLE_MANUS_LIVE_STREAM": "maybe",
    "DURABLE_MANUS_LIVE_PRINT": "sometimes",
    "TEMPORAL_TASK_QUEUE": "queue\n",
    "DURABLE_MANUS_SERVER_WAIT": "soon",
    "DURABLE_MANUS_PICKUP_WAIT": "0",
    "DURABLE_MANUS_QUERY_WAIT": "601",
    "DURABLE_MANUS_WORKER_IDLE_EXIT": "-1",
    "DURABLE_MANUS_UI_PORT": "70000",
    "DURABLE_MANUS_TEMPORAL_CLI": "/usr/bin/\ntemporal",
    "DURABLE_MANUS_ENCRYPTION_KEY_FILE": "/keys\n.json",
    "DURABLE_MANUS_CODEC_TOKEN": "too-short-a-token",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://collector:4317",
    "OTEL_SERVICE_NAME": "manus\n",
    "OTEL_SDK_DISABLED": "maybe",
    "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Basic c2VjcmV0\n",
}
"""A value each variable refuses."""


def test_every_variable_has_a_bad_value_here():
    from config.environment import VARIABLES

    assert sorted(BAD_VALUES) == sorted(v.name for v in VARIABLES)


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_bad_value_of_each_variable_is_one_line_naming_it(tmp_path, name):
    from config.environment import BY_NAME

    env = {"DURABLE_MANUS_CONFIG": "", name: BAD_VALUES[name]}
    if name.startswith("DURABLE_MANUS_BUILD") or name.startswith("DURABLE_MANUS_DEPLOYMENT"):
        env |= {"DURABLE_MANUS_DEPLOYMENT_NAME": "manus", "DURABLE_MANUS_BUILD_ID": "v1", name: BAD_VALUES[name]}
    with pytest.raises(ConfigError) as err:
        load_settings(env=env)
    message = str(err.value)
    assert "\n" not in message and name in message, message
    if BY_NAME[name].secret:
        assert BAD_VALUES[name].strip() not in message


def test_every_variable_is_documented_with_what_it_sets():
    from config.environment import VARIABLES

    page = (REPO_DIR / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = page.split("\n## The environment variables\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3:
            rows[cells[0]] = cells[1]
    assert rows == {v.name: v.setting for v in VARIABLES}


def test_a_variable_that_sets_a_key_is_checked_like_the_file_s_value(tmp_path):
    from_file = config_error(tmp_path, '[tools]\nnetwork = "lan"\n')
    from_env = config_error(tmp_path, "", {"DURABLE_MANUS_TOOL_NETWORK": "lan"})
    assert from_env == f"{from_file} (from DURABLE_MANUS_TOOL_NETWORK)"
    assert load_config(tmp_path, '[tools]\nnetwork = "lan"\n', {"DURABLE_MANUS_TOOL_NETWORK": "internet"}).tool_network == "internet"


def test_azure_s_api_version_from_the_environment_only_fills_in(tmp_path):
    azure = '[llm]\napi_type = "azure"\nbase_url = "https://res.openai.azure.com"\napi_key = "k"\n'
    env = {"OPENAI_API_VERSION": "2024-10-21"}
    assert load_config(tmp_path, azure, env).llm["default"].api_version == "2024-10-21"
    pinned = load_config(tmp_path, azure + 'api_version = "2024-08-01-preview"\n', env)
    assert pinned.llm["default"].api_version == "2024-08-01-preview"


def test_a_huge_config_path_is_still_a_short_line():
    path = "/nonexistent/" + "d" * 100_000 + ".toml"
    with pytest.raises(ConfigError) as err:
        load_settings(env={"DURABLE_MANUS_CONFIG": path})
    message = str(err.value)
    assert "\n" not in message and len(message) <= 500 and message.startswith("/nonexistent/ddd"), message[:80]
