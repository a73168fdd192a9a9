"""A local OTLP/HTTP receiver for the tracing benchmark, in its own process
(its CPU is then not the worker's): decodes each export, counts requests,
spans and bytes, answers 200 as a collector does.

    python -m bench.otlp_sink

prints ``PORT <n>`` once it listens on 127.0.0.1 and exits when its stdin
closes. ``GET /stats`` returns {"requests": n, "spans": n, "bytes": n}.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

COUNTS = {"requests": 0, "spans": 0, "bytes": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
        with LOCK:
            COUNTS["requests"] += 1
            COUNTS["spans"] += spans
            COUNTS["bytes"] += len(body)
        self._answer(b"", "application/x-protobuf")

    def do_GET(self) -> None:  # noqa: N802
        with LOCK:
            self._answer(json.dumps(COUNTS).encode(), "application/json")

    def _answer(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"PORT {server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the benchmark closes it (or exits)


if __name__ == "__main__":
    main()
