"""One worker with every workflow and activity of durable-manus."""

from __future__ import annotations

import ctypes
import logging
import os
import uuid
from pathlib import Path
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfigProfile
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkerDeploymentConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.charts.packages import AnalysisPackages
from activities.context_store import ContextStore
from activities.live_feed import LiveFeed
from activities.llm import VISION_LLM, LLMActivities
from activities.produced_messages import ProducedMessagesInterceptor
from activities.redaction import RedactingInterceptor, Redactor, worker_secrets
from activities.token_count import encoding_for
from activities.tools.sandbox import ToolSandbox
from activities.web.access import WebAccess
from activities.browser.sessions import BrowserSessions
from activities.web.search import WebSearch
from activities.worker_resources import WorkerResources
from activities.workspace import Workspace, WorkspaceActivities
from activities.snapshot_activities import SnapshotActivities, SnapshotInterceptor
from activities.workspace_snapshots import SnapshotStore
from tools import TOOLS
from config.mcp_config import MCP_CONFIG_VARIABLE, MCP_FILE_NAME
from config.settings import DEFAULT_CONFIG_PATH, REPO_DIR, ConfigError, Settings
from runtime.control_plane import control_plane
from runtime.embedded_server import data_dir
from runtime.worker_set import WorkerSet
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow
from workflows.restore_workspace import RestoreWorkspaceWorkflow

if TYPE_CHECKING:
    from activities.mcp.pool import McpPool
    from runtime.tracing import Tracing

log = logging.getLogger(__name__)

WORKFLOWS = [AgentWorkflow, PlanningFlowWorkflow, RestoreWorkspaceWorkflow]

PASSTHROUGH_MODULES = ("openai", "httpx", "httpx2", "tiktoken", "tiktoken_ext")
"""Loaded once, outside the sandbox: large, deterministic to import, and only
used by activities."""

GRACEFUL_SHUTDOWN = timedelta(seconds=5)
"""On SIGINT/SIGTERM, running activities get this long before they are cancelled
(and then retried by another worker)."""


SECRET_FILE_VARIABLES = ("TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_CONFIG_FILE")
"""Files that may hold credentials besides the config file (temporalio.envconfig)."""


def tool_sandbox(settings: Settings) -> ToolSandbox:
    hidden = operator_files(settings)
    _refuse_files_in_workspace([*hidden, data_dir()], settings.workspace_root)
    return ToolSandbox.detect(
        settings.tool_sandbox,
        settings.workspace_root,
        hidden,
        hidden_dirs=[REPO_DIR, data_dir()],
        network=settings.tool_network,
        egress_allow=settings.tool_egress_allow,
        egress_deny=control_plane(settings).endpoints,
        tool_user=settings.tool_user,
        memory_bytes=settings.tool_memory_mb * 1024**2,
        per_run=settings.tool_sandbox_per_run,
    )


def operator_files(settings: Settings) -> list[Path]:
    """Files the operator configured, which tool code must never read: the
    config files, mcp.json wherever it may be (its env and headers hold
    tokens), the payload key file (it opens every run's history), and
    Temporal's config file and TLS client files."""
    configs = [p for p in (settings.config_file, DEFAULT_CONFIG_PATH) if p is not None]
    hidden = configs + [p.parent / MCP_FILE_NAME for p in configs]
    if settings.encryption.key_path is not None:
        hidden.append(settings.encryption.key_path)
    if os.environ.get(MCP_CONFIG_VARIABLE):
        hidden.append(Path(os.environ[MCP_CONFIG_VARIABLE]).expanduser())
    hidden += [Path(os.environ[name]) for name in SECRET_FILE_VARIABLES if os.environ.get(name)]
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    hidden.append(config_home / "temporalio" / "temporal.toml")
    try:
        tls = ClientConfigProfile.load().tls
    except Exception:  # noqa: BLE001 - a bad Temporal profile is reported where the client connects
        tls = None
    if tls is not None:
        hidden += [source for source in (tls.client_cert, tls.client_private_key) if isinstance(source, Path)]
    return hidden


def _refuse_files_in_workspace(files: list[Path], workspace_root: Path) -> None:
    """An operator file (or the data directory) inside the workspace may be
    a run's: its tools and the editor read and change it, and no mount can
    hide it from them."""
    root = Path(os.path.realpath(workspace_root))
    for file in files:
        real = Path(os.path.realpath(file))
        if real.exists() and (real == root or root in real.parents):
            raise ConfigError(
                f"{file} lies inside the workspace ({workspace_root}), where tool code can read and change it; "
                "move it out of the workspace"
            )


def web_access(settings: Settings) -> WebAccess:
    """HTTP for web_search, web_fetch and the browser's proxy: public
    addresses, the origins [web] allow opens, never the control plane."""
    return WebAccess(
        allow=settings.web.allow,
        control_plane=control_plane(settings),
        timeout=settings.web.timeout,
        max_bytes=settings.web.max_bytes,
    )


