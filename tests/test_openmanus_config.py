"""An OpenManus config/config.toml works here: its sections and keys load,
its api_types reach their servers, and its provider quirks are handled."""

from __future__ import annotations

import pytest

from runtime.command_line import parse_command
from runtime.user_errors import UsageError
from activities.llm import LLMActivities
from config.settings import OPENMANUS_KEYS, BrowserSettings, ConfigError, LLMSettings, SearchSettings
from testkit.e2e import child_env, run_cli, server_address, start_starter, unique_queue
from testkit.fake_openai import FakeOpenAI, Reply, terminate
from testkit.settings import config_error, load_config, write_config
from tests.test_llm_activity import request, think

# A config.toml as OpenManus's config.example.toml has it, every optional
# section filled in (values made up for the test).
OPENMANUS_CONFIG = """
[llm]
model = "gpt-4o"
base_url = "{base_url}"
api_key = "sk-openmanus-test"
max_tokens = 8192
temperature = 0.0

[llm.vision]
model = "gpt-4o-vision-test"
base_url = "{base_url}"
api_key = "sk-openmanus-test"
max_tokens = 4096
temperature = 0.0

[browser]
headless = true
disable_security = true
extra_chromium_args = ["--lang=en-US"]
chrome_instance_path = ""
wss_url = ""
cdp_url = ""
max_content_length = 3000

[browser.proxy]
server = "http://proxy.example:3128"
username = "agent"
password = "secret"

[search]
engine = "Google"
fallback_engines = ["DuckDuckGo", "Baidu", "Bing"]
retry_delay = 60
max_retries = 3
lang = "en"
country = "us"

[sandbox]
use_sandbox = false
image = "python:3.12-slim"
work_dir = "/workspace"
memory_limit = "1g"
cpu_limit = 2.0
timeout = 300
network_enabled = true

[daytona]
daytona_api_key = ""
daytona_server_url = "https://app.daytona.io/api"
daytona_target = "us"
sandbox_image_name = "whitezxj/sandbox:0.1.0"
sandbox_entrypoint = "/usr/bin/supervisord -n"
VNC_password = "123456"

[mcp]
server_reference = "app.mcp.server"

[runflow]
use_data_analysis_agent = true
"""


# ---- sections and keys ---------------------------------------------------------------


def test_an_openmanus_config_loads_and_says_what_it_ignores(tmp_path):
    settings = load_config(tmp_path, OPENMANUS_CONFIG.format(base_url="https://api.openai.com/v1"))
    assert settings.llm["default"].max_tokens == 8192
    assert settings.llm["vision"].model == "gpt-4o-vision-test"
    assert settings.search.chain == ["google", "duckduckgo", "baidu", "bing"]
    assert settings.browser.proxy.server == "http://proxy.example:3128"
    assert settings.runflow_data_analysis is True
    assert settings.mcp_server_reference is None  # OpenManus's own module: not here
    assert [note.split(" is ignored")[0] for note in settings.notes] == [
        "[sandbox]",
        "[daytona]",
        "[browser] disable_security",
        "[mcp] server_reference app.mcp.server",
    ]
    assert all("\n" not in note and ": " in note for note in settings.notes)  # each says why
    settings.require_api_keys()


def test_openmanus_keys_of_the_sections_used_here_are_all_fields():
    assert OPENMANUS_KEYS["llm"] <= set(LLMSettings.model_fields)
    assert OPENMANUS_KEYS["browser"] <= set(BrowserSettings.model_fields)
    assert OPENMANUS_KEYS["search"] <= set(SearchSettings.model_fields)


def test_other_mcp_server_modules_and_older_sections(tmp_path):
    settings = load_config(tmp_path, '[mcp]\nserver_reference = "my_tools.server"\n[agent]\nmax_steps = 30\n[runflow]\n')
    assert settings.mcp_server_reference == "my_tools.server"
    assert settings.runflow_data_analysis is False
    assert settings.notes == ("[agent] is ignored: durable-manus takes the step limit from each agent's "
                              "profile or the starter's --max-steps",)


