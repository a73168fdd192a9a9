"""The worker's and starter's configuration: the config file's tables, each
checked by its model (config/validation.py), and the environment variables
of config/environment.py.

Everything is checked at start-up (never inside a workflow): a bad file,
field or variable is reported as one line naming it.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from config import environment
from config.approval_settings import ApprovalSettings
from config.budget_settings import BudgetSettings
from config.browser_settings import BrowserSettings, parse_browser
from config.config_file import DEFAULT_CONFIG_PATH, REPO_DIR, ConfigError, read_config_text
from config.encryption_settings import EncryptionSettings
from config.environment import origins_in
from config.live_settings import LiveSettings
from config.llm_settings import LLMSettings, llm_where, parse_llm
from config.openmanus_sections import OPENMANUS_KEYS, OWN_SECTIONS, openmanus_sections
from config.session_settings import SessionSettings
from config.telemetry_settings import TelemetrySettings
from config.validation import validated
from config.web_settings import KEYED_ENGINES, SearchSettings, WebSettings
from config.worker_settings import ToolsSection, WorkerSection, WorkspaceSection

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_TASK_QUEUE",
    "OPENMANUS_KEYS",
    "REPO_DIR",
    "BrowserSettings",
    "ConfigError",
    "LLMSettings",
    "SearchSettings",
    "Settings",
    "WebSettings",
    "load_settings",
]
"""What the rest of the code imports from here; each is declared in its table's module."""

