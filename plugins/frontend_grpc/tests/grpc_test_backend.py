"""The gRPC tests' backend ("grpctest"), its behaviour chosen by the config's ``mode``:

- ``echo``: OUT = IN (any datatype); the response parameters carry the request's
  correlation id, sequence flags and free-form parameters.
- ``add_sub``: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (FP32).
- ``sleep``: OUT = IN after sleeping IN[0] / 10 seconds (requests overlap).
- ``decoupled``: IN[0] responses OUT = [i], then the final flag alone; IN[0] < 0 fails.
- ``fail``: raises, so every request fails inside the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from despina.errors import InvalidArgument
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.plugin.backend import CONCURRENT_EXECUTIONS, Backend, InstanceSpec, ModelInstance
from despina.plugin.hookspecs import hookimpl


def config(
    name: str, mode: str = "echo", datatype: str = "FP32", dims: str = "-1", decoupled: bool = False
) -> str:
    """config.pbtxt text of a grpctest model."""
    config_type = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    if mode == "add_sub":
        tensors = (
            f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }}, '
            f'{{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
            f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }}, '
            f'{{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
        )
    else:
        tensors = (
            f'input [ {{ name: "IN" data_type: {config_type} dims: [ {dims} ] }} ]\n'
            f'output [ {{ name: "OUT" data_type: {config_type} dims: [ {dims} ] }} ]\n'
        )
    policy = "model_transaction_policy { decoupled: true }\n" if decoupled else ""
    return (
        f'name: "{name}"\nbackend: "grpctest"\nmax_batch_size: 0\n{tensors}{policy}'
        f'parameters {{ key: "mode" value {{ string_value: "{mode}" }} }}\n'
    )


class GrpcTestInstance(ModelInstance):
    max_in_flight = CONCURRENT_EXECUTIONS

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        if self.mode == "fail":
            raise InvalidArgument("grpctest model refuses every request")
        if self.mode == "decoupled":
            for request in requests:
                await self._decoupled(request)
            return None
        return [await self._one(r) for r in requests]

    async def _one(self, request: InferenceRequest) -> InferenceResponse:
        inputs = request.inputs
        if self.mode == "add_sub":
            a, b = inputs["INPUT0"], inputs["INPUT1"]
            return InferenceResponse(outputs={"OUTPUT0": a + b, "OUTPUT1": a - b})
        if self.mode == "sleep":
            await asyncio.sleep(float(inputs["IN"].reshape(-1)[0]) / 10)
        parameters = {
            "correlation_id": request.correlation_id,
            "sequence_flags": int(request.flags),
            **request.parameters,
        }
        return InferenceResponse(outputs={"OUT": inputs["IN"]}, parameters=parameters)

    async def _decoupled(self, request: InferenceRequest) -> None:
        count = int(request.inputs["IN"].reshape(-1)[0])
        if count < 0:
            request.fail(InvalidArgument("count must not be negative"))
            return
        for index in range(count):
            await asyncio.sleep(0)
            request.respond(
                InferenceResponse(outputs={"OUT": np.array([index], np.int32)}), final=False
            )
        assert request.stream is not None
        request.stream.send(None, final=True)


class GrpcTestBackend(Backend):
    name = "grpctest"

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return GrpcTestInstance(self.context.parameters.get("mode", "echo"))


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [GrpcTestBackend]