def test_a_proxy_without_a_server_is_no_proxy_as_in_openmanus(tmp_path):
    settings = load_config(tmp_path, '[browser.proxy]\nserver = ""\n')
    assert settings.browser.proxy is None
    assert settings.notes == ("[browser.proxy] is ignored: it has no server",)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[sandbox]\nimgae = 'python:3.12'\n", "config.toml: [sandbox] has no key 'imgae' (its keys: cpu_limit,"),
        ("[daytona]\napi_key = 'x'\n", "config.toml: [daytona] has no key 'api_key'"),
        ("[mcp]\nserver = 'x'\n", "config.toml: [mcp] has no key 'server' (its keys: server_reference)"),
        ("[runflow]\nuse_data_analysis = true\n", "config.toml: [runflow] has no key 'use_data_analysis'"),
        ("[runflow]\nuse_data_analysis_agent = 'yes'\n", "[runflow] use_data_analysis_agent must be true or false"),
        ("[mcp]\nserver_reference = 3\n", "[mcp] server_reference must be a Python module name"),
        ("sandbox = 1\n", "config.toml: [sandbox] must be a table"),
    ],
)
def test_misspelt_or_wrong_openmanus_keys_still_fail(tmp_path, text, message):
    assert message in config_error(tmp_path, text)


# ---- api_type --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "api_type, kind",
    [("", "openai"), ("OpenAI", "openai"), ("ollama", "ollama"), ("deepseek", "deepseek"), ("ppio", "ppio"),
     ("openai-compatible", "openai-compatible")],
)
def test_openai_compatible_api_types_are_accepted(tmp_path, api_type, kind):
    settings = load_config(tmp_path, f'[llm]\napi_type = "{api_type}"\napi_key = "k"\nbase_url = "http://h:1/v1"\n')
    assert settings.llm["default"].api_type == kind
    assert settings.llm["default"].base_url == "http://h:1/v1"


def test_a_local_server_needs_no_key_but_a_hosted_one_does(tmp_path):
    load_config(tmp_path, '[llm]\napi_type = "ollama"\nmodel = "llama3.2"\n').require_api_keys()
    hosted = load_config(tmp_path, '[llm]\napi_type = "deepseek"\nmodel = "deepseek-chat"\n')
    with pytest.raises(ConfigError, match=r"\[llm\] api_key is missing"):
        hosted.require_api_keys()


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '[llm]\napi_type = "aws"\nmodel = "us.anthropic.claude-3-7-sonnet-20250219-v1:0"\n',
            "config.toml: [llm] api_type aws (Amazon Bedrock) is not supported: durable-manus speaks only the "
            "OpenAI Chat Completions API; use an OpenAI-compatible gateway",
        ),
        (
            '[llm]\napi_type = "azure"\nbase_url = "https://res.openai.azure.com/openai/deployments/d"\n',
            'config.toml: [llm] api_version is missing: api_type azure needs one, e.g. api_version = "2024-08-01-preview"',
        ),
        ('[llm]\napi_type = "opneai"\n', "config.toml: [llm] api_type 'opneai' is not known; use azure, or"),
        ('[llm.vision]\napi_type = "aws"\n', "config.toml: [llm.vision] api_type aws (Amazon Bedrock)"),
    ],
    ids=["aws", "azure-without-version", "misspelt", "aws-in-a-profile"],
)
def test_api_types_that_cannot_work_fail_at_load(tmp_path, text, message):
    assert message in config_error(tmp_path, text)


def test_azure_api_version_may_come_from_the_environment(tmp_path):
    text = '[llm]\napi_type = "azure"\nbase_url = "https://res.openai.azure.com"\n'
    settings = load_config(tmp_path, text, env={"OPENAI_API_VERSION": "2024-10-21"})
    assert settings.llm["default"].api_version == "2024-10-21"


AZURE_PATH = "/openai/deployments/gpt-4o-mini/chat/completions"


