"""Process mode (the default, as Triton): each instance runs ``model.py`` in its own child.

Tensors cross through shared memory (:mod:`despina_backend_python.wire.shm`). When a child dies (crash, kill,
``os._exit`` in user code) or an ``execute`` outlives ``DESPINA_EXECUTE_TIMEOUT_SECONDS``
(then the child is killed), the requests it held fail with a clear error, the instance
reports itself unhealthy (so the model is not ready) and a new child is started; requests
that arrive meanwhile wait for it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from despina import (
    CONCURRENT_EXECUTIONS,
    InferenceRequest as CoreRequest,
    InferenceResponse as CoreResponse,
    InstanceSpec,
    Internal,
    ModelContext,
    ModelInstance,
    Unavailable,
    number_parameter,
    private_shm_dir,
    report_compute,
)

from despina_backend_python.server import core_responses, pb_convert
from despina_backend_python.server.child_process import ChildDied, ChildProcess, spawn
from despina_backend_python.server.execution_env import resolve_environment
from despina_backend_python.server.model_host import ServerRuntime
from despina_backend_python.server.readiness import ReadinessCheck
from despina_backend_python.wire.shm import PoolExhausted, new_tag

TIMEOUT_KEY = "DESPINA_EXECUTE_TIMEOUT_SECONDS"
#: How long an idle child polls its channel before sleeping (microseconds; 0: never).
#: Off by default: it pays only with a core to spare for the spinning child
#: (bench/results/perf_wave.md).
POLL_KEY = "DESPINA_CHANNEL_POLL_US"
DEFAULT_POLL_US = 0.0
#: Executions sent to a synchronous child at once (it queues them and runs them one
#: after another, so it never waits for the server between two); the scheduler still
#: gives a request to an idle instance before queueing it behind a busy one.
PIPELINE_DEPTH = 8
#: How long a request waits for a restarting instance before failing.
RESTART_WAIT_S = 60.0
FINALIZE_TIMEOUT_S = 30.0


async def start_instance(
    ctx: ModelContext, spec: InstanceSpec, args: dict[str, str], host: ServerRuntime
) -> ProcessInstance:
    """Start the child of ``spec`` (``initialize`` gets ``args``); raises Internal with
    ``initialize``'s error."""
    instance = ProcessInstance(ctx, spec, args, host)
    await instance.start()
    if instance.is_async:
        instance.__class__ = AsyncProcessInstance
    elif _may_pipeline(ctx.config, instance.timeout):
        instance.max_in_flight = PIPELINE_DEPTH
    return instance


def _may_pipeline(config: Any, timeout: float) -> bool:
    """Whether a synchronous instance may take its next batch while one runs (the child
    queues it, so its round trip overlaps the running ``execute``): only when no
    batcher forms batches for a free instance, no rate limiter counts executions, and
    no execute timeout would count the queued time."""
    return timeout == 0 and not (
        config.HasField("dynamic_batching")
        or config.HasField("sequence_batching")
        or any(group.HasField("rate_limiter") for group in config.instance_group)
    )