def worker_resources(settings: Settings, sandbox: ToolSandbox | None = None, own_queue: str | None = None) -> WorkerResources:
    """What the tools of one worker share; own_queue: the worker's own task
    queue, where the runs whose browser it holds send their browser actions."""
    sandbox = sandbox or tool_sandbox(settings)
    workspace = Workspace(
        settings.workspace_root, run_disk_bytes=settings.tool_run_disk_mb * 1024**2, tool_owner=sandbox.tool_owner
    )
    access = web_access(settings)
    return WorkerResources(
        workspace=workspace,
        sandbox=sandbox,
        web=settings.web,
        search=settings.search,
        web_access=access,
        mcp_pool=mcp_pool(settings),
        packages=AnalysisPackages.detect(),
        vision=VISION_LLM in settings.llm,
        browser_sessions=BrowserSessions(
            settings.browser,
            workspace,
            sandbox,
            access,
            own_queue,
            WebSearch(settings.search, access, budget_seconds=BROWSER_SEARCH_SECONDS, max_chars=settings.web.max_chars),
        ),
    )


BROWSER_SEARCH_SECONDS = 60.0
"""browser_use's web_search finds the page to open; the rest of the action's
150 s (tools/browser_use.py) is left for opening it."""


def mcp_pool(settings: Settings) -> McpPool | None:
    """The worker's MCP connections; None where the mcp package is missing
    (then listings say so to the model, and MCP calls fail saying so)."""
    try:
        from activities.mcp.pool import McpPool
    except ImportError as e:
        if settings.mcp_servers:
            log.warning("MCP servers are configured but the mcp package cannot be loaded (%s)", e)
        return None
    return McpPool(settings.mcp_servers)


def live_feed(settings: Settings, workspace: Workspace, redactor: Redactor | None = None) -> LiveFeed | None:
    """Where the worker's thinks stream to ([live] stream); None: they do not stream."""
    if not settings.live.stream:
        return None
    return LiveFeed(workspace.root, redactor or Redactor(worker_secrets(settings)))


def activities_for(
    settings: Settings,
    sandbox: ToolSandbox | None = None,
    resources: WorkerResources | None = None,
    redactor: Redactor | None = None,
) -> list[Any]:
    """`redactor`: the worker's secrets, kept out of the live feed too (default: the settings' keys)."""
    resources = resources or worker_resources(settings, sandbox)
    live = live_feed(settings, resources.workspace, redactor)
    return [
        LLMActivities(settings.llm, ContextStore(settings.workspace_root), resources.workspace, live).think,
        WorkspaceActivities(resources.workspace).prepare_workspace,
        SnapshotActivities(SnapshotStore(resources.workspace)).restore_workspace,
        # One activity per tool file that runs as one, and the activities of
        # tools that run in the workflow and schedule their own (tools/).
        *(spec.build(resources) for spec in TOOLS.values() if spec.build is not None),
        *(a for spec in TOOLS.values() if spec.build_many is not None for a in spec.build_many(resources)),
    ]


def snapshot_interceptor(resources: WorkerResources) -> SnapshotInterceptor:
    """Snapshots after each call of a tool that may change files (ToolSpec.changes_files)."""
    return SnapshotInterceptor(
        SnapshotStore(resources.workspace), {spec.name: spec.read_calls for spec in TOOLS.values() if spec.changes_files}
    )


def own_queue_activities(resources: WorkerResources) -> list[Any]:
    """The activities served on the worker's own task queue: those of the tools
    that hold a live session on this worker (ToolSpec.on_own_queue)."""
    return [
        a
        for spec in TOOLS.values()
        if spec.build_many is not None and spec.on_own_queue
        for a in spec.build_many(resources)
    ]


def check_worker_settings(settings: Settings) -> ToolSandbox:
    """Fail at start-up, not inside a run: keys present, tokenizers loadable, the
    tool sandbox as configured. Returns the sandbox (and logs what it confines)."""
    settings.require_api_keys()
    for llm in settings.llm.values():
        encoding_for(llm.model)
    sandbox = tool_sandbox(settings)
    (log.info if sandbox.mode == "bwrap" else log.warning)(sandbox.describe())
    packages = AnalysisPackages.detect()
    (log.info if packages.charts else log.warning)(packages.describe())
    if not settings.workflow_sandbox:
        log.warning("workflow sandbox: OFF ([worker] workflow_sandbox = false); determinism is not checked at run time")
    return sandbox


_PR_SET_DUMPABLE = 4


