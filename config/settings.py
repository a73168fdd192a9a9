"""Loading and validating the worker's and starter's configuration.

Everything is checked at start-up (never inside a workflow): a bad file or field
is reported as one line naming the file and the field.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from config.config_file import DEFAULT_CONFIG_PATH, REPO_DIR, ConfigError, read_config_text
DEFAULT_TASK_QUEUE = "durable-manus"
DEFAULT_WORKSPACE_ROOT = "workspace"
"""Relative to the repo directory."""
DEFAULT_SERVER_WAIT = 60.0
DEFAULT_PICKUP_WAIT = 3.0
"""Seconds a starter waits for a Temporal server that stopped answering."""
OWN_SECTIONS = frozenset({"llm", "workspace", "tools", "worker", "search", "web", "browser"})
"""durable-manus's sections; OpenManus's others are in OPENMANUS_KEYS."""


OPENAI_COMPATIBLE_API_TYPES = (
    "openai",
    "openai-compatible",
    "ollama",
    "vllm",
    "lmstudio",
    "llamacpp",
    "localai",
    "deepseek",
    "openrouter",
    "groq",
    "together",
    "fireworks",
    "mistral",
    "xai",
    "gemini",
    "google",
    "anthropic",
    "dashscope",
    "qwen",
    "moonshot",
    "zhipu",
    "siliconflow",
    "ppio",
    "jiekou",
)
"""api_type values of servers that speak the OpenAI Chat Completions API at
base_url as given (ppio and jiekou come from OpenManus's examples);
openai-compatible stands for any other such server. A closed list, so that a
misspelt api_type is caught."""
KEYLESS_API_TYPES = ("ollama", "vllm", "lmstudio", "llamacpp", "localai", "openai-compatible")
"""Servers that often run locally without a key: api_key may be left out."""


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "gpt-4o"
    base_url: str = "https://api.openai.com/v1"
    """For azure: `<endpoint>/openai/deployments/<deployment>` (OpenManus's form),
    `<endpoint>/openai`, or the bare `<endpoint>`; in the last two the model
    names the deployment."""
    api_key: SecretStr | None = None
    api_type: str = "openai"
    """"openai", "azure", or one of OPENAI_COMPATIBLE_API_TYPES; checked at load."""
    api_version: str | None = None
    """Required for azure (or OPENAI_API_VERSION)."""
    max_tokens: int = Field(4096, gt=0)
    """Completion tokens per call (OpenManus default)."""
    temperature: float = Field(0.0, ge=0, le=2, allow_inf_nan=False)
    """0 to 2, the API's range."""
    max_input_tokens: int | None = Field(None, gt=0)
    """Largest prompt (in tokens) one request may send; None = no check."""
    request_timeout: float = Field(300.0, gt=0, allow_inf_nan=False)
    """Seconds one HTTP call may take; the activity's start_to_close is larger."""

    @field_validator("api_type", mode="before")
    @classmethod
    def _plain_api_type(cls, value: Any) -> Any:
        # OpenManus leaves api_type "" for OpenAI and spells it in any case.
        return value.strip().lower() or "openai" if isinstance(value, str) else value

    @property
    def needs_key(self) -> bool:
        return self.api_type not in KEYLESS_API_TYPES


SEARCH_ENGINES = ("duckduckgo", "searxng", "brave", "tavily", "google", "bing", "baidu")
"""Every web_search engine (activities/web/engines.py)."""
KEYED_ENGINES = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
"""Engines that need an API key, and the variable that may hold it."""


class SearchSettings(BaseModel):
    """`[search]`: the web_search tool (OpenManus's keys, plus endpoints and keys)."""

    model_config = ConfigDict(extra="forbid")

    engine: str = "duckduckgo"
    """The primary engine."""
    fallback_engines: list[str] = Field(default_factory=lambda: ["bing", "google"])
    """Tried in order when the one before failed (rate limit, error, no results)."""
    retry_delay: float = Field(60.0, ge=0, le=120, allow_inf_nan=False)
    """Seconds to wait after every engine failed, before the whole chain again."""
    max_retries: int = Field(3, ge=0, le=5)
    """How many times the whole chain is tried again after every engine failed."""
    lang: str = "en"
    country: str = "us"
    endpoints: dict[str, str] = Field(default_factory=dict)
    """`[search.endpoints]`: engine -> URL replacing its public endpoint
    (searxng has none: its instance's base URL must be given)."""
    brave_api_key: SecretStr | None = None
    tavily_api_key: SecretStr | None = None

    @property
    def chain(self) -> list[str]:
        return list(dict.fromkeys([self.engine, *self.fallback_engines]))

    def api_key(self, engine: str) -> str | None:
        key = getattr(self, f"{engine}_api_key", None)
        return key.get_secret_value() or None if key is not None else None


class WebSettings(BaseModel):
    """`[web]`: what web_search and web_fetch may reach and how much they read."""

    model_config = ConfigDict(extra="forbid")

    allow: tuple[str, ...] = ()
    """Origins reached although they are not public (loopback, private,
    link-local, CGNAT, this host's addresses): "http://127.0.0.1:8000", or a
    network and its ports, "10.0.0.0/8 ports 80,443"
    (activities/tools/egress_rules.py). The control plane never is."""
    control_plane: tuple[str, ...] = ()
    """More endpoints ("host:port" or URLs) that no web path and no tool code
    may reach, whatever `allow` says: a Temporal Web UI or HTTP API elsewhere,
    an internal admin API. The LLM, Temporal, MCP and metrics endpoints the
    worker knows of are refused without being listed."""
    timeout: float = Field(20.0, gt=0, le=60, allow_inf_nan=False)
    """Seconds for one HTTP exchange, redirects included."""
    max_bytes: int = Field(2 * 1024 * 1024, ge=1024, le=20 * 1024 * 1024)
    """Bytes of one response body read; the rest is not read."""
    max_chars: int = Field(20000, ge=200, le=200000)
    """Characters of text web_fetch returns for one page."""


class BrowserProxy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str
    username: str | None = None
    password: SecretStr | None = None


class BrowserSettings(BaseModel):
    """`[browser]`: the browser_use tool (OpenManus's keys, plus the worker's bounds).

    The browser is Chromium driven by Playwright, one per run on a worker, in
    the tool sandbox (activities/browser/): its only way out is a proxy of the
    worker's that applies the [web] rules."""

    model_config = ConfigDict(extra="forbid")

    headless: bool = True
    """Always headless on a worker (there is no display in the sandbox);
    false is accepted and noted."""
    disable_security: bool = True
    """OpenManus's key, accepted and not used: page security is never turned off here."""
    extra_chromium_args: list[str] = Field(default_factory=list)
    chrome_instance_path: str | None = None
    """The Chromium executable; default: Debian's (/usr/lib/chromium/chromium) or
    the first chromium/chrome on PATH."""
    wss_url: str | None = None
    cdp_url: str | None = None
    """An operator's running browser to connect to instead (not confined, and
    its traffic is not checked: the operator's choice, logged at start)."""
    proxy: BrowserProxy | None = None
    max_content_length: int = Field(20000, ge=200, le=200000)
    """Characters of page text extract_content reads."""
    idle_seconds: float = Field(600.0, ge=10, le=86400, allow_inf_nan=False)
    """A run's browser not used for this long is closed (its next action
    reopens the tabs the run last had)."""
    max_sessions: int = Field(4, ge=1, le=64)
    """Browsers one worker keeps open at once (one per run); the least
    recently used is closed to make room."""
    navigation_timeout: float = Field(30.0, gt=0, le=120, allow_inf_nan=False)
    """Seconds one navigation or action may take."""


class Settings(BaseModel):
    llm: dict[str, LLMSettings]
    """"default" is `[llm]`; other keys are `[llm.<name>]` merged over it."""
    workspace_root: Path
    task_queue: str = DEFAULT_TASK_QUEUE
    tool_sandbox: Literal["auto", "bwrap", "none"] = "auto"
    """Confinement of python_execute/bash processes (activities/tools/sandbox.py):
    auto = bubblewrap, or the tools are refused; bwrap = a worker without a
    working bubblewrap does not start; none = no confinement (operator's choice)."""
    tool_network: Literal["none", "internet"] = "none"
    """What tool code may connect to: nothing, or public internet addresses
    through the worker's egress proxy (never loopback, private or link-local)."""
    tool_egress_allow: tuple[str, ...] = ()
    """Origins the egress proxy lets through although they are not public,
    e.g. a package mirror on the LAN, "http://mirror.lan:3142" ([web] allow's
    form); the control plane never."""
    tool_user: int = 65534
    """uid (and gid) that tool processes run as when the worker runs as root."""
    tool_memory_mb: int = 2048
    """Memory of one tool call, all its processes together (cgroup), and of
    each process (RLIMIT_AS)."""
    tool_run_disk_mb: int = 1024
    """Disk one run may hold: its directory and its undo history together. A
    tool call that grows past it is stopped, an edit past it refused
    (activities/tools/disk_use.py); also the largest file a tool may write."""
    workflow_sandbox: bool = True
    """Run workflow code in Temporal's sandbox, which rejects non-deterministic
    calls (clocks, I/O, randomness) as they happen. Off saves ~3 ms of worker
    CPU per agent step (BENCHMARKS.md); determinism then rests on the replay
    tests alone."""
    worker_deployment_name: str | None = None
    worker_build_id: str | None = None
    """Worker Deployment Versioning, opt-in: with both set the worker polls as
    version <deployment_name>.<build_id> (runtime/worker_factory.py
    deployment_config; README, "Deploying new code while runs are open")."""
    search: SearchSettings = Field(default_factory=SearchSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    browser: BrowserSettings = Field(default_factory=BrowserSettings)
    server_wait_seconds: float = DEFAULT_SERVER_WAIT
    pickup_wait_seconds: float = DEFAULT_PICKUP_WAIT
    """How long a detached start waits to see a listed worker take the run."""
    """How long a starter that follows a run waits for a Temporal server that
    stopped answering before it gives up (exit 3; the run is safe)."""
    runflow_data_analysis: bool = False
    """`[runflow] use_data_analysis_agent` (OpenManus): a PlanningFlow's
    executors include data_analysis."""
    mcp_server_reference: str | None = None
    """`[mcp] server_reference` (OpenManus): a Python module to run as an MCP
    server over stdio (`python -m MODULE`); None when unset or OpenManus's own."""
    mcp_servers: dict[str, Any] = Field(default_factory=dict)
    """MCP servers by id (config/mcp_config.py McpServerSettings), from
    mcp.json in OpenManus's form (config/mcp_config.py default_mcp_path), and
    `[mcp] server_reference` as the server "reference"."""
    notes: tuple[str, ...] = ()
    """One line per key or section of the file that is accepted but not used
    (OpenManus's), saying why; worker and starter log them at INFO."""
    source: str = "environment"
    """Where the settings came from, for messages."""

    def llm_profile(self, name: str) -> LLMSettings:
        try:
            return self.llm[name]
        except KeyError:
            raise ConfigError(
                f"{self.source}: no LLM profile [llm.{name}] (known: {', '.join(sorted(self.llm))})"
            ) from None

    @property
    def config_file(self) -> Path | None:
        """The config file read, if any (it may hold keys: tools must not see it)."""
        return None if self.source == "environment" else Path(self.source)

    def require_workspace_root(self) -> None:
        """Create the workspace root if it is missing; refuse one that is not a
        writable directory."""
        root = self.workspace_root
        where = f"{self.source}: workspace root {root} (WORKSPACE_ROOT or [workspace] root)"
        try:
            if root.exists() and not root.is_dir():
                raise ConfigError(f"{where} is not a directory")
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{where} cannot be created: {e.strerror or e}") from None
        if not os.access(root, os.W_OK | os.X_OK):
            raise ConfigError(f"{where} is not writable")

    def require_api_keys(self) -> None:
        for name, llm in self.llm.items():
            if llm.needs_key and (llm.api_key is None or not llm.api_key.get_secret_value()):
                where = _llm_where(name)
                raise ConfigError(
                    f"{self.source}: {where} api_key is missing; set OPENAI_API_KEY or "
                    f"api_key in {where} (see config/config.example.toml)"
                )
        for engine in self.search.chain:
            if engine in KEYED_ENGINES and not self.search.api_key(engine):
                raise ConfigError(
                    f"{self.source}: [search] {engine} is in the engine chain but has no key; set "
                    f"{KEYED_ENGINES[engine]} or {engine}_api_key in [search]"
                )


def _first_error(source: str, section: str, err: ValidationError) -> str:
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    return f"{source}: {section} {field}: {first['msg']}"


def _llm_where(name: str) -> str:
    return "[llm]" if name == "default" else f"[llm.{name}]"


def _parse_llm(source: str, raw: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, LLMSettings]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: [llm] must be a table")
    base = {k: v for k, v in raw.items() if not isinstance(v, Mapping)}
    overrides = {
        "api_key": env.get("OPENAI_API_KEY"),
        "base_url": env.get("OPENAI_BASE_URL"),
        "model": env.get("OPENAI_MODEL"),
    }
    base.update({k: v for k, v in overrides.items() if v})
    sections = {"default": {}, **{name: section for name, section in raw.items() if isinstance(section, Mapping)}}
    profiles = {}
    for name, section in sections.items():
        try:
            llm = LLMSettings(**{**base, **section})
        except ValidationError as e:
            raise ConfigError(_first_error(source, _llm_where(name), e)) from None
        profiles[name] = _check_api_type(source, _llm_where(name), llm, env)
    return profiles


def _check_api_type(source: str, where: str, llm: LLMSettings, env: Mapping[str, str]) -> LLMSettings:
    """The profile, refused now rather than at its first think when its server
    cannot be called; azure's api_version may come from OPENAI_API_VERSION."""
    if llm.api_type == "aws":
        raise ConfigError(
            f"{source}: {where} api_type aws (Amazon Bedrock) is not supported: durable-manus speaks only "
            "the OpenAI Chat Completions API; use an OpenAI-compatible gateway in front of Bedrock "
            '(e.g. LiteLLM or Bedrock Access Gateway) with api_type = "openai-compatible" and its base_url'
        )
    if llm.api_type == "azure":
        version = llm.api_version or env.get("OPENAI_API_VERSION")
        if not version:
            raise ConfigError(
                f'{source}: {where} api_version is missing: api_type azure needs one, e.g. api_version = '
                '"2024-08-01-preview" (or set OPENAI_API_VERSION)'
            )
        return llm.model_copy(update={"api_version": version})
    if llm.api_type not in OPENAI_COMPATIBLE_API_TYPES:
        raise ConfigError(
            f"{source}: {where} api_type {llm.api_type!r} is not known; use azure, or for a server that speaks "
            f"the OpenAI API one of: {', '.join(OPENAI_COMPATIBLE_API_TYPES)}"
        )
    return llm


OPENMANUS_KEYS: dict[str, frozenset[str]] = {
    "llm": frozenset(
        {"model", "base_url", "api_key", "max_tokens", "max_input_tokens", "temperature", "api_type", "api_version"}
    ),
    "browser": frozenset(
        {
            "headless", "disable_security", "extra_chromium_args", "chrome_instance_path",
            "wss_url", "cdp_url", "proxy", "max_content_length",
        }
    ),
    "search": frozenset({"engine", "fallback_engines", "retry_delay", "max_retries", "lang", "country"}),
    "sandbox": frozenset(
        {"use_sandbox", "image", "work_dir", "memory_limit", "cpu_limit", "timeout", "network_enabled"}
    ),
    "daytona": frozenset(
        {
            "daytona_api_key", "daytona_server_url", "daytona_target",
            "sandbox_image_name", "sandbox_entrypoint", "VNC_password",
        }
    ),
    "mcp": frozenset({"server_reference"}),
    "runflow": frozenset({"use_data_analysis_agent"}),
    "agent": frozenset({"max_steps"}),
}
"""Every section and key of OpenManus's config.toml (its app/config.py, early
2026; [agent] from its 2025 versions). A file written for OpenManus loads here;
a key outside this table and durable-manus's own fields is still an error."""

IGNORED_SECTIONS = {
    "sandbox": "it configures OpenManus's Docker sandbox; python_execute and bash run in "
    "durable-manus's bubblewrap sandbox, set in [tools]",
    "daytona": "durable-manus has no Daytona sandbox; tools run on the worker, confined as [tools] says",
    "agent": "durable-manus takes the step limit from each agent's profile or the starter's --max-steps",
}
"""OpenManus's sections that durable-manus accepts without using, and why."""

IGNORED_KEYS = {
    ("browser", "disable_security"): "the browser's page security is never turned off here",
}
"""OpenManus's keys in sections durable-manus uses that it does not use, and why."""

OPENMANUS_MCP_SERVER = "app.mcp.server"
"""OpenManus's own MCP server module, the default of [mcp] server_reference."""


def _openmanus_sections(source: str, data: Mapping[str, Any], notes: list[str]) -> tuple[bool, str | None]:
    """[runflow] use_data_analysis_agent and [mcp] server_reference; notes for
    what is accepted and not used."""
    for name, section in data.items():
        if name in OWN_SECTIONS or name not in OPENMANUS_KEYS:
            continue  # durable-manus's own sections, and those parsed with their models
        if not isinstance(section, Mapping):
            raise ConfigError(f"{source}: [{name}] must be a table")
        unknown = set(section) - OPENMANUS_KEYS[name]
        if unknown:
            raise ConfigError(
                f"{source}: [{name}] has no key {sorted(unknown)[0]!r} "
                f"(its keys: {', '.join(sorted(OPENMANUS_KEYS[name]))})"
            )
        if name in IGNORED_SECTIONS:
            notes.append(f"[{name}] is ignored: {IGNORED_SECTIONS[name]}")
    for (name, key), why in IGNORED_KEYS.items():
        section = data.get(name)
        if isinstance(section, Mapping) and key in section:
            notes.append(f"[{name}] {key} is ignored: {why}")

    data_analysis = data.get("runflow", {}).get("use_data_analysis_agent", False)
    if not isinstance(data_analysis, bool):
        raise ConfigError(f"{source}: [runflow] use_data_analysis_agent must be true or false, not {data_analysis!r}")
    reference = data.get("mcp", {}).get("server_reference")
    if reference is not None and (not isinstance(reference, str) or not reference.strip()):
        raise ConfigError(f"{source}: [mcp] server_reference must be a Python module name, not {reference!r}")
    if reference == OPENMANUS_MCP_SERVER:
        notes.append(
            f"[mcp] server_reference {OPENMANUS_MCP_SERVER} is ignored: it is OpenManus's own tool server, "
            "which durable-manus does not have"
        )
        reference = None
    return data_analysis, reference


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from a TOML file (optional) and the environment.

    The file is `path`, else $DURABLE_MANUS_CONFIG, else config/config.toml when
    it exists. A file named explicitly must exist. Environment variables
    OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL override `[llm]`;
    WORKSPACE_ROOT overrides `[workspace] root`; DURABLE_MANUS_TOOL_SANDBOX
    overrides `[tools] sandbox`; DURABLE_MANUS_WORKFLOW_SANDBOX (1/0, true/false)
    overrides `[worker] workflow_sandbox`; DURABLE_MANUS_DEPLOYMENT_NAME and
    DURABLE_MANUS_BUILD_ID override `[worker] deployment_name` and `build_id`;
    TEMPORAL_TASK_QUEUE sets the task queue; DURABLE_MANUS_SERVER_WAIT the
    seconds a starter waits for a lost server; DURABLE_MANUS_PICKUP_WAIT the
    seconds a detached start watches for a worker taking the run. An empty
    variable counts as unset.
    """
    env = os.environ if env is None else env
    explicit = path or env.get("DURABLE_MANUS_CONFIG")
    file = Path(explicit) if explicit else DEFAULT_CONFIG_PATH
    data: dict[str, Any] = {}
    source = "environment"
    if explicit or file.exists():
        source = str(file)
        try:
            data = tomllib.loads(read_config_text(file, "config file"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file}: not valid TOML ({e})") from None
        except RecursionError:
            raise ConfigError(f"{file}: not valid TOML (nested too deeply)") from None

    unknown = set(data) - OWN_SECTIONS - OPENMANUS_KEYS.keys()
    if unknown:
        raise ConfigError(f"{source}: unknown section [{sorted(unknown)[0]}]")
    notes: list[str] = []
    runflow_data_analysis, mcp_server_reference = _openmanus_sections(source, data, notes)
    llm = _parse_llm(source, data.get("llm", {}), env)

    workspace = data.get("workspace", {})
    if not isinstance(workspace, Mapping) or set(workspace) - {"root"}:
        raise ConfigError(f"{source}: [workspace] accepts only the field root")
    root_text = env.get("WORKSPACE_ROOT") or workspace.get("root", DEFAULT_WORKSPACE_ROOT)
    if not isinstance(root_text, str) or not root_text:
        raise ConfigError(f"{source}: [workspace] root must be a non-empty string")
    root = Path(root_text).expanduser()
    if not root.is_absolute():
        root = REPO_DIR / root

    tools = data.get("tools", {})
    tool_fields = {"sandbox", "network", "egress_allow", "user", "memory_mb", "run_disk_mb"}
    if not isinstance(tools, Mapping) or set(tools) - tool_fields:
        raise ConfigError(f"{source}: [tools] accepts only the fields {', '.join(sorted(tool_fields))}")
    sandbox = env.get("DURABLE_MANUS_TOOL_SANDBOX") or tools.get("sandbox", "auto")
    if sandbox not in ("auto", "bwrap", "none"):
        raise ConfigError(f"{source}: [tools] sandbox must be \"auto\", \"bwrap\" or \"none\", not {sandbox!r}")
    network = env.get("DURABLE_MANUS_TOOL_NETWORK") or tools.get("network", "none")
    if network not in ("none", "internet"):
        raise ConfigError(f"{source}: [tools] network must be \"none\" or \"internet\", not {network!r}")
    egress_allow = _allow_entries(source, "[tools] egress_allow", tools.get("egress_allow", []))
    tool_user = tools.get("user", 65534)
    if not isinstance(tool_user, int) or isinstance(tool_user, bool) or not 0 < tool_user < 2**31:
        raise ConfigError(f"{source}: [tools] user must be a uid above 0, not {tool_user!r}")
    memory_mb = tools.get("memory_mb", 2048)
    if not isinstance(memory_mb, int) or isinstance(memory_mb, bool) or memory_mb < 64:
        raise ConfigError(f"{source}: [tools] memory_mb must be an integer of at least 64, not {memory_mb!r}")
    run_disk_mb = tools.get("run_disk_mb", 1024)
    if not isinstance(run_disk_mb, int) or isinstance(run_disk_mb, bool) or run_disk_mb < 1:
        raise ConfigError(f"{source}: [tools] run_disk_mb must be an integer of at least 1, not {run_disk_mb!r}")

    worker = data.get("worker", {})
    worker_fields = {"workflow_sandbox", "deployment_name", "build_id"}
    if not isinstance(worker, Mapping) or set(worker) - worker_fields:
        raise ConfigError(f"{source}: [worker] accepts only the fields {', '.join(sorted(worker_fields))}")
    workflow_sandbox = worker.get("workflow_sandbox", True)
    if "DURABLE_MANUS_WORKFLOW_SANDBOX" in env:
        workflow_sandbox = {"1": True, "true": True, "0": False, "false": False}.get(
            env["DURABLE_MANUS_WORKFLOW_SANDBOX"].strip().lower(), env["DURABLE_MANUS_WORKFLOW_SANDBOX"]
        )
    if not isinstance(workflow_sandbox, bool):
        raise ConfigError(f"{source}: [worker] workflow_sandbox must be true or false, not {workflow_sandbox!r}")

    deployment_name, build_id = _worker_version(source, worker, env)
    search = _parse_search(source, data.get("search", {}), env)
    web = _parse_web(source, data.get("web", {}))
    browser = _parse_browser(source, data.get("browser", {}), notes)
    server_wait = _seconds(env, "DURABLE_MANUS_SERVER_WAIT", DEFAULT_SERVER_WAIT, 1, 3600)
    pickup_wait = _seconds(env, "DURABLE_MANUS_PICKUP_WAIT", DEFAULT_PICKUP_WAIT, 0.5, 600)
    mcp_servers = _mcp_servers(file if source != "environment" else None, mcp_server_reference, env)

    return Settings(
        llm=llm,
        workspace_root=root,
        task_queue=env.get("TEMPORAL_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
        tool_sandbox=sandbox,
        tool_network=network,
        tool_egress_allow=tuple(egress_allow),
        tool_user=tool_user,
        tool_memory_mb=memory_mb,
        tool_run_disk_mb=run_disk_mb,
        workflow_sandbox=workflow_sandbox,
        worker_deployment_name=deployment_name,
        worker_build_id=build_id,
        search=search,
        web=web,
        browser=browser,
        server_wait_seconds=server_wait,
        pickup_wait_seconds=pickup_wait,
        runflow_data_analysis=runflow_data_analysis,
        mcp_server_reference=mcp_server_reference,
        mcp_servers=mcp_servers,
        notes=tuple(notes),
        source=source,
    )


def _parse_search(source: str, raw: Any, env: Mapping[str, str]) -> SearchSettings:
    """`[search]` and `[search.endpoints]`; BRAVE_API_KEY and TAVILY_API_KEY
    override the keys. A key that is missing is reported at worker start."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: [search] must be a table")
    values = dict(raw)
    for engine, variable in KEYED_ENGINES.items():
        if env.get(variable):
            values[f"{engine}_api_key"] = env[variable]
    for field in ("engine", "fallback_engines"):
        names = values.get(field)
        if isinstance(names, str):
            values[field] = names.strip().lower()
        elif isinstance(names, list):
            values[field] = [n.strip().lower() if isinstance(n, str) else n for n in names]
    try:
        search = SearchSettings(**values)
    except ValidationError as e:
        raise ConfigError(_first_error(source, "[search]", e)) from None
    known = ", ".join(SEARCH_ENGINES)
    for engine in search.chain:
        if engine not in SEARCH_ENGINES:
            raise ConfigError(f"{source}: [search] unknown engine {engine!r} (known: {known})")
    for engine, url in search.endpoints.items():
        if engine not in SEARCH_ENGINES:
            raise ConfigError(f"{source}: [search.endpoints] unknown engine {engine!r} (known: {known})")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{source}: [search.endpoints] {engine} must be an http(s) URL, not {url!r}")
    if "searxng" in search.chain and "searxng" not in search.endpoints:
        raise ConfigError(
            f"{source}: [search] searxng is in the engine chain but [search.endpoints] searxng "
            "(the instance's URL) is not set"
        )
    return search


def _parse_web(source: str, raw: Any) -> WebSettings:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: [web] must be a table")
    try:
        web = WebSettings(**raw)
    except ValidationError as e:
        raise ConfigError(_first_error(source, "[web]", e)) from None
    from activities.tools.control_plane import Endpoint  # pure: the address rules

    _allow_entries(source, "[web] allow", list(web.allow))
    for entry in web.control_plane:
        try:
            Endpoint.parse(entry, "")
        except ValueError as e:
            raise ConfigError(f"{source}: [web] control_plane: {e}") from None
    return web


def _allow_entries(source: str, where: str, entries: Any) -> list[str]:
    """An allow list ([web] allow, [tools] egress_allow): origins, or networks with ports."""
    from activities.tools.egress_rules import ENTRY_FORMS, parse_allow_entry  # pure: the address rules

    if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
        raise ConfigError(f"{source}: {where} must be a list of strings, each {ENTRY_FORMS}")
    for entry in entries:
        try:
            parse_allow_entry(entry)
        except ValueError as e:
            raise ConfigError(f"{source}: {where}: {e}") from None
    return entries


def _mcp_servers(config_file: Path | None, reference: str | None, env: Mapping[str, str]) -> dict[str, Any]:
    from config.mcp_config import McpServerSettings, default_mcp_path, load_mcp_servers

    servers = load_mcp_servers(default_mcp_path(config_file, env))
    if reference is not None and "reference" not in servers:
        servers["reference"] = McpServerSettings(kind="stdio", command=sys.executable, args=("-m", reference))
    return servers


def _seconds(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not low <= seconds <= high:
        raise ConfigError(f"{name} must be a number of seconds from {low:g} to {high:g}, not {text!r}")
    return seconds


def _parse_browser(source: str, raw: Any, notes: list[str]) -> BrowserSettings:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: [browser] must be a table")
    proxy = raw.get("proxy")
    if isinstance(proxy, Mapping) and not proxy.get("server"):
        # As in OpenManus: a proxy table without a server is no proxy.
        raw = {k: v for k, v in raw.items() if k != "proxy"}
        notes.append("[browser.proxy] is ignored: it has no server")
    try:
        return BrowserSettings(**raw)
    except ValidationError as e:
        raise ConfigError(_first_error(source, "[browser]", e)) from None


VERSION_PART_MAX = 255
"""The server's default limit on a build id (limit.workerBuildIdSize)."""


def _worker_version(source: str, worker: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """`[worker] deployment_name` and `build_id` (or their variables): both or neither."""
    values = {
        "deployment_name": env.get("DURABLE_MANUS_DEPLOYMENT_NAME") or worker.get("deployment_name"),
        "build_id": env.get("DURABLE_MANUS_BUILD_ID") or worker.get("build_id"),
    }
    for field, value in values.items():
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip() or value != value.strip():
            raise ConfigError(f"{source}: [worker] {field} must be a non-empty string without surrounding spaces, not {value!r}")
        if len(value) > VERSION_PART_MAX:
            raise ConfigError(f"{source}: [worker] {field} is longer than {VERSION_PART_MAX} characters")
    name, build_id = values["deployment_name"], values["build_id"]
    if name is not None and "." in name:
        # The version's canonical form is <deployment_name>.<build_id>.
        raise ConfigError(f"{source}: [worker] deployment_name must not contain '.', not {name!r}")
    if (name is None) != (build_id is None):
        missing = "build_id (DURABLE_MANUS_BUILD_ID)" if build_id is None else "deployment_name (DURABLE_MANUS_DEPLOYMENT_NAME)"
        raise ConfigError(f"{source}: [worker] {missing} is missing; worker versioning needs both deployment_name and build_id")
    return name, build_id
