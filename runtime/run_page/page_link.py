"""Where this machine's run pages serve: each `ui` writes its address down in
the data directory while it serves (runtime/mcp_http_record.py), with the
Temporal server and namespace it shows; the starter reads it to print a
run's page beside its Web UI link, and workers to keep tool code off it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import quote

from temporalio.client import Client

from runtime.command_line import RUN_PAGE_PORT
from runtime.run_page.guard import origin_for
from runtime.mcp_http_record import PAGE_RECORD_DIR, recorded, recorded_while_serving

DEFAULT_PORT = RUN_PAGE_PORT


def temporal_of(client: Client) -> str:
    return client.service_client.config.target_host


@contextlib.contextmanager
def page_recorded(host: str, port: int, client: Client) -> Iterator[None]:
    details = {"temporal": temporal_of(client), "namespace": client.namespace}
    with recorded_while_serving(host, port, PAGE_RECORD_DIR, details):
        yield


def page_link_for(client: Client, run_id: str) -> str | None:
    """The run's page on a run page of this machine that shows this client's
    server and namespace, if one serves (a browser that opened the page's own
    link once is let in; the link holds no token)."""
    for record in recorded(PAGE_RECORD_DIR):
        if record.get("temporal") == temporal_of(client) and record.get("namespace") == client.namespace:
            return f"{origin_for(record['host'], record['port'])}/run/{quote(run_id, safe='')}"
    return None
