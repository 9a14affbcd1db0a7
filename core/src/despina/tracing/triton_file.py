"""Trace mode ``triton``: traces as Triton's JSON trace file.

The file is one JSON array of entries: per trace its model (``id``, ``model_name``,
``model_version``, ``request_id`` when the request had one, ``parent_id`` for a child
trace), each timestamp as its own ``{"id", "timestamps": [{"name", "ns"}]}`` entry, and
at level TENSORS each tensor as ``{"id", "activity", "tensor": {...}}``. A root trace
and its children are written together. With ``log_frequency`` N > 0, every N root traces
go to a new file ``<file>.0``, ``<file>.1``, ...; traces left at shutdown go to the next
indexed file (N > 0) or to ``<file>`` itself (N = 0), as Triton does.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from pathlib import Path
from typing import Any

from despina.tracing.trace import Trace

log = logging.getLogger("despina.tracing")

#: The protocol timestamps a frontend records before the request reaches a model.
_BEFORE_MODEL = ("HTTP_RECV_START", "HTTP_RECV_END", "GRPC_WAITREAD_START", "GRPC_WAITREAD_END")


class TraceFile:
    """One ``trace_file``: the base file and the next index (shared by every setting)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._index = itertools.count()
        self._lock = threading.Lock()
        self._base_entries: list[str] = []

    def save_indexed(self, entries: list[str]) -> None:
        """Write ``entries`` as a new ``<file>.<index>``."""
        with self._lock:
            target = Path(f"{self.path}.{next(self._index)}")
        _write(target, entries)

    def save_base(self, entries: list[str]) -> None:
        """Add ``entries`` to ``<file>`` (rewritten whole: it stays one JSON array)."""
        with self._lock:
            self._base_entries.extend(entries)
            _write(Path(self.path), self._base_entries)


def _write(path: Path, entries: list[str]) -> None:
    try:
        path.write_text("[" + ",".join(entries) + "]")
    except OSError as exc:
        log.error("failed writing trace file '%s': %s", path, exc)


def trace_entries(trace: Trace) -> list[str]:
    """The JSON entries of one trace (not its children), Triton's order: what the
    frontend recorded before the model, the model entry, then the rest in time order,
    tensors after QUEUE_START."""
    ident = trace.id
    model: dict[str, Any] = {
        "id": ident,
        "model_name": trace.model_name,
        "model_version": trace.model_version,
    }
    if trace.request_id:
        model["request_id"] = trace.request_id
    if trace.parent is not None:
        model["parent_id"] = trace.parent.id
    stamps = sorted(trace.timestamps, key=lambda item: item[1])
    before = [s for s in stamps if s[0] in _BEFORE_MODEL]
    after = [s for s in stamps if s[0] not in _BEFORE_MODEL]
    entries = [_stamp(ident, name, ns) for name, ns in before]
    entries.append(json.dumps(model, separators=(",", ":")))
    tensors = [
        json.dumps(
            {
                "id": ident,
                "activity": activity,
                "tensor": {"name": name, "data": data, "shape": shape, "dtype": dtype},
            },
            separators=(",", ":"),
        )
        for activity, name, data, shape, dtype in trace.tensors
    ]
    queued = next((i for i, (name, _) in enumerate(after) if name == "QUEUE_START"), -1) + 1
    entries += [_stamp(ident, name, ns) for name, ns in after[:queued]]
    entries += tensors
    entries += [_stamp(ident, name, ns) for name, ns in after[queued:]]
    return entries


def _stamp(ident: int, name: str, ns: int) -> str:
    return f'{{"id":{ident},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}'


class TritonFileSink:
    """Collects one setting's traces and writes them to its :class:`TraceFile` every
    ``log_frequency`` traces (0: at shutdown), or once ``count`` traces are complete."""

    def __init__(self, file: TraceFile | None, log_frequency: int) -> None:
        self.file = file
        self.log_frequency = log_frequency
        self._lock = threading.Lock()
        self._entries: list[str] = []
        self._traces = 0

    def emit(self, trace: Trace, last: bool = False) -> None:
        """Add a complete root trace and its children; ``last``: the setting's count is
        used up, so write now."""
        entries = [e for child in trace.children for e in trace_entries(child)]
        entries += trace_entries(trace)
        with self._lock:
            self._entries += entries
            self._traces += 1
            due = last or (self.log_frequency > 0 and self._traces >= self.log_frequency)
            if not due:
                return
            batch, self._entries, self._traces = self._entries, [], 0
        if self.file is not None:
            self.file.save_indexed(batch)

    def close(self) -> None:
        """Write what is left (the setting is replaced, or the server stops)."""
        with self._lock:
            batch, self._entries, self._traces = self._entries, [], 0
        if not batch or self.file is None:
            return
        if self.log_frequency > 0:
            self.file.save_indexed(batch)
        else:
            self.file.save_base(batch)
