"""The agent's control plane as this worker knows it (activities/tools/control_plane.py):
what no web path and no tool code may reach."""

from __future__ import annotations

import logging
import os

from activities.tools.control_plane import ControlPlane, Endpoint
from config.settings import Settings
from runtime.connection import DEFAULT_ADDRESS, DEFAULT_PORT, connect_config
from runtime.embedded_server import configured_ui_port, embedded_server_ports
from runtime.mcp_http_record import PAGE_RECORD_DIR, recorded_addresses
from runtime.run_page.page_link import DEFAULT_PORT as RUN_PAGE_PORT
from runtime.worker_options import METRICS_VARIABLE

log = logging.getLogger(__name__)

OWN_MCP_SERVER = "this project's MCP server (mcp-server --http)"
OWN_CODEC_SERVER = "this project's codec server (codec-server), which decrypts payloads"
OWN_RUN_PAGE = "this project's run page (ui)"

TEMPORAL_HTTP_PORT = 7243
"""The HTTP API port of a Temporal server as deployed (the dev server's is
random: the embedded one's is read from its data directory)."""


def control_plane(settings: Settings) -> ControlPlane:
    """The endpoints no web path and no tool code may reach, whatever any
    allow list says: every [llm.*] endpoint, the Temporal frontend (and its
    HTTP API on Temporal's usual port), the embedded server's ports, the Web
    UI ($TEMPORAL_UI_URL), the MCP servers, the worker's metrics
    ($DURABLE_MANUS_METRICS), this machine's `mcp-server --http` servers and
    run pages (`ui`), the codec server's port ([encryption] codec_port),
    [web] control_plane and [telemetry] otlp_endpoint."""
    env = os.environ
    named: list[tuple[str | None, str]] = [
        (llm.base_url, f"the LLM endpoint of [llm{'' if name == 'default' else '.' + name}]") for name, llm in settings.llm.items()
    ]
    named += [(env.get("TEMPORAL_UI_URL"), "the Temporal Web UI"), (env.get(METRICS_VARIABLE), "the worker's metrics")]
    named += [(server.url, f"the MCP server {name!r}") for name, server in settings.mcp_servers.items()]
    named += [(entry, "a [web] control_plane endpoint") for entry in settings.web.control_plane]
    # Where the worker's spans go: a trace backend's own UI often listens there too.
    named.append((settings.telemetry.otlp_endpoint, "the OTLP trace endpoint ([telemetry])"))
    endpoints = [_temporal_frontend()]
    for text, what in named:
        if text:
            try:
                endpoints.append(Endpoint.parse(text, what))
            except ValueError:  # never the text: a URL may carry a token
                log.warning("control plane: %s is not host:port nor a URL; it is not listed", what)
    endpoints += [
        Endpoint(endpoints[0].host, TEMPORAL_HTTP_PORT, "the Temporal HTTP API"),
        Endpoint("127.0.0.1", DEFAULT_PORT, "the embedded Temporal server's frontend"),
        Endpoint("127.0.0.1", configured_ui_port(), "the embedded Temporal server's Web UI"),
        Endpoint("127.0.0.1", settings.encryption.codec_port, OWN_CODEC_SERVER),
        Endpoint("127.0.0.1", RUN_PAGE_PORT, "the run page's default port (ui)"),
    ]
    embedded = embedded_server_ports()
    if "http" in embedded:
        endpoints.append(Endpoint("127.0.0.1", embedded["http"], "the embedded Temporal server's HTTP API"))
    if "metrics" in embedded:
        endpoints.append(Endpoint("127.0.0.1", embedded["metrics"], "the embedded Temporal server's metrics"))
    recorded = [(address, OWN_MCP_SERVER) for address in recorded_addresses()]
    recorded += [(address, OWN_RUN_PAGE) for address in recorded_addresses(PAGE_RECORD_DIR)]
    for (host, port), what in recorded:
        try:
            endpoints.append(Endpoint.parse(f"[{host}]:{port}" if ":" in host else f"{host}:{port}", what))
        except ValueError:
            log.warning("control plane: a recorded address of %s is not host:port; it is not listed", what)
    return ControlPlane(endpoints)


def _temporal_frontend() -> Endpoint:
    """The Temporal frontend, as the worker connects to it."""
    what = "the Temporal frontend"
    try:
        address = str(connect_config().get("target_host") or DEFAULT_ADDRESS)
    except Exception:  # noqa: BLE001 - a bad Temporal config file: connecting reports it; the variable still counts
        address = os.environ.get("TEMPORAL_ADDRESS") or DEFAULT_ADDRESS
    try:
        return Endpoint.parse(address, what, DEFAULT_PORT)
    except ValueError:  # connecting fails on it too, saying why
        return Endpoint.parse(DEFAULT_ADDRESS, what)
