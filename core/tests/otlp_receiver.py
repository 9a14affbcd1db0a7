"""A minimal OTLP/HTTP trace receiver for the tests (``opentelemetry-proto`` decodes)."""

from __future__ import annotations

import base64
import http.server
import json
import threading
from typing import Any


class Receiver:
    """A minimal OTLP/HTTP trace receiver: decodes each export request with
    opentelemetry-proto, binary or JSON (Triton's exporter sends JSON), and keeps its
    resource attributes and spans."""

    def __init__(self) -> None:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        spans: list[tuple[dict[str, Any], Any]] = []
        paths: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    json_format.Parse(_json_ids_as_base64(body), request)
                else:
                    request.ParseFromString(body)
                paths.append(self.path)
                for resource_spans in request.resource_spans:
                    resource = {
                        a.key: a.value.string_value for a in resource_spans.resource.attributes
                    }
                    for scope in resource_spans.scope_spans:
                        spans.extend((resource, span) for span in scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.spans = spans
        self.paths = paths
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _json_ids_as_base64(body: bytes) -> str:
    """OTLP JSON writes trace and span ids in hex; protobuf's JSON mapping wants base64."""

    def convert(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: base64.b64encode(bytes.fromhex(v)).decode()
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
                else convert(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    return json.dumps(convert(json.loads(body)))


def attributes(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        values[attribute.key] = getattr(value, value.WhichOneof("value"))
    return values
