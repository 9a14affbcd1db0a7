"""In-process mode: the model runs inside the server process, loaded once.

Every instance of ``count: N`` shares one ``TritonPythonModel`` object (weights loaded
once, ``initialize`` called once with the first instance's args). A synchronous
``execute`` runs in a worker thread per instance (so N instances run N calls at once,
truly in parallel for code that releases the GIL) until it proves cheaper than the
thread hand-off, then inline on the loop (:mod:`despina.placement`; the
``DESPINA_INLINE_EXECUTE_US`` parameter sets the budget, 0 disables); an
``async def execute`` runs on the server's event loop and each instance takes many
requests concurrently.
"""

from __future__ import annotations

import asyncio
import inspect
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
)

from despina_backend_python import convert, responses
from despina_backend_python.loading import describe_exception, load_model_class
from despina_backend_python.pb import runtime as pb_runtime
from despina_backend_python.pb.messages import InferenceRequest, InferenceResponse, Responder
from despina_backend_python.pb.tensor import Tensor
from despina_backend_python.server_runtime import ServerRuntime


class CoreResponder(Responder):
    """Sends a model's responses straight to the server request's stream."""

    __slots__ = ("open", "request", "wanted")

    def __init__(
        self,
        request: CoreRequest,
        wanted: list[str],
        open_requests: MutableMapping[int, CoreRequest] | None,
    ) -> None:
        """``wanted``: the outputs execute was told the request asks for (none other is
        sent); ``open_requests``: where a decoupled model's request stays (by ``id``) until
        its final response (None for other models)."""
        self.request = request
        self.wanted = wanted
        self.open = open_requests
        if open_requests is not None:
            open_requests[id(request)] = request

    def send(self, response: InferenceResponse | None, final: bool) -> None:
        stream = self.request.stream
        if final and self.open is not None:
            self.open.pop(id(self.request), None)
        if stream is None:
            return
        if response is None:
            stream.send(None, final)
        else:
            self.request.respond(convert.response_to_core(response, self.wanted), final)

    def is_cancelled(self) -> bool:
        return self.request.cancelled


class SharedModel:
    """The one model object of an in-process model version."""

    def __init__(self, context: ModelContext, host: ServerRuntime, args: dict[str, str]) -> None:
        self.context = context
        self.host = host
        self.args = args
        self.decoupled = bool(context.config.model_transaction_policy.decoupled)
        self.output_names = [o.name for o in context.config.output]
        self.model: Any = None
        self.is_async = False
        self.executor = ThreadPoolExecutor(
            max_workers=max(sum(g.count for g in context.config.instance_group), 1),
            thread_name_prefix=f"despina-py-{context.name}",
        )
        #: Where synchronous ``execute`` calls run (shared: the instances share the model).
        self.placement = CallPlacement(self.executor, inline_budget(context.config))
        #: A decoupled model's requests still waiting for their final response, by ``id``;
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
        module = f"despina_python_model_{ctx.name}_{ctx.version}_{id(self):x}"
        try:
            model_class = load_model_class(ctx.model_file, module)
            self.model = model_class()
            if hasattr(self.model, "initialize"):
                result = self.model.initialize(self.args)
                if inspect.isawaitable(result):
                    asyncio.run(_awaited(result))
        except Exception as exc:  # noqa: BLE001 - model code may raise anything
            raise Internal(describe_exception(exc)) from None
        self.is_async = inspect.iscoroutinefunction(self.model.execute)

    async def finalize(self) -> None:
        """Let a decoupled model's open streams end (see ``settle_streams``), run
        ``finalize`` (if the model has one) and stop the worker threads."""
        loop = asyncio.get_running_loop()
        if self.decoupled:
            await responses.settle_streams(
                self._open_requests, self.host.unload_wait_s, self.context.name
            )
            self.open.clear()
        try:
            if self.model is not None and hasattr(self.model, "finalize"):
                await loop.run_in_executor(self.executor, self._in_host, self.model.finalize)
        except Exception as exc:  # noqa: BLE001 - a failing finalize is logged, not fatal
            self.host.logger.error("finalize failed: %s", describe_exception(exc))
        finally:
            self.executor.shutdown(wait=False)
            pb_runtime.forget(self.host)

    def _open_requests(self) -> list[CoreRequest]:
        # valuerefs() copies in one step: model threads may add or finish requests meanwhile
        return [r for ref in self.open.valuerefs() if (r := ref()) is not None]

    def pb_requests(self, requests: Sequence[CoreRequest]) -> list[InferenceRequest]:
        ctx = self.context
        incoming = []
        for r in requests:
            fields = convert.request_fields(r, self.output_names)
            incoming.append(
                InferenceRequest.incoming(
                    CoreResponder(r, fields["outputs"], self.open if self.decoupled else None),
                    [Tensor._trusted(name, array) for name, array in r.inputs.items()],
                    model_name=ctx.name,
                    model_version=ctx.version,
                    **fields,
                )
            )
        return incoming


def _convert(item: Any, request: CoreRequest) -> CoreResponse:
    return convert.response_to_core(item, request.requested_output_names)


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
            result = await shared.placement.run(shared._in_host, shared.model.execute, pb_requests)
        except Exception as exc:  # noqa: BLE001 - model code may raise anything
            raise responses.exception_failed(self.spec.name, exc) from None
        return responses.collect(self.spec.name, result, requests, shared.decoupled, _convert)

    @property
    def runs_now(self) -> bool:
        return self.shared.placement.inline

    def execute_now(self, requests: Sequence[CoreRequest]) -> Sequence[CoreResponse] | None:
        shared = self.shared
        pb_requests = shared.pb_requests(requests)
        try:
            result = shared.placement.call_inline(
                shared._in_host, shared.model.execute, pb_requests
            )
        except Exception as exc:  # noqa: BLE001 - model code may raise anything
            raise responses.exception_failed(self.spec.name, exc) from None
        return responses.collect(self.spec.name, result, requests, shared.decoupled, _convert)


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
            result = await shared.model.execute(shared.pb_requests(requests))
        except Exception as exc:  # noqa: BLE001 - model code may raise anything
            raise responses.exception_failed(self.spec.name, exc) from None
        finally:
            pb_runtime.deactivate(token)
        return responses.collect(self.spec.name, result, requests, shared.decoupled, _convert)
