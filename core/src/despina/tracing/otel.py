"""Trace mode ``opentelemetry``: traces as OpenTelemetry spans, exported over OTLP/HTTP.

Needs the ``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``
distributions (the ``tracing`` extra); they are imported only when this mode is on.
Spans are Triton's: a root span ``InferRequest`` (child of the client's ``traceparent``
when it sent one) with the frontend's events (``HTTP_RECV_START`` ...,
``INFER_RESPONSE_COMPLETE``, ``HTTP_SEND_END``); under it one span per model request,
named after the model, with ``REQUEST_START``, ``QUEUE_START``, ``REQUEST_END`` and the
attributes ``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
``triton.trace_parent_id``, ``triton.request_id``; under that a ``compute`` span with the
``COMPUTE_*`` events. An ensemble step's or BLS call's model span is a child of its
parent's model span. All spans are of kind SERVER. Spans are built once a trace is
complete, with the recorded times (monotonic clock shifted to the wall clock).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from despina.tracing.config import TraceConfig
from despina.tracing.trace import Trace

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider

#: A valid W3C traceparent (version 00; ids not all zeros).
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
_SERVICE_NAME = "triton-inference-server"
_TRACER_NAME = "triton-server"
_MODEL_EVENTS = ("REQUEST_START", "QUEUE_START", "REQUEST_END")


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a W3C ``traceparent`` a trace can continue."""
    return bool(_TRACEPARENT.match(value.strip().lower()))


class OtelExporter:
    """A tracer provider with a batch span processor and the OTLP/HTTP exporter, set up
    from the ``opentelemetry,...`` trace settings."""

    def __init__(self, config: TraceConfig) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ValueError(
                "trace mode opentelemetry needs opentelemetry-sdk and "
                f"opentelemetry-exporter-otlp-proto-http (pip install 'despina[tracing]'): {exc}"
            ) from None
        attributes: dict[str, Any] = {"service.name": _SERVICE_NAME}
        attributes.update(dict(config.otel_resource))
        self.provider: TracerProvider = TracerProvider(resource=Resource.create(attributes))
        bsp = dict(config.otel_bsp)
        processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=config.otel_url),
            max_queue_size=bsp.get("bsp_max_queue_size"),
            schedule_delay_millis=bsp.get("bsp_schedule_delay"),
            max_export_batch_size=bsp.get("bsp_max_export_batch_size"),
        )
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(_TRACER_NAME)
        #: Added to a monotonic timestamp, gives the wall-clock one spans carry.
        self.offset_ns = time.time_ns() - time.monotonic_ns()

    def export(self, trace: Trace) -> None:
        """Build and end the spans of a complete root trace and its children."""
        from opentelemetry import trace as otel_trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        context: Context | None = None
        if trace.traceparent:
            context = TraceContextTextMapPropagator().extract({"traceparent": trace.traceparent})
        stamps = sorted(trace.timestamps, key=lambda item: item[1])
        start = stamps[0][1] if stamps else time.monotonic_ns()
        end = stamps[-1][1] if stamps else start
        root = self.tracer.start_span(
            "InferRequest",
            context=context,
            kind=otel_trace.SpanKind.SERVER,
            start_time=start + self.offset_ns,
        )
        for name, ns in stamps:
            if name not in _MODEL_EVENTS and not name.startswith("COMPUTE_"):
                root.add_event(name, timestamp=ns + self.offset_ns)
        by_parent: defaultdict[int, list[Trace]] = defaultdict(list)
        for child in trace.children:
            assert child.parent is not None
            by_parent[child.parent.id].append(child)
        self._model_span(trace, otel_trace.set_span_in_context(root), by_parent)
        root.end(end_time=end + self.offset_ns)

    def _model_span(
        self, trace: Trace, context: Context, by_parent: dict[int, list[Trace]]
    ) -> None:
        from opentelemetry import trace as otel_trace

        stamps = dict(trace.timestamps)
        start = stamps.get("REQUEST_START", 0)
        attributes: dict[str, Any] = {
            "triton.model_name": trace.model_name,
            "triton.model_version": trace.model_version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent.id if trace.parent is not None else 0,
        }
        if trace.request_id:
            attributes["triton.request_id"] = trace.request_id
        span = self.tracer.start_span(
            trace.model_name,
            context=context,
            kind=otel_trace.SpanKind.SERVER,
            attributes=attributes,
            start_time=start + self.offset_ns,
        )
        inner = otel_trace.set_span_in_context(span)
        if "COMPUTE_START" in stamps:
            compute = self.tracer.start_span(
                "compute",
                context=inner,
                kind=otel_trace.SpanKind.SERVER,
                start_time=stamps["COMPUTE_START"] + self.offset_ns,
            )
            for name, ns in trace.timestamps:
                if name.startswith("COMPUTE_"):
                    compute.add_event(name, timestamp=ns + self.offset_ns)
            compute.end(
                end_time=stamps.get("COMPUTE_END", stamps["COMPUTE_START"]) + self.offset_ns
            )
        for name, ns in trace.timestamps:
            if name in _MODEL_EVENTS:
                span.add_event(name, timestamp=ns + self.offset_ns)
        for child in by_parent.get(trace.id, ()):
            self._model_span(child, inner, by_parent)
        span.end(end_time=stamps.get("REQUEST_END", start) + self.offset_ns)

    def close(self) -> None:
        """Export what is batched and stop the exporter."""
        self.provider.shutdown()


class OtelSink:
    """A setting's sink in mode ``opentelemetry``: complete traces become spans."""

    def __init__(self, exporter: OtelExporter) -> None:
        self.exporter = exporter

    def emit(self, trace: Trace, last: bool = False) -> None:
        """Export ``trace`` (``last`` changes nothing here: spans leave in batches)."""
        self.exporter.export(trace)

    def close(self) -> None:
        """Nothing is held per setting (the exporter flushes at shutdown)."""
