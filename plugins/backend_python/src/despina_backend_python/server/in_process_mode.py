"""In-process mode: the model runs inside the server process, loaded once.

Every instance of ``count: N`` shares one ``TritonPythonModel`` object (weights loaded
once, ``initialize`` called once with the first instance's args). A synchronous
``execute`` runs in a worker thread per instance (so N instances run N calls at once,
truly in parallel for code that releases the GIL) until it proves cheaper than the
thread hand-off, then inline on the loop (:mod:`despina.models.call_placement`; the
``DESPINA_INLINE_EXECUTE_US`` parameter sets the budget, 0 disables); an
``async def execute`` runs on the server's event loop and each instance takes many
requests concurrently.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from collections.abc import MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from despina import (
    CONCURRENT_EXECUTIONS,
    CallPlacement,
    InferenceRequest as CoreRequest,
    InferenceResponse as CoreResponse,
    InstanceSpec,
    Internal,
    ModelContext,
    ModelInstance,
    inline_budget,
    report_compute,
)

from despina_backend_python.hosting.loading import (
    MODEL_ERRORS,
    describe_exception,
    load_model_class,
)
from despina_backend_python.hosting.readiness import defines_is_ready, readiness_of
from despina_backend_python.hosting.returned import (
    ReturnedError,
    check_returned,
    close_senders,
)
from despina_backend_python.pb import runtime as pb_runtime
from despina_backend_python.pb.messages import InferenceRequest, InferenceResponse, Responder
from despina_backend_python.pb.tensor import Tensor
from despina_backend_python.server import core_responses, pb_convert
from despina_backend_python.server.model_host import ServerRuntime
from despina_backend_python.server.readiness import ReadinessCheck


class CoreResponder(Responder):
    """Sends a model's responses straight to the server request's stream."""

    __slots__ = ("decoupled", "open", "request", "wanted")

    def __init__(
        self,
        request: CoreRequest,
        wanted: list[str],
        open_requests: MutableMapping[int, CoreRequest],
        decoupled: bool,
    ) -> None:
        """``wanted``: the outputs execute was told the request asks for (none other is
        sent); ``open_requests``: where the request stays (by ``id``) until its final
        response, if it may answer through a sender: always for a decoupled model, once
        its sender is taken for others."""
        self.request = request
        self.wanted = wanted
        self.open = open_requests
        self.decoupled = decoupled
        if decoupled:
            open_requests[id(request)] = request

    def taken(self) -> None:
        self.open[id(self.request)] = self.request

    def send(self, response: InferenceResponse | None, final: bool) -> None:
        stream = self.request.stream
        if final:
            self.open.pop(id(self.request), None)
        if stream is None:
            return
        if response is None:
            stream.send(None, final)
        else:
            self.request.respond(pb_convert.response_to_core(response, self.wanted), final)

    def is_cancelled(self) -> bool:
        return self.request.cancelled


class SharedModel:
    """The one model object of an in-process model version."""

    def __init__(
        self,
        context: ModelContext,
        host: ServerRuntime,
        args: dict[str, str],
        device_inputs: bool = False,
    ) -> None:
        """``device_inputs``: inputs may be DeviceArrays (they become GPU tensors)."""
        self.context = context
        #: How a request's input becomes a pb tensor.
        self.make_tensor = pb_convert.input_tensor if device_inputs else Tensor._trusted
        self.host = host
        self.args = args
        self.decoupled = bool(context.config.model_transaction_policy.decoupled)
        self.output_names = [o.name for o in context.config.output]
        self.model: Any = None
        self.is_async = False
        #: The model's ``is_ready()``, shared by the instances (they share the model).
        self.readiness: ReadinessCheck | None = None
        self.executor = ThreadPoolExecutor(
            max_workers=max(sum(g.count for g in context.config.instance_group), 1),
            thread_name_prefix=f"despina-py-{context.name}",
        )
        #: Where synchronous ``execute`` calls run (shared: the instances share the model).
        self.placement = CallPlacement(self.executor, inline_budget(context.config))
        #: Requests that may still answer through their senders (see CoreResponder), by ``id``;
        #: weak, so one the model dropped without a final response (execute raised, a
        #: cancelled request abandoned) does not stay here until unload.
        self.open: weakref.WeakValueDictionary[int, CoreRequest] = weakref.WeakValueDictionary()

    def _in_host(self, call: Any, *args: Any) -> Any:
        token = pb_runtime.activate(self.host)
        try:
            return call(*args)
        finally:
            pb_runtime.deactivate(token)

    async def load(self) -> None:
        """Import model.py, create the model, run ``initialize`` (in a worker thread)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self._in_host, self._load)

    def _load(self) -> None:
        ctx = self.context
        package = f"despina_python_model_{id(self):x}"  # one per model version: unique
        try:
            model_class = load_model_class(ctx.model_file, package)
            self.model = model_class()
            if hasattr(self.model, "initialize"):
                self.host.bls_allowed = False
                result = self.model.initialize(self.args)
                if inspect.isawaitable(result):
                    asyncio.run(_awaited(result))
                self.host.bls_allowed = True
        except MODEL_ERRORS as exc:  # model code may raise anything
            raise Internal(describe_exception(exc)) from None
        self.is_async = inspect.iscoroutinefunction(self.model.execute)
        if defines_is_ready(self.model):
            self.readiness = ReadinessCheck(self._is_ready)

    async def _is_ready(self) -> bool:
        """One ``is_ready()`` call: in a thread, a coroutine it returns on the loop."""
        value = await asyncio.to_thread(self._in_host, self.model.is_ready)
        if inspect.isawaitable(value):
            token = pb_runtime.activate(self.host)
            try:
                value = await value
            finally:
                pb_runtime.deactivate(token)
        return readiness_of(value)

    async def finalize(self) -> None:
        """Let the open requests end (a decoupled model's streams, a default model's
        requests its senders still answer; see ``settle_streams``), run
        ``finalize`` (if the model has one) and stop the worker threads."""
        loop = asyncio.get_running_loop()
        if self._open_requests():
            await core_responses.settle_streams(
                self._open_requests, self.host.unload_wait_s, self.context.name
            )
            self.open.clear()
        self.host.bls_allowed = False
        try:
            if self.model is not None and hasattr(self.model, "finalize"):
                await loop.run_in_executor(self.executor, self._in_host, self.model.finalize)
        except MODEL_ERRORS as exc:  # a failing finalize is logged, not fatal
            self.host.logger.error("finalize failed: %s", describe_exception(exc))
        finally:
            self.executor.shutdown(wait=False)
            pb_runtime.forget(self.host)

    def _open_requests(self) -> list[CoreRequest]:
        # valuerefs() copies in one step: model threads may add or finish requests meanwhile
        return [r for ref in self.open.valuerefs() if (r := ref()) is not None]

    def timed_execute(self, pb_requests: list[InferenceRequest]) -> tuple[Any, int, int]:
        """The model's (synchronous) ``execute``, with its start and end (monotonic ns)."""
        start = time.monotonic_ns()
        result = self.model.execute(pb_requests)
        return result, start, time.monotonic_ns()

    def pb_requests(self, requests: Sequence[CoreRequest]) -> list[InferenceRequest]:
        ctx = self.context
        make = self.make_tensor
        incoming = []
        for r in requests:
            fields = pb_convert.request_fields(r, self.output_names)
            request = InferenceRequest.incoming(
                CoreResponder(r, fields["outputs"], self.open, self.decoupled),
                [make(name, array) for name, array in r.inputs.items()],
                model_name=ctx.name,
                model_version=ctx.version,
                **fields,
            )
            request._trace = r.trace  # what request.trace() hands to a BLS request
            incoming.append(request)
        return incoming