async def test_azure_requests_go_to_the_deployment_with_the_api_version(tmp_path):
    """OpenManus's base_url form (`<endpoint>/openai/deployments/<id>`), the
    same without the deployment, and the bare endpoint durable-manus took before."""
    with FakeOpenAI(turns=[Reply(content="from azure")], api_key="azure-key", chat_paths=[AZURE_PATH]) as fake:
        root = fake.base_url.removesuffix("/v1")
        for base_url in (f"{root}/openai/deployments/gpt-4o-mini", f"{root}/openai", f"{root}/"):
            text = (
                f'[llm]\napi_type = "azure"\nmodel = "gpt-4o-mini"\nbase_url = "{base_url}"\n'
                'api_key = "azure-key"\napi_version = "2024-08-01-preview"\n'
            )
            response = await think(LLMActivities(load_config(tmp_path, text).llm), request())
            assert response.message.content == "from azure", base_url
            sent = fake.requests[-1]
            assert (sent.path, sent.query) == (AZURE_PATH, "api-version=2024-08-01-preview"), base_url
            assert sent.headers["api-key"] == "azure-key"


async def test_a_keyless_ollama_server_is_called_without_a_key(tmp_path):
    with FakeOpenAI(turns=[Reply(content="local")], api_key=None) as fake:
        text = f'[llm]\napi_type = "ollama"\nmodel = "llama3.2"\nbase_url = "{fake.base_url}"\n'
        response = await think(LLMActivities(load_config(tmp_path, text, env={"OPENAI_API_KEY": ""}).llm), request())
    assert response.message.content == "local"
    assert fake.requests[0].body["model"] == "llama3.2"


# ---- the starter's --llm ---------------------------------------------------------------


def test_llm_option_is_part_of_the_run_command():
    assert parse_command(["--llm", "fast", "do it"]).llm == "fast"
    assert parse_command(["run", "--flow", "planning", "--llm", "fast", "plan it"]).llm == "fast"
    with pytest.raises(UsageError, match="--llm needs the name"):
        parse_command(["--llm", " ", "do it"])


def test_an_unknown_llm_name_is_one_line_listing_the_known_ones(cli, tmp_path):
    config = write_config(tmp_path, '[llm]\napi_key = "k"\n[llm.fast]\nmodel = "gpt-4o-mini"\n')
    proc = cli("--config", str(config), "--llm", "fastest", "do it", env_extra={"OPENAI_API_KEY": None})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"starter: --llm fastest: {config} has no [llm.fastest] (known: default, fast)"


def test_the_worker_logs_the_notes(tmp_path):
    config = write_config(tmp_path, '[llm]\napi_key = "k"\n[sandbox]\nuse_sandbox = false\n[tools]\nsandbox = "none"\n')
    env = {"OPENAI_API_KEY": None, "DURABLE_MANUS_CONFIG": str(config), "WORKSPACE_ROOT": str(tmp_path / "ws")}
    proc = run_cli("--connect-timeout", "1", script="worker.py", env_extra=env)
    assert proc.returncode == 2, proc.stderr  # no Temporal server: the notes came before
    assert "INFO root: config: [sandbox] is ignored: it configures OpenManus's Docker sandbox" in proc.stderr


@pytest.mark.e2e  # starter.py/worker.py processes on the dev server
async def test_a_run_with_llm_fast_thinks_on_the_fast_server(dev_env, tmp_path):
    with FakeOpenAI(turns=[]) as default, FakeOpenAI(turns=[terminate("fast answer")], api_key="fast-key") as fast:
        config = write_config(
            tmp_path,
            f'[llm]\nmodel = "gpt-4o"\nbase_url = "{default.base_url}"\napi_key = "test-key"\n'
            f'[llm.fast]\nmodel = "gpt-4o-mini"\nbase_url = "{fast.base_url}"\napi_key = "fast-key"\n',
        )
        env = child_env(
            tmp_path, address=server_address(dev_env), task_queue=unique_queue("llm"), base_url="",
            extra={"OPENAI_API_KEY": ""},
        )
        child = start_starter(
            ["run", "--config", str(config), "--llm", "fast", "--worker", "always", "do it"], env, tmp_path / "logs"
        )
        try:
            code = await child.wait(90)
        finally:
            await child.stop()
        assert code == 0, child.describe()
        assert child.stdout().rstrip().endswith("fast answer")
        assert [r.body["model"] for r in fast.requests] == ["gpt-4o-mini"]
        assert default.requests == []