class ProcessInstance(ModelInstance):
    """One instance backed by a child process, restarted when it dies."""

    def __init__(
        self, ctx: ModelContext, spec: InstanceSpec, args: dict[str, str], host: ServerRuntime
    ) -> None:
        self.spec = spec
        self.host = host
        self.decoupled = bool(ctx.config.model_transaction_policy.decoupled)
        self.output_names = [o.name for o in ctx.config.output]
        self.python, self.env = resolve_environment(ctx.parameters, ctx.model_dir)
        self.hello: dict[str, Any] = {
            "op": "init",
            "prefix": private_shm_dir(),
            "model_name": ctx.name,
            "model_dir": str(ctx.version_dir),
            "model_file": str(ctx.model_file),
            "args": args,
        }
        self.timeout = number_parameter(ctx.parameters, TIMEOUT_KEY, 0.0, "seconds")
        self.hello["poll_us"] = number_parameter(
            ctx.parameters, POLL_KEY, DEFAULT_POLL_US, "microseconds"
        )
        self.child: ChildProcess | None = None
        self.is_async = False
        self.has_cupy = False
        #: Whether the model defines ``is_ready()`` (else a check asks the child nothing).
        self.defines_is_ready = False
        self._readiness = ReadinessCheck(self._is_ready)
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._back = asyncio.Event()
        self._closing = False
        self._restart_error = ""
        self._restarter: asyncio.Task[None] | None = None

    @property
    def healthy(self) -> bool:
        return self.child is not None and self.child.alive

    async def start(self) -> None:
        """Start a child and initialize the model in it."""
        try:
            child, answer = await spawn(
                self.python,
                self.env,
                dict(self.hello, tag=new_tag()),
                self.host,
                self._child_exited,
            )
        except ChildDied as exc:  # Triton's text, which users grep their logs for
            raise Internal(f"Stub process '{self.spec.name}' is not healthy. ({exc})") from None
        if answer["op"] != "ready":
            await child.stop(FINALIZE_TIMEOUT_S, finalize=False)
            raise Internal(answer.get("message", "the model process failed to start"))
        self.is_async = bool(answer["is_async"])
        self.defines_is_ready = bool(answer["is_ready"])
        #: Whether the model's environment has cupy (it can read GPU tensors).
        self.has_cupy = bool(answer["cupy"])
        self.child = child
        self._back.set()

    def _child_exited(self, child: ChildProcess) -> None:
        if self._closing or child is not self.child:
            return
        self._back.clear()
        for request, _ in child.open.values():
            request.fail(self._died_error(child))
        child.open.clear()
        self.host.logger.error(
            "model instance '%s' process %d exited unexpectedly (exit code %s); restarting",
            self.spec.name,
            child.pid,
            child.process.returncode,
        )
        self._restarter = asyncio.create_task(self._restart())

    def _died_error(self, child: ChildProcess) -> Internal:
        return Internal(
            f"Failed to process the request(s) for model '{self.spec.name}', message: the model "
            f"instance process stopped unexpectedly (exit code {child.process.returncode}); "
            "the instance is restarting"
        )

    async def _restart(self) -> None:
        delay = 0.5
        while not self._closing:
            try:
                await self.start()
                self.host.logger.info("model instance '%s' restarted", self.spec.name)
                return
            except Internal as exc:
                self._restart_error = str(exc)
                self.host.logger.error("restarting '%s' failed: %s", self.spec.name, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    async def check_ready(self) -> bool:
        """The model's ``is_ready()``, called in its process, when it defines one."""
        return await self._readiness() if self.defines_is_ready else True

    async def _is_ready(self) -> bool:
        child = await self._ready_child()
        call_id = next(self._ids)
        answer = await child.execute(call_id, {"op": "is_ready", "id": call_id})
        if "error" in answer:
            raise Internal(answer["error"])
        return bool(answer["ready"])

    async def _ready_child(self) -> ChildProcess:
        if not self._back.is_set():
            try:
                await asyncio.wait_for(self._back.wait(), RESTART_WAIT_S)
            except TimeoutError:
                raise Unavailable(
                    f"model instance '{self.spec.name}' is restarting: {self._restart_error}"
                ) from None
        assert self.child is not None
        return self.child

    async def execute(self, requests: Sequence[CoreRequest]) -> Sequence[CoreResponse] | None:
        child = await self._ready_child()
        exec_id = next(self._ids)
        tokens = [next(self._tokens) for _ in requests]
        try:
            message = self._execute_message(exec_id, child, requests, tokens)
        except PoolExhausted as exc:  # no room for the inputs: these requests fail
            _forget(child, tokens)
            raise core_responses.execute_failed(self.spec.name, str(exc)) from None
        try:
            future = child.execute(exec_id, message)
            reply = await (asyncio.wait_for(future, self.timeout) if self.timeout > 0 else future)
        except TimeoutError:
            self._back.clear()
            _forget(child, tokens)
            child.kill()
            raise core_responses.execute_failed(
                self.spec.name,
                f"execute did not finish within {self.timeout:g} s; the instance "
                "process was killed and is restarting",
            ) from None
        except ChildDied:
            _forget(child, tokens)
            raise self._died_error(child) from None
        result = reply.get("unpacked")
        try:
            if "exception" in reply:
                raise core_responses.execute_failed(self.spec.name, reply["exception"])
            if "invalid_result" in reply:
                raise core_responses.execute_failed(
                    self.spec.name,
                    f"Expected a list in the execute return, got {reply['invalid_result']}",
                )
            unanswered = reply.get("unanswered", ())
            collected = core_responses.collect(
                self.spec.name, result, requests, self.decoupled, self._convert, unanswered
            )
        except Internal:  # failed (final) by the scheduler: no stream stays open
            _forget(child, tokens)
            raise
        again = reply["rescheduled"]
        if again:  # a rescheduled request's next execute gives it a new token: this one is done
            _forget(child, [tokens[i] for i in again])
        if not self.decoupled:  # open: the requests that answer through their senders
            # (items: server responses, type names or None, so ``in`` compares safely)
            if result is not None and None not in result:  # every one answered by a return
                _forget(child, tokens)
            else:
                items = result if result is not None else [None] * len(tokens)
                _forget(
                    child,
                    [t for i, t in enumerate(tokens) if items[i] is not None or i in unanswered],
                )
        if again:
            core_responses.reschedule(self.spec.name, requests, again, self.host.logger)
        report_compute(requests, *reply["span"])
        return collected

    def _execute_message(
        self, exec_id: int, child: ChildProcess, requests: Sequence[CoreRequest], tokens: list[int]
    ) -> dict[str, Any]:
        tensors: list[tuple[str, Any]] = []
        fields: list[dict[str, Any]] = []
        for request, token in zip(requests, tokens, strict=True):
            scalar = pb_convert.request_fields(request, self.output_names)
            child.open[token] = (request, scalar["outputs"])
            tensors.extend(request.inputs.items())
            corr = scalar["correlation_id"]
            fields.append(
                {
                    "token": token,
                    "n": len(request.inputs),
                    "outputs": scalar["outputs"],
                    "id": scalar["request_id"],
                    "corr": corr if isinstance(corr, int | str) else 0,
                    "flags": scalar["flags"],
                    "params": scalar["parameters_json"],
                    "traced": request.trace is not None,
                }
            )
        return {
            "op": "execute",
            "id": exec_id,
            "requests": fields,
            "poll": not child.executions,  # see the stub's route
            **child.arena.pack(tensors),
        }

    def _convert(self, item: Any, request: CoreRequest) -> CoreResponse:
        """An item of the ``executed`` message's responses
        (:func:`~despina_backend_python.server.pb_convert.responses_from_wire`)."""
        if isinstance(item, str):
            raise core_responses.execute_failed(
                self.spec.name, f"Expected an InferenceResponse in the execute return, got {item}"
            )
        return pb_convert.requested_only(item, request.requested_output_names)

    async def close(self) -> None:
        """Let the open requests (a decoupled model's streams, a default model's requests
        its senders still answer) end (see ``settle_streams``), ``finalize`` in the child,
        then wait for it to exit."""
        self._closing = True
        if self._restarter is not None:
            self._restarter.cancel()
        child = self.child
        if child is not None and child.alive:
            if child.open:  # decoupled streams, or default requests answered by senders
                await core_responses.settle_streams(
                    lambda: [request for request, _ in child.open.values()],
                    self.host.unload_wait_s,
                    self.hello["model_name"],
                )
            error = await child.stop(FINALIZE_TIMEOUT_S)
            if error:
                self.host.logger.error("finalize of '%s' failed: %s", self.spec.name, error)
        self.child = None


def _forget(child: ChildProcess, tokens: Sequence[int]) -> None:
    """Stop delivering what the child sends for these requests (they were answered)."""
    for token in tokens:
        child.open.pop(token, None)


class AsyncProcessInstance(ProcessInstance):
    """An instance whose model has ``async def execute``: many executions at once."""

    max_in_flight = CONCURRENT_EXECUTIONS