def _convert(item: Any, request: CoreRequest) -> CoreResponse:
    return pb_convert.response_to_core(item, request.requested_output_names)


async def _awaited(value: Any) -> Any:
    return await value


class InProcessInstance(ModelInstance):
    """One instance: a worker-thread slot on the shared model."""

    def __init__(self, shared: SharedModel, spec: InstanceSpec) -> None:
        self.shared = shared
        self.spec = spec

    async def execute(self, requests: Sequence[CoreRequest]) -> Sequence[CoreResponse] | None:
        shared = self.shared
        pb_requests = shared.pb_requests(requests)
        try:
            timed = await shared.placement.run(shared._in_host, shared.timed_execute, pb_requests)
        except MODEL_ERRORS as exc:  # model code may raise anything
            raise self._failed(pb_requests, exc) from None
        return self._collect(requests, pb_requests, *timed)

    async def check_ready(self) -> bool:
        """The model's ``is_ready()`` (one call answers every instance's check)."""
        readiness = self.shared.readiness
        return True if readiness is None else await readiness()

    @property
    def runs_now(self) -> bool:
        return self.shared.placement.inline

    def execute_now(self, requests: Sequence[CoreRequest]) -> Sequence[CoreResponse] | None:
        shared = self.shared
        pb_requests = shared.pb_requests(requests)
        try:
            timed = shared.placement.call_inline(shared._in_host, shared.timed_execute, pb_requests)
        except MODEL_ERRORS as exc:  # model code may raise anything
            raise self._failed(pb_requests, exc) from None
        return self._collect(requests, pb_requests, *timed)

    def _failed(self, pb_requests: list[InferenceRequest], exc: BaseException) -> Internal:
        """The error of an ``execute`` that raised; its requests' senders are closed."""
        close_senders(pb_requests)
        return core_responses.exception_failed(self.spec.name, exc)

    def _collect(
        self,
        requests: Sequence[CoreRequest],
        pb_requests: list[InferenceRequest],
        result: Any,
        start_ns: int,
        end_ns: int,
    ) -> Sequence[CoreResponse] | None:
        """The responses of an ``execute`` that ran from ``start_ns`` to ``end_ns``, which
        reports the compute split (input: requests to pb_utils; output: back)."""
        decoupled = self.shared.decoupled
        try:
            unanswered, again = check_returned(self.spec.name, pb_requests, result, decoupled)
        except ReturnedError as exc:
            close_senders(pb_requests)
            raise core_responses.execute_failed(self.spec.name, str(exc)) from None
        collected = core_responses.collect(
            self.spec.name, result, requests, decoupled, _convert, unanswered
        )
        core_responses.reschedule(self.spec.name, requests, again, self.shared.host.logger)
        report_compute(requests, start_ns, end_ns)
        return collected


class AsyncInProcessInstance(InProcessInstance):
    """An instance of a model whose ``execute`` is ``async def``: runs on the server's
    loop, many requests at once."""

    max_in_flight = CONCURRENT_EXECUTIONS

    @property
    def runs_now(self) -> bool:
        return False

    async def execute(self, requests: Sequence[CoreRequest]) -> Sequence[CoreResponse] | None:
        shared = self.shared
        token = pb_runtime.activate(shared.host)
        try:
            pb_requests = shared.pb_requests(requests)
            start = time.monotonic_ns()
            result = await shared.model.execute(pb_requests)
        except MODEL_ERRORS as exc:  # model code may raise anything
            if shared.decoupled:  # as Triton: logged, its senders may have ended every request
                shared.host.log("ERROR", describe_exception(exc))
            raise self._failed(pb_requests, exc) from None
        finally:
            pb_runtime.deactivate(token)
        return self._collect(requests, pb_requests, result, start, time.monotonic_ns())
