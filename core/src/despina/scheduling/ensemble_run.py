"""One ensemble request in flight: its tensors, its running steps, and its answer.

Tensors live in a :class:`Flow` (a ``ChainMap`` whose first map holds what was produced
in that flow). The root flow starts with the request's inputs; each response of a
decoupled step opens a child flow holding that response's outputs. A step runs in a flow
once every tensor it reads is visible there and at least one of them was produced there,
so the steps downstream of a decoupled step run once per response, the others once.

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
from despina.scheduling.ensemble_graph import EnsembleGraph, Step, needed_steps

if TYPE_CHECKING:
    from despina.plugin.ports import SchedulerHost

log = logging.getLogger("despina.scheduling")

#: How often a running ensemble request looks whether its client cancelled it.
CANCEL_POLL_S = 0.2
#: The value of a tensor known to be absent.
ABSENT = None


class Flow:
    """The tensors one line of execution sees, and the steps started in it."""

    __slots__ = ("answered", "started", "tensors")

    def __init__(self, tensors: ChainMap[str, np.ndarray | None]) -> None:
        self.tensors = tensors
        self.started: set[int] = set()
        self.answered = False

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
        self._advance(Flow(ChainMap(tensors)))
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
        self.step_requests.append(request)
        try:
            async for response in self.host.infer_stream(request):
                if response.error is not None:
                    self._fail_step(step, response.error)
                    return
                outputs = {
                    tensor: response.outputs.get(name, ABSENT)
                    for name, tensor in step.outputs.items()
                }
                if step.index in self.graph.decoupled:
                    target = Flow(flow.tensors.new_child(outputs))
                else:
                    flow.tensors.maps[0].update(outputs)
                    target = flow
                self._advance(target)
        except DespinaError as exc:
            self._fail_step(step, exc)
        except Exception as exc:
            log.exception("ensemble '%s' step '%s' failed", self.model.name, step.model_name)
            self._fail_step(step, Internal(f"{type(exc).__name__}: {exc}"))
        finally:
            self.step_requests.remove(request)

    def _step_request(self, flow: Flow, step: Step) -> InferenceRequest:
        """The step's request: the flow's tensors as they are (absent ones left out), the
        ensemble request's id, parameters, priority, timeout and sequence fields; a child
        of its trace."""
        parent = self.request
        inputs = {name: flow.tensors[tensor] for name, tensor in step.inputs.items()}
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
        found = {name: flow.tensors[name] for name in wanted}
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

    def _fail_step(self, step: Step, error: DespinaError) -> None:
        self._fail(
            type(error)(f"in ensemble '{self.model.name}', step '{step.model_name}': {error}")
        )

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
