"""The server as host of model code, through its :class:`despina.plugin.ports.BackendHost`: BLS
(``bls_infer``/``bls_stream``, each call recorded for ``unload_dependents``), ``Logger``
into the server log, custom metrics into ``host.custom_metrics``, and the model loading
API. In-process models call it directly; child processes reach it through
their instance's channel (:mod:`.child_process`), which uses the async methods.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import queue
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from despina import DespinaError, InvalidArgument, NeedsThread, running_inline

from despina_backend_python.pb.errors import TritonModelException
from despina_backend_python.pb.logger import python_level
from despina_backend_python.pb.messages import BlsHost, InferenceRequest, InferenceResponse
from despina_backend_python.pb.runtime import Runtime
from despina_backend_python.server import pb_convert

if TYPE_CHECKING:
    from despina import BackendHost, CustomMetrics, Metric, MetricFamily

_END = object()


class ServerRuntime(Runtime, BlsHost):
    """Host for the models of one Backend; ``loop`` is the server's event loop."""

    def __init__(
        self, host: BackendHost, loop: asyncio.AbstractEventLoop, model_name: str, model_dir: str
    ) -> None:
        self.host = host
        self.loop = loop
        self.model_name = model_name
        self.model_dir = model_dir
        self.logger = logging.getLogger(f"despina.model.{model_name}")
        self.metric_handles = MetricHandles(host.custom_metrics)

    @property
    def unload_wait_s(self) -> float:
        """How long an unload waits for a decoupled model's open response streams: half of
        ``--exit-timeout-secs`` (at shutdown the rest delivers the errors of those left)."""
        return self.host.exit_timeout_s / 2

    def _off_loop(self, what: str) -> None:
        """Raise when a call that waits for the loop is made on it: NeedsThread for a
        synchronous ``execute`` running inline (re-run in a thread), else the model's error."""
        if _running_loop() is self.loop:
            if running_inline():
                raise NeedsThread
            raise TritonModelException(
                f"{what} would block the server's event loop; in 'async def execute' use "
                "'await request.async_exec()'"
            )

    # -- BLS -----------------------------------------------------------------------------
    def infer(self, request: InferenceRequest) -> InferenceResponse:
        self._off_loop("exec()")
        return asyncio.run_coroutine_threadsafe(self.infer_async(request), self.loop).result()

    async def infer_async(self, request: InferenceRequest) -> InferenceResponse:
        try:
            response = await self.host.bls_infer(
                self.model_name, pb_convert.request_to_core(request)
            )
        except DespinaError as exc:
            return InferenceResponse(error=pb_convert.error_to_pb(exc))
        return pb_convert.response_to_pb(response, request._preferred_memory)

    def infer_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        self._off_loop("exec(decoupled=True)")
        items: queue.SimpleQueue[Any] = queue.SimpleQueue()

        async def pump() -> None:
            try:
                async for response in self.stream_responses(request):
                    items.put(response)
            finally:
                items.put(_END)

        asyncio.run_coroutine_threadsafe(pump(), self.loop)
        while (item := items.get()) is not _END:
            yield item

    async def infer_stream_async(self, request: InferenceRequest) -> list[InferenceResponse]:
        return [r async for r in self.stream_responses(request)]

    async def stream_responses(self, request: InferenceRequest) -> Any:
        """Every response of a decoupled BLS request; an empty last one when the model
        ended the stream with the final flag alone (as Triton)."""
        last_final = False
        try:
            core_request = pb_convert.request_to_core(request)
            async for response in self.host.bls_stream(self.model_name, core_request):
                last_final = response.final
                yield pb_convert.response_to_pb(response, request._preferred_memory)
        except DespinaError as exc:
            yield InferenceResponse(error=pb_convert.error_to_pb(exc))
            return
        if not last_final:
            yield InferenceResponse()

    # -- logging and metrics -------------------------------------------------------------
    def log(self, level: str, message: str) -> None:
        self.logger.log(python_level(level), "%s", message)

    def metric(self, action: str, family: str, **fields: Any) -> float:
        """A custom-metric call of the model, by handle (see :mod:`despina_backend_python.pb.metrics`):

        - ``family`` (``description``, ``kind``): register family ``family``; its handle;
        - ``metric`` (``handle`` of the family, ``labels``, ``buckets``): a metric's handle;
        - ``increment``, ``set``, ``observe`` (``handle``, ``value``) and ``value``;
        - ``delete_family`` (``handle``): delete the family's metrics, then its handle.

        Errors are TritonModelException with Triton's texts.
        """
        try:
            return self.metric_handles.call(action, family, fields)
        except DespinaError as exc:
            raise TritonModelException(str(exc)) from None

    # -- model loading API ---------------------------------------------------------------
    def model_control(self, action: str, **fields: Any) -> Any:
        if action == "ready":
            return self.model_ready(fields["name"], fields.get("version", ""))
        self._off_loop(f"{action}_model()")
        future = asyncio.run_coroutine_threadsafe(
            self.model_control_async(action, **fields), self.loop
        )
        return future.result()

    def model_ready(self, name: str, version: str) -> bool:
        return self.host.model_ready(name, str(version or ""))

    async def model_control_async(self, action: str, **fields: Any) -> Any:
        """``ready``, ``load`` or ``unload``; raises TritonModelException with the reason."""
        if action == "ready":
            return self.model_ready(fields["name"], fields.get("version", ""))
        try:
            if action == "load":
                files = {
                    key.removeprefix("file:"): _as_bytes(value)
                    for key, value in (fields.get("files") or {}).items()
                }
                await self.host.load(fields["name"], fields.get("config") or None, files)
            elif action == "unload":
                await self.host.unload(fields["name"], bool(fields.get("unload_dependents")))
            else:
                raise InvalidArgument(f"unknown model control action '{action}'")
        except DespinaError as exc:
            raise TritonModelException(str(exc)) from None
        return None


