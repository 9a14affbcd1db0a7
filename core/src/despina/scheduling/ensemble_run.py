"""One ensemble request in flight: its tensors, its running steps, and its answer.

Tensors live in a :class:`Flow` (a ``ChainMap`` whose first map holds what was produced
in that flow). The root flow starts with the request's inputs; each response of a
decoupled step opens a child flow holding that response's outputs. A step runs in a flow
once every tensor it reads is visible there and at least one of them was produced there,
so the steps downstream of a decoupled step run once per response, the others once.

Each tensor carries the batch size of the request that made it (the ensemble request's
for its inputs, a step's request's for its outputs; 0 where that model does not batch).
As Triton, a step whose model batches gets a tensor made without batching with a batch
dimension of 1 in front where the tensor's shape is the model input's ``dims``, and a
step whose model does not batch gets a tensor of batch size 1 without its batch
dimension where its shape is not the input's ``dims``; any other tensor goes as it is.
The ensemble's outputs are reshaped the same way for the ensemble's own batching.

As in Triton, a tensor may be known to be absent (:data:`ABSENT`): an optional ensemble
input the request leaves out, or a step output a response does not carry. An absent
tensor counts as there for the steps reading it, which get their request without it
(their model's input must be optional), and the answer leaves it out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import ChainMap
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from despina.errors import Cancelled, DespinaError, Internal, InvalidArgument
from despina.inference.pipeline import conclude, fail, respond
from despina.inference.request import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    SequenceFlags,
)
from despina.scheduling.base import ScheduledModel, stopping_error
from despina.scheduling.ensemble_graph import EnsembleGraph, Step, needed_steps, same_shape

if TYPE_CHECKING:
    from despina.plugin.ports import SchedulerHost

log = logging.getLogger("despina.scheduling")

#: How often a running ensemble request looks whether its client cancelled it.
CANCEL_POLL_S = 0.2
#: The value of a tensor known to be absent.
ABSENT = None


class Flow:
    """The tensors one line of execution sees, their batch sizes, and the steps started
    in it."""

    __slots__ = ("answered", "batch", "started", "tensors")

    def __init__(
        self, tensors: ChainMap[str, np.ndarray | None], batch: ChainMap[str, int]
    ) -> None:
        self.tensors = tensors
        self.batch = batch
        self.started: set[int] = set()
        self.answered = False

    def child(self, outputs: dict[str, np.ndarray | None], batch_size: int) -> Flow:
        """The flow of one response of a decoupled step: this one plus ``outputs``."""
        sizes = dict.fromkeys(outputs, batch_size)
        return Flow(self.tensors.new_child(outputs), self.batch.new_child(sizes))

    def add(self, outputs: dict[str, np.ndarray | None], batch_size: int) -> None:
        """Record a step's ``outputs``, made by a request of ``batch_size``, in this flow."""
        self.tensors.maps[0].update(outputs)
        self.batch.maps[0].update(dict.fromkeys(outputs, batch_size))

    def has(self, names: Iterable[str]) -> bool:
        """True when every tensor is visible and at least one was produced in this flow."""
        names = list(names)
        local = self.tensors.maps[0]
        return all(n in self.tensors for n in names) and any(n in local for n in names)


