"""Which requests are traced: the trace settings, global and per model, as samplers.

:attr:`Tracer.active` is the one check a request pays with tracing off. A frontend that
sees it true asks :meth:`Tracer.sample` for a trace (None: this request is not traced).
Settings changed through the trace extension replace the setting's sampler (its counters
start again, as Triton's); the old one writes what it collected first.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from despina.errors import InvalidArgument
from despina.serving.runtime_settings import TraceSettings
from despina.tracing.config import TraceConfig, parse_int, parse_level
from despina.tracing.otel import OtelExporter, OtelSink, valid_traceparent
from despina.tracing.trace import Trace
from despina.tracing.triton_file import TraceFile, TritonFileSink


class _Sink(Protocol):
    def emit(self, trace: Trace, last: bool = False) -> None: ...

    def close(self) -> None: ...


class Sampler:
    """One trace setting in force: Triton's rate/count sampling and where traces go."""

    def __init__(
        self, values: Mapping[str, list[str]], sink: _Sink, ids: itertools.count[int]
    ) -> None:
        self.levels = frozenset(parse_level(values["trace_level"])) - {"OFF"}
        self.rate = parse_int("trace_rate", values["trace_rate"][0], 0)
        self.count = parse_int("trace_count", values["trace_count"][0], -1)
        self.mode = values["trace_mode"][0]
        self.sink = sink
        self._ids = ids
        self._seen = 0
        self._created = 0
        self._done = 0
        self._lock = threading.Lock()

    @property
    def on(self) -> bool:
        return bool(self.levels)

    def sample(self, traceparent: str) -> Trace | None:
        """A trace for the next request, or None (Triton's rule: every ``rate``-th
        request while ``count`` lasts; in mode opentelemetry a request carrying a valid
        ``traceparent`` always)."""
        if not self.levels:
            return None
        forced = (
            self.mode == "opentelemetry" and bool(traceparent) and valid_traceparent(traceparent)
        )
        with self._lock:
            hit = False
            if self.rate and self.count != 0:
                self._seen += 1
                hit = self._seen % self.rate == 0
                if hit and self.count > 0:
                    self.count -= 1
            if not (hit or forced):
                return None
            self._created += 1
        return Trace(self, self.levels, traceparent=traceparent if forced else "")

    def next_id(self) -> int:
        return next(self._ids)

    def emit(self, trace: Trace) -> None:
        """A complete root trace: to the sink (written at once when the count is used up
        and every trace sampled is complete, as Triton)."""
        with self._lock:
            self._done += 1
            last = self.count == 0 and self._done == self._created
        self.sink.emit(trace, last)


class Tracer:
    """One server's tracing: its settings (the trace extension's store), a sampler per
    setting in force, and the mode's output."""

    def __init__(self, config: TraceConfig, settings: TraceSettings) -> None:
        self.config = config
        self.settings = settings
        self._ids = itertools.count(1)
        self._file = TraceFile(config.file) if config.file else None
        #: Made with the first setting that traces in mode opentelemetry (ValueError
        #: when the SDK is missing).
        self._otel: OtelExporter | None = None
        self._global = self._sampler(self.settings.get())
        self._models: dict[str, Sampler] = {}
        #: True when some setting traces: the one check per request with tracing off.
        self.active = self._global.on

    def _sampler(self, values: Mapping[str, list[str]]) -> Sampler:
        sink: _Sink = TritonFileSink(self._file, int(values["log_frequency"][0]))
        tracing = parse_level(values["trace_level"]) != ["OFF"]
        if values["trace_mode"][0] == "opentelemetry" and tracing:
            if self._otel is None:
                self._otel = OtelExporter(self.config)
            sink = OtelSink(self._otel)
        return Sampler(values, sink, self._ids)

    def sample(self, model: str, traceparent: str = "") -> Trace | None:
        """A trace for a request to ``model`` under its setting, or None."""
        sampler = self._models.get(model, self._global)
        return sampler.sample(traceparent)

    def get(self, model: str = "") -> dict[str, list[str]]:
        """The settings of ``model`` (or the global ones), the count left included."""
        values = self.settings.get(model)
        sampler = self._models.get(model, self._global) if model else self._global
        values["trace_count"] = [str(sampler.count)]
        return values

    def update(self, changes: Mapping[str, Any], model: str = "") -> dict[str, list[str]]:
        """Apply the trace extension's ``changes`` (checked first: InvalidArgument) and
        put new samplers in force for what they touch."""
        _check(changes)
        self.settings.update(dict(changes), model)
        if model:
            old = self._models.pop(model, None)
            if self.settings.per_model.get(model):
                self._models[model] = self._sampler(self.settings.get(model))
            if old is not None:
                old.sink.close()
        else:
            old_samplers = [self._global, *self._models.values()]
            self._global = self._sampler(self.settings.get())
            self._models = {m: self._sampler(self.settings.get(m)) for m in self._models}
            for sampler in old_samplers:
                sampler.sink.close()
        self.active = self._global.on or any(s.on for s in self._models.values())
        return self.get(model)

    def close(self) -> None:
        """Write what is collected and flush the exporter (server shutdown)."""
        for sampler in (self._global, *self._models.values()):
            sampler.sink.close()
        if self._otel is not None:
            self._otel.close()


def _check(changes: Mapping[str, Any]) -> None:
    """InvalidArgument for a value the trace extension would refuse."""
    try:
        for key, value in changes.items():
            if value is None:
                continue
            values = value if isinstance(value, list) else [value]
            if key == "trace_level":
                parse_level(str(v) for v in values)
            elif key in ("trace_rate", "trace_count", "log_frequency"):
                if len(values) != 1:
                    raise ValueError(f"expected a single value for trace setting '{key}'")
                parse_int(key, str(values[0]), -1 if key == "trace_count" else 0)
            elif key == "trace_mode" and values[0] not in ("triton", "opentelemetry"):
                raise ValueError(f"unknown trace mode '{values[0]}'")
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