class MetricHandles:
    """The custom metric families and metrics a model holds, by number (a model in
    another process refers to them so)."""

    def __init__(self, registry: CustomMetrics) -> None:
        self.registry = registry
        self._ids = itertools.count(1)
        self._lock = threading.RLock()  # a finalizer of the model may call in again
        #: family handle -> (family, handles of the metrics made from it)
        self._families: dict[int, tuple[MetricFamily, list[int]]] = {}
        self._metrics: dict[int, Metric] = {}

    def call(self, action: str, name: str, fields: dict[str, Any]) -> float:
        """Run ``action`` (see :meth:`ServerRuntime.metric`); its handle or value."""
        if action == "family":
            family = self.registry.family(name, str(fields["description"]), str(fields["kind"]))
            return self._add_family(family)
        handle = int(fields["handle"])
        if action == "metric":
            return self._add_metric(handle, fields["labels"], fields.get("buckets"))
        if action == "delete_family":
            self._delete_family(handle)
            return 0.0
        metric = self._metric(handle)
        if action == "value":
            return metric.value()
        operations = {"increment": metric.increment, "set": metric.set, "observe": metric.observe}
        if action not in operations:
            raise InvalidArgument(f"unknown metric operation '{action}'")
        operations[action](float(fields["value"]))
        return 0.0

    def _add_family(self, family: MetricFamily) -> int:
        with self._lock:
            handle = next(self._ids)
            self._families[handle] = (family, [])
        return handle

    def _add_metric(self, family_handle: int, labels: Any, buckets: Any) -> int:
        with self._lock:
            family, metrics = self._family(family_handle)
            if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                raise InvalidArgument("attempt to access JSON non-string as string")
            bounds = None if buckets is None else [float(b) for b in buckets]
            metric = family.metric({str(k): v for k, v in labels.items()}, bounds)
            handle = next(self._ids)
            self._metrics[handle] = metric
            metrics.append(handle)
        return handle

    def _family(self, handle: int) -> tuple[MetricFamily, list[int]]:
        entry = self._families.get(handle)
        if entry is None:
            raise InvalidArgument(f"unknown metric family handle {handle}")
        return entry

    def _metric(self, handle: int) -> Metric:
        metric = self._metrics.get(handle)
        if metric is None:
            raise InvalidArgument(f"unknown metric handle {handle}")
        return metric

    def _delete_family(self, handle: int) -> None:
        with self._lock:
            _, metrics = self._family(handle)
            for metric_handle in metrics:
                self._metrics.pop(metric_handle).delete()
            del self._families[handle]


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else base64.b64decode(value)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
