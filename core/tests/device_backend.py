"""A tiny GPU backend defined in the tests ("devtoy"): OUTPUT0 = INPUT0 + INPUT1 and
OUTPUT1 = INPUT0 - INPUT1, computed with cupy on the instance's device, outputs kept there
as DeviceArrays (even where the request did not ask for device outputs: a backend may);
its instances take device inputs. Under the cupy stand-in (``cuda_standin.installed``) it
runs without a GPU; with real cupy it is a real GPU model. Each request executed records
the types of its inputs and its ``device_outputs`` (``DevToyBackend.seen``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from despina import (
    Backend,
    DeviceArray,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelInstance,
    hookimpl,
)


class DevToyInstance(ModelInstance):
    device_inputs = True

    def __init__(self, device_id: int) -> None:
        import cupy

        self.cupy: Any = cupy
        self.device_id = device_id

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        responses = []
        with self.cupy.cuda.Device(self.device_id):
            for request in requests:
                a, b = (self._on_device(request.inputs[n]) for n in ("INPUT0", "INPUT1"))
                kinds = [type(request.inputs[n]).__name__ for n in ("INPUT0", "INPUT1")]
                DevToyBackend.seen.append((*kinds, request.device_outputs))
                outputs = {"OUTPUT0": DeviceArray(a + b), "OUTPUT1": DeviceArray(a - b)}
                self.cupy.cuda.get_current_stream().synchronize()  # handed over ready
                responses.append(InferenceResponse(outputs=outputs))  # type: ignore[arg-type]
        return responses

    def _on_device(self, array: Any) -> Any:
        """The cupy array of a DeviceArray input, or a host input copied to the device."""
        return array.data if isinstance(array, DeviceArray) else self.cupy.asarray(array)


class DevToyBackend(Backend):
    name = "devtoy"
    default_model_filename = "model.devtoy"
    #: (type of INPUT0, type of INPUT1, device_outputs) of every request executed, in order.
    seen: list[tuple[str, str, bool]] = []

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return DevToyInstance(spec.device_id if spec.kind == "KIND_GPU" else 0)


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [DevToyBackend]


def devtoy_config(dims: int | str = 4, extra: str = "") -> str:
    """A devtoy model's config.pbtxt: FP32 inputs and outputs of ``[dims]`` (e.g. 4 or
    "1, 4")."""
    tensors = [
        f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ {dims} ] }}' for n in ("INPUT0", "INPUT1")
    ]
    outputs = [
        f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ {dims} ] }}' for n in ("OUTPUT0", "OUTPUT1")
    ]
    return (
        f'backend: "devtoy"\nmax_batch_size: 0\ninput [ {", ".join(tensors)} ]\n'
        f"output [ {', '.join(outputs)} ]\n{extra}\n"
    )
