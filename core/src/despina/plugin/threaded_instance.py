"""A base for framework backends' instances: one framework call per batch, in a thread.

:class:`ThreadedInstance` joins a batch's inputs (:func:`~despina.inference.batching.concat_inputs`),
runs :meth:`ThreadedInstance.run` in the instance's own worker thread (frameworks release
the GIL, so N instances keep N cores busy and the event loop never blocks; calls that
prove cheaper than the hand-off run inline, see :mod:`despina.models.call_placement`), and slices
the outputs back per request as views. When a batch of several requests fails with a
:class:`~despina.errors.DespinaError`, each request runs alone so only the requests the
framework rejects fail. A backend whose config has ragged inputs, batch inputs or batch
outputs sets :attr:`ThreadedInstance.ragged` (:meth:`RaggedBatch.of`) to have batches
joined and split by Triton's ragged rules.

Each batch reports its compute split (:func:`~despina.inference.stats.report_compute`): input is
joining, the hand-off and whatever :meth:`ThreadedInstance.run` converts before it calls
:meth:`~ThreadedInstance.mark_infer_start`; output is what follows
:meth:`~ThreadedInstance.mark_infer_end`, the hand-back and the split per request. A
``run`` that marks neither counts as infer as a whole.
"""

from __future__ import annotations

import abc
import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from despina.errors import DespinaError
from despina.inference.batching import batch_sizes, concat_inputs, select_outputs, split_outputs
from despina.inference.ragged import RaggedBatch
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.inference.stats import report_compute
from despina.models.call_placement import CallPlacement, NeedsThread
from despina.plugin.backend import ModelInstance

#: The marks :meth:`ThreadedInstance.run` sets in the thread running it.
_marks = threading.local()


class ThreadedInstance(ModelInstance):
    """Subclasses implement :meth:`run`; ``output_names`` are the config's outputs."""

    #: The model's ragged rules (None: plain batching along the first dimension).
    ragged: RaggedBatch | None = None

    def __init__(
        self,
        name: str,
        batched: bool,
        output_names: Sequence[str],
        initializer: Callable[[], object] | None = None,
        inline_budget_s: float = 0.0,
    ) -> None:
        self.name = name
        self.batched = batched
        self.output_names = list(output_names)
        #: One thread per instance; ``initializer`` runs in it first (thread settings).
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=name, initializer=initializer)
        #: Calls run inline within ``inline_budget_s`` (never with an ``initializer``,
        #: whose thread settings the loop thread lacks).
        self.placement = CallPlacement(self.executor, 0.0 if initializer else inline_budget_s)

    @abc.abstractmethod
    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """Run the framework once on joined ``inputs``; return at least ``outputs``.

        Called in the instance's thread. Raise a DespinaError for a failure caused by the
        requests' data; any other exception fails the whole batch as an internal error.
        """

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """One response per request; unbatched models run their requests one by one."""
        if len(requests) > 1 and not self.batched:
            return [r for request in requests for r in await self.execute([request])]
        inputs = self._join(requests)
        wanted, device = self.wanted(requests), _on_device(requests)
        try:
            timed = await self.placement.run(self._run_marked, inputs, wanted, device)
        except DespinaError as error:
            if len(requests) > 1:
                return [r for request in requests for r in await self.execute([request])]
            return [InferenceResponse(error=error)]
        return self._responses(timed, requests)

    @property
    def runs_now(self) -> bool:
        return self.placement.inline

    def execute_now(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """One request (what the default scheduler runs at once), inline on the loop."""
        if len(requests) != 1:
            raise NeedsThread
        inputs = self._join(requests)
        wanted, device = self.wanted(requests), _on_device(requests)
        try:
            timed = self.placement.call_inline(self._run_marked, inputs, wanted, device)
        except DespinaError as error:
            return [InferenceResponse(error=error)]
        return self._responses(timed, requests)

    @staticmethod
    def mark_infer_start() -> None:
        """Called by :meth:`run` once the inputs are the framework's, right before the
        framework call."""
        _marks.infer_start = time.monotonic_ns()

    @staticmethod
    def outputs_may_stay_on_device() -> bool:
        """Called by :meth:`run`: whether every request of the batch takes DeviceArray
        outputs (:attr:`~despina.InferenceRequest.device_outputs`), so a GPU framework may
        answer its outputs as DeviceArrays instead of host copies."""
        return bool(getattr(_marks, "device_outputs", False))  # False outside an execution

    @staticmethod
    def mark_infer_end() -> None:
        """Called by :meth:`run` right after the framework call, before converting its
        outputs."""
        _marks.infer_end = time.monotonic_ns()

    def _run_marked(
        self, inputs: dict[str, np.ndarray], outputs: list[str], device_outputs: bool
    ) -> tuple[dict[str, np.ndarray], int, int]:
        """:meth:`run`, with its infer start and end (the call's bounds where unmarked)."""
        _marks.infer_start = _marks.infer_end = 0
        _marks.device_outputs = device_outputs
        start = time.monotonic_ns()
        results = self.run(inputs, outputs)
        return results, _marks.infer_start or start, _marks.infer_end or time.monotonic_ns()

    def _join(self, requests: Sequence[InferenceRequest]) -> dict[str, np.ndarray]:
        ragged = self.ragged
        return ragged.join(requests) if ragged is not None else concat_inputs(requests)

    def _responses(
        self,
        timed: tuple[dict[str, np.ndarray], int, int],
        requests: Sequence[InferenceRequest],
    ) -> list[InferenceResponse]:
        """The framework's outputs for a batch (with its infer start and end), split back
        per request."""
        outputs, infer_start, infer_end = timed
        report_compute(requests, infer_start, infer_end)
        ragged = self.ragged
        if ragged is not None:
            parts = ragged.split(outputs, requests)
        elif self.batched:
            parts = split_outputs(outputs, batch_sizes(requests))
        else:
            parts = [outputs]
        return [
            InferenceResponse(outputs=select_outputs(part, request))
            for part, request in zip(parts, requests, strict=True)
        ]

    def wanted(self, requests: Sequence[InferenceRequest]) -> list[str]:
        """The outputs any request asked for, in config order (all when one named none)."""
        wanted: set[str] = set()
        for request in requests:
            names = request.requested_output_names
            if names is None:
                return self.output_names
            wanted.update(names)
        return [name for name in self.output_names if name in wanted]

    async def close(self) -> None:
        await asyncio.to_thread(self.executor.shutdown)


def _on_device(requests: Sequence[InferenceRequest]) -> bool:
    """Whether every request takes DeviceArray outputs."""
    return all(r.device_outputs for r in requests)