DEFAULT_TASK_QUEUE = "durable-manus"
DEFAULT_SERVER_WAIT = 60.0
"""Seconds a starter waits for a Temporal server that stopped answering."""
DEFAULT_PICKUP_WAIT = 3.0
"""Seconds a detached start waits to see a listed worker take the run."""


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
    tool_sandbox_per_run: bool = True
    """One sandbox per run that each of its process calls enters (a fork and
    an exec), instead of a sandbox started for every call (network "none"
    only; activities/tools/run_sandbox.py)."""
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
    deployment_config; docs/deploying.md)."""
    search: SearchSettings = Field(default_factory=SearchSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    browser: BrowserSettings = Field(default_factory=BrowserSettings)
    approval: ApprovalSettings = Field(default_factory=ApprovalSettings)
    """`[approval]`: which tool calls wait for a person's decision (config/approval_settings.py)."""
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    """`[budget]`: whether a run at its ceiling asks for a higher one (config/budget_settings.py)."""
    session: SessionSettings = Field(default_factory=SessionSettings)
    """`[session]`: the terms of the runs `chat` starts (config/session_settings.py)."""
    encryption: EncryptionSettings = Field(default_factory=EncryptionSettings)
    """`[encryption]`: the payload key file, opt-in (config/encryption_settings.py)."""
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """`[telemetry]`: OpenTelemetry tracing, off unless an endpoint is set (config/telemetry_settings.py)."""
    live: LiveSettings = Field(default_factory=LiveSettings)
    """`[live]`: streaming thinks and showing them (config/live_settings.py); never part of a run's input."""
    server_wait_seconds: float = DEFAULT_SERVER_WAIT
    """How long a starter that follows a run waits for a Temporal server that
    stopped answering before it gives up (exit 3; the run is safe)."""
    pickup_wait_seconds: float = DEFAULT_PICKUP_WAIT
    """How long a detached start waits to see a listed worker take the run."""
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
                where = llm_where(name)
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


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from a TOML file (optional) and the environment.

    The file is `path`, else $DURABLE_MANUS_CONFIG, else config/config.toml when
    it exists. A file named explicitly must exist. The environment variables
    are those of config/environment.py (docs/configuration.md lists them).
    """
    env = os.environ if env is None else env
    named = environment.read(env, "DURABLE_MANUS_CONFIG")
    explicit = path or named
    file = Path(explicit) if explicit else DEFAULT_CONFIG_PATH
    data: dict[str, Any] = {}
    source = "environment"
    if explicit or file.exists():
        source = str(file)
        data = _read_toml(file, "DURABLE_MANUS_CONFIG" if not path and named else None)

    unknown = set(data) - OWN_SECTIONS - OPENMANUS_KEYS.keys()
    if unknown:
        raise ConfigError(f"{source}: unknown section [{sorted(unknown)[0]}]")
    notes: list[str] = []
    runflow_data_analysis, mcp_server_reference = openmanus_sections(source, data, notes)
    origins = environment.apply_to_file(data, env)

    llm = parse_llm(source, data.get("llm", {}), origins_in(origins, "llm"))
    workspace = validated(WorkspaceSection, source, "[workspace]", data.get("workspace", {}), origins_in(origins, "workspace"))
    root = Path(workspace.root).expanduser()
    if not root.is_absolute():
        root = REPO_DIR / root
    tools = validated(ToolsSection, source, "[tools]", data.get("tools", {}), origins_in(origins, "tools"))
    worker = validated(WorkerSection, source, "[worker]", data.get("worker", {}), origins_in(origins, "worker"))
    search = validated(SearchSettings, source, "[search]", data.get("search", {}), origins_in(origins, "search"))
    web = validated(WebSettings, source, "[web]", data.get("web", {}))
    browser = parse_browser(source, data.get("browser", {}), notes)
    approval = validated(ApprovalSettings, source, "[approval]", data.get("approval", {}))
    budget = validated(BudgetSettings, source, "[budget]", data.get("budget", {}))
    session = validated(SessionSettings, source, "[session]", data.get("session", {}), origins_in(origins, "session"))
    encryption = validated(
        EncryptionSettings, source, "[encryption]", data.get("encryption", {}), origins_in(origins, "encryption")
    )
    telemetry = validated(
        TelemetrySettings, source, "[telemetry]", data.get("telemetry", {}), origins_in(origins, "telemetry")
    )
    live = validated(LiveSettings, source, "[live]", data.get("live", {}), origins_in(origins, "live"))
    server_wait = environment.read(env, "DURABLE_MANUS_SERVER_WAIT")
    pickup_wait = environment.read(env, "DURABLE_MANUS_PICKUP_WAIT")
    for own in (
        "DURABLE_MANUS_QUERY_WAIT", "DURABLE_MANUS_UI_PORT", "DURABLE_MANUS_TEMPORAL_CLI", "DURABLE_MANUS_WORKER_IDLE_EXIT",
        "DURABLE_MANUS_CODEC_TOKEN",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ):
        environment.read(env, own)  # read where they are used; refused here like the others
    mcp_servers = _mcp_servers(file if source != "environment" else None, mcp_server_reference, env)

    return Settings(
        llm=llm,
        workspace_root=root,
        task_queue=environment.read(env, "TEMPORAL_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
        tool_sandbox=tools.sandbox,
        tool_network=tools.network,
        tool_egress_allow=tuple(tools.egress_allow),
        tool_user=tools.user,
        tool_memory_mb=tools.memory_mb,
        tool_run_disk_mb=tools.run_disk_mb,
        tool_sandbox_per_run=tools.sandbox_per_run,
        workflow_sandbox=worker.workflow_sandbox,
        worker_deployment_name=worker.deployment_name,
        worker_build_id=worker.build_id,
        search=search,
        web=web,
        browser=browser,
        approval=approval,
        budget=budget,
        session=session,
        encryption=encryption,
        telemetry=telemetry,
        live=live,
        server_wait_seconds=DEFAULT_SERVER_WAIT if server_wait is None else server_wait,
        pickup_wait_seconds=DEFAULT_PICKUP_WAIT if pickup_wait is None else pickup_wait,
        runflow_data_analysis=runflow_data_analysis,
        mcp_server_reference=mcp_server_reference,
        mcp_servers=mcp_servers,
        notes=tuple(notes),
        source=source,
    )


def _read_toml(file: Path, variable: str | None) -> dict[str, Any]:
    """The file's tables; `variable`: the environment variable that named it, for messages."""
    try:
        return tomllib.loads(read_config_text(file, "config file"))
    except ConfigError as e:
        raise ConfigError(f"{e} (from {variable})" if variable else str(e)) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{file}: not valid TOML ({e})") from None
    except RecursionError:
        raise ConfigError(f"{file}: not valid TOML (nested too deeply)") from None


def _mcp_servers(config_file: Path | None, reference: str | None, env: Mapping[str, str]) -> dict[str, Any]:
    from config.mcp_config import McpServerSettings, default_mcp_path, load_mcp_servers

    servers: dict[str, Any] = dict(load_mcp_servers(default_mcp_path(config_file, env)))
    if reference is not None and "reference" not in servers:
        servers["reference"] = McpServerSettings(kind="stdio", command=sys.executable, args=("-m", reference))
    return servers
