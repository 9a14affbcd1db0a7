"""A backend for benchmarks ("bench"): OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.

It does what Triton's Python-backend ``add_sub`` does, in-process, so a benchmark measures
the server's own path. Serve it with ``despina serve --plugin bench_backend`` and
``PYTHONPATH=bench``.
"""

from __future__ import annotations

from collections.abc import Sequence

from despina.inference.request import InferenceRequest, InferenceResponse
from despina.plugin.backend import Backend, InstanceSpec, ModelInstance
from despina.plugin.hookspecs import hookimpl


class AddSubInstance(ModelInstance):
    """Answers each request with the sum and difference of its two inputs."""

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        responses = []
        for request in requests:
            a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
            responses.append(InferenceResponse(outputs={"OUTPUT0": a + b, "OUTPUT1": a - b}))
        return responses


class AddSubBackend(Backend):
    name = "bench"
    default_model_filename = "model.bench"

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return AddSubInstance()


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [AddSubBackend]