def harden_worker_process() -> None:
    """Mark this process non-dumpable: processes of the same user (the agent's
    tools, when no sandbox hides the worker) can then neither read its
    /proc/<pid>/environ, where OPENAI_API_KEY may be, nor ptrace it. Children
    are dumpable again after exec, so tools are not affected otherwise."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        log.info("cannot mark the worker non-dumpable on this platform")


def sandboxed_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox, with the activity-only libraries passed through."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def workflow_runner(settings: Settings) -> WorkflowRunner:
    return sandboxed_runner() if settings.workflow_sandbox else UnsandboxedWorkflowRunner()


VERSIONING_BEHAVIOR = VersioningBehavior.PINNED
"""With worker versioning on: what a run does when a newer version becomes
current. The worker's default, so it applies to every workflow type whose
@workflow.defn does not name one (today both):

* PlanningFlowWorkflow: PINNED. A flow is bounded by its execution timeout
  (default 3600 s), so the old version drains within that bound; and its
  children start on the flow's version, so one plan runs on one version.
* AgentWorkflow: PINNED. A run may wait for a human for up to an hour per
  ask_human, more than once, so the old version may have to stay up for
  hours; in return a deploy never changes the code of a run in progress, and
  a change needs no workflow.patched() guard (AUTO_UPGRADE would move runs to
  the new code at their next workflow task: every change would need one, as
  without versioning). A run that continues as new moves to the current
  version (workflows/agent.py asks for AUTO_UPGRADE then: the new execution
  starts from carried state, with no old history to replay). Runs whose old workers are
  gone wait; move them with
  `temporal workflow update-options --versioning-override-behavior auto_upgrade`
  once their history replays on the current code (docs/deploying.md)."""


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker's deployment version when [worker] deployment_name and
    build_id are set (Worker Deployment Versioning); None: unversioned."""
    if settings.worker_deployment_name is None or settings.worker_build_id is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.worker_deployment_name, settings.worker_build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VERSIONING_BEHAVIOR,
    )


def run_tracing(settings: Settings) -> Tracing | None:
    """The worker's tracing as [telemetry] says; None (and nothing of
    OpenTelemetry loaded) when it is off."""
    if not settings.telemetry.enabled:
        return None
    from runtime.tracing import tracing_for

    return tracing_for(settings.telemetry)


def build_worker(
    client: Client,
    settings: Settings,
    sandbox: ToolSandbox | None = None,
    tracing: Tracing | None = None,
    **options: Any,
) -> WorkerSet:
    """`tracing`: the worker's tracing when a caller made its own (tests: an
    in-memory exporter); else [telemetry]'s, if any."""
    options.setdefault("graceful_shutdown_timeout", GRACEFUL_SHUTDOWN)
    if (versioned := deployment_config(settings)) is not None:
        options.setdefault("deployment_config", versioned)
        log.info("worker deployment version %s (%s)", versioned.version.to_canonical_string(), VERSIONING_BEHAVIOR.name)
    options.setdefault("max_heartbeat_throttle_interval", timedelta(seconds=1))
    redacting = RedactingInterceptor.for_worker(settings, client)
    tracing = tracing or run_tracing(settings)
    options["interceptors"] = [
        # Outermost: each span is current in the interceptors and activities inside it.
        *(tracing.interceptors(client, settings.llm, redacting.redactor) if tracing is not None else ()),
        *options.get("interceptors", ()),
        # Outside the redaction, so what it stores is what goes into history.
        ProducedMessagesInterceptor(ContextStore(settings.workspace_root)),
        redacting,
    ]
    if tracing is not None:
        log.info("%s", tracing.describe())
    own_queue = f"{settings.task_queue}/browser/{uuid.uuid4().hex}"
    resources = worker_resources(settings, sandbox, own_queue)
    options["interceptors"].append(snapshot_interceptor(resources))
    sessions = resources.browser_sessions
    assert sessions is not None  # worker_resources always makes them
    shared = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        activities=activities_for(settings, sandbox, resources, redacting.redactor),
        workflow_runner=workflow_runner(settings),
        **options,
    )
    if settings.mcp_servers:
        log.info("MCP servers: %s", ", ".join(f"{name} ({server.kind})" for name, server in settings.mcp_servers.items()))
    if sessions.problem() is not None:
        log.warning("%s", sessions.describe())
        return WorkerSet(shared, mcp=resources.mcp_pool, tracing=tracing, run_sandboxes=resources.sandbox.runs)
    log.info("%s", sessions.describe())
    own = Worker(
        client,
        task_queue=own_queue,
        activities=own_queue_activities(resources),
        **{k: v for k, v in options.items() if k not in OPTIONS_FOR_WORKFLOWS_ONLY},
    )
    return WorkerSet(
        shared, own, sessions, mcp=resources.mcp_pool, tracing=tracing, run_sandboxes=resources.sandbox.runs
    )


OPTIONS_FOR_WORKFLOWS_ONLY = frozenset({"max_cached_workflows", "workflow_runner", "workflows"})
"""build_worker options that the own-queue worker (activities only) leaves out."""