class EnsembleRun:
    """Runs one ensemble request to its answer; :meth:`run` never raises."""

    def __init__(
        self,
        model: ScheduledModel,
        graph: EnsembleGraph,
        host: SchedulerHost,
        request: InferenceRequest,
        limits: Sequence[asyncio.Semaphore] = (),
    ) -> None:
        """``limits``: one semaphore per step bounding its in-flight requests across every
        ensemble request (``max_inflight_requests``); empty for no limit."""
        self.model = model
        self.graph = graph
        self.limits = limits
        self.host = host
        self.request = request
        wanted = request.requested_output_names
        #: The steps this request runs: those feeding the outputs it asked for.
        self.steps = graph.steps if wanted is None else needed_steps(graph, wanted)
        self.decoupled = bool(model.config.model_transaction_policy.decoupled)
        self.inflight = 0
        self.idle = asyncio.Event()
        self.failed = False
        self.answers = 0
        self.step_requests: list[InferenceRequest] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Start the steps the inputs allow, wait until no step runs, then finish. Once
        cancelled (a stopping server stopped waiting for it) it answers the stopping
        error."""
        tensors: dict[str, np.ndarray | None] = dict.fromkeys(self.graph.optional_inputs, ABSENT)
        tensors.update(self.request.inputs)
        batches = self.model.config.max_batch_size > 0
        batch = {name: a.shape[0] if batches else 0 for name, a in self.request.inputs.items()}
        self._advance(Flow(ChainMap(tensors), ChainMap(batch)))
        try:
            while self.inflight:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.idle.wait(), CANCEL_POLL_S)
                if self.request.cancelled and not self.failed:
                    self._fail(Cancelled("Request was cancelled"))  # cancels the queued steps
        except asyncio.CancelledError:
            self._fail(stopping_error(self.model))
            raise
        self._finish()

    def _advance(self, flow: Flow) -> None:
        """Start every step that became runnable in ``flow``; answer if it is complete."""
        if self.failed:
            return
        if self.request.cancelled:
            self._fail(Cancelled("Request was cancelled"))
            return
        for step in self.steps:
            if step.index not in flow.started and flow.has(step.inputs.values()):
                flow.started.add(step.index)
                self.inflight += 1
                task = asyncio.create_task(self._step(flow, step))
                self.tasks.add(task)
                task.add_done_callback(self._step_done)
        self._answer(flow)

    def _step_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.inflight -= 1
        if not self.inflight:
            self.idle.set()

    async def _step(self, flow: Flow, step: Step) -> None:
        limit = self.limits[step.index] if self.limits else contextlib.nullcontext()
        async with limit:
            await self._run_step(flow, step)

    async def _run_step(self, flow: Flow, step: Step) -> None:
        request = self._step_request(flow, step)
        batch_size = self._batch_size(step, request)
        self.step_requests.append(request)
        try:
            async for response in self.host.infer_stream(request):
                if response.error is not None:
                    self._fail_step(response.error)
                    return
                outputs = {
                    tensor: response.outputs.get(name, ABSENT)
                    for name, tensor in step.outputs.items()
                }
                if step.index in self.graph.decoupled:
                    target = flow.child(outputs, batch_size)
                else:
                    flow.add(outputs, batch_size)
                    target = flow
                self._advance(target)
        except DespinaError as exc:
            self._fail_step(exc)
        except Exception as exc:
            log.exception("ensemble '%s' step '%s' failed", self.model.name, step.model_name)
            self._fail_step(Internal(f"{type(exc).__name__}: {exc}"))
        finally:
            self.step_requests.remove(request)

    def _step_request(self, flow: Flow, step: Step) -> InferenceRequest:
        """The step's request: the flow's tensors (absent ones left out), reshaped for
        the step's model's batching, the ensemble request's id, parameters, priority,
        timeout and sequence fields; a child of its trace."""
        parent = self.request
        inputs = {
            name: self._input(flow, step, name, tensor) for name, tensor in step.inputs.items()
        }
        return InferenceRequest(
            step.model_name,
            {name: array for name, array in inputs.items() if array is not ABSENT},
            model_version=step.model_version,
            id=parent.id,
            outputs=[RequestedOutput(name) for name in step.outputs],
            parameters=dict(parent.parameters),
            priority=parent.priority,
            timeout_us=parent.timeout_us,
            correlation_id=parent.correlation_id,
            flags=parent.flags,
            device_outputs=self._stays_on_device(step),
            trace=parent.trace.child() if parent.trace is not None else None,
        )

    def _batch_size(self, step: Step, request: InferenceRequest) -> int:
        """The batch size of ``step``'s ``request`` (Triton's ``BatchSize``): the first
        dimension of its first input where its model batches, else 0."""
        first = next(iter(request.inputs.values()), None)
        if step.index not in self.graph.batching or first is None or not first.shape:
            return 0
        return int(first.shape[0])

    def _input(self, flow: Flow, step: Step, name: str, tensor: str) -> np.ndarray | None:
        """Ensemble tensor ``tensor`` as input ``name`` of ``step``'s model."""
        return _reshaped(
            flow.tensors[tensor],
            self.graph.input_dims[step.index, name],
            step.index in self.graph.batching,
            flow.batch.get(tensor, 0),
        )

    def _stays_on_device(self, step: Step) -> bool:
        """Whether ``step`` may answer DeviceArrays: every step reading its outputs takes
        device inputs, and an output of the ensemble itself goes to a requester that
        takes device outputs."""
        for tensor in step.outputs.values():
            if tensor in self.graph.outputs and not self.request.device_outputs:
                return False
            for reader in self.graph.steps:
                if tensor in reader.inputs.values() and not self.host.takes_device_inputs(
                    reader.model_name, reader.model_version
                ):
                    return False
        return True

    def _answer(self, flow: Flow) -> None:
        """Answer once every requested output is there or absent (left out), as Triton."""
        wanted = self.request.requested_output_names or self.graph.outputs
        if flow.answered or self.failed or not flow.has(wanted):
            return
        flow.answered = True
        batching = self.model.config.max_batch_size > 0
        found = {
            name: _reshaped(
                flow.tensors[name], self.graph.output_dims[name], batching, flow.batch.get(name, 0)
            )
            for name in wanted
        }
        outputs = {name: array for name, array in found.items() if array is not ABSENT}
        response = InferenceResponse(self.model.name, self.model.version, self.request.id, outputs)
        response.parameters.update(self._sequence_parameters())
        self.answers += 1
        if self.decoupled:
            respond(self.request, response)
        else:
            conclude(self.model, self.request, response)

    def _sequence_parameters(self) -> dict[str, int | str | bool]:
        """The sequence fields Triton puts on every ensemble response."""
        request = self.request
        return {
            "sequence_id": request.correlation_id,
            "sequence_start": SequenceFlags.START in request.flags,
            "sequence_end": SequenceFlags.END in request.flags,
        }

    def _fail_step(self, error: DespinaError) -> None:
        """A step failed: Triton's ensemble prefix before the step's own error."""
        self._fail(type(error)(f"in ensemble '{self.model.name}', {error}"))

    def _fail(self, error: DespinaError) -> None:
        """Answer with ``error`` (once) and cancel the steps still queued."""
        if self.failed:
            return
        self.failed = True
        for request in self.step_requests:
            request.cancel()
        reason = "CANCELED" if isinstance(error, Cancelled) else "OTHER"
        fail(self.model, [self.request], error, reason)

    def _finish(self) -> None:
        if not self.failed and not self.answers and not self.decoupled:
            self._fail(
                InvalidArgument(
                    f"in ensemble '{self.model.name}', unexpected deadlock, at least one output "
                    "is not set while no more ensemble steps can be made"
                )
            )
        if self.failed:
            return
        if self.decoupled:
            conclude(self.model, self.request, None)


def _reshaped(
    array: np.ndarray | None, dims: tuple[int, ...], batching: bool, made_in: int
) -> np.ndarray | None:
    """``array``, made by a request of batch size ``made_in`` (0: without batching), for a
    tensor of config ``dims`` of a model that does or does not batch: with a batch
    dimension of 1 added or removed where batching differs (Triton's ``ReshapeTensorDims``)."""
    if array is ABSENT or batching == (made_in != 0):
        return array
    shape = tuple(array.shape)
    if batching and same_shape(dims, shape):
        return array.reshape((1, *shape))
    if not batching and made_in == 1 and not same_shape(dims, shape):
        return array.reshape(shape[1:])
    return array
