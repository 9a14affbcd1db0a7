"""The OpenVINO backend: one compiled model per model version, one infer request per
instance, each batch one ``infer`` call in the instance's thread.

Reads IR (``model.xml`` + ``model.bin``) and any format OpenVINO reads (``model.onnx``
with ``default_model_filename``). Auto-complete fills inputs, outputs, data types, dims
and ``max_batch_size`` (default when every first dimension is dynamic). With
``max_batch_size > 0`` a model whose batch dimension is static is reshaped to a dynamic
one, unless ``SKIP_OV_DYNAMIC_BATCHSIZE`` is YES (as Triton's backend does).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from despina import (
    Backend,
    ConfigError,
    InstanceSpec,
    Internal,
    ModelInstance,
    TensorSpec,
    ThreadedInstance,
    check_config,
    complete_config,
    inline_budget,
)

from despina_backend_openvino.options import OpenVinoOptions

#: OpenVINO element type names -> Triton datatypes.
OV_TO_DATATYPE = {
    "boolean": "BOOL",
    "u8": "UINT8",
    "u16": "UINT16",
    "u32": "UINT32",
    "u64": "UINT64",
    "i8": "INT8",
    "i16": "INT16",
    "i32": "INT32",
    "i64": "INT64",
    "f16": "FP16",
    "f32": "FP32",
    "f64": "FP64",
    "string": "BYTES",
}


class OpenVinoBackend(Backend):
    """Serves ``<version>/model.xml`` (backend ``openvino``)."""

    name = "openvino"

    @classmethod
    def gpu_support(cls) -> str | None:
        return (
            "OpenVINO serves KIND_CPU instance groups; pick an OpenVINO device (GPU, NPU, "
            "AUTO) with the TARGET_DEVICE parameter"
        )

    default_model_filename = "model.xml"

    @property
    def file_label(self) -> str:
        return f"{self.context.version}/{self.context.config.default_model_filename}"

    async def auto_complete(self) -> None:
        """Fill inputs, outputs and max_batch_size from the model file."""
        options = OpenVinoOptions.from_parameters(self.context.parameters, self.context.name)
        _, model = await asyncio.to_thread(self._read, options)
        inputs, outputs = self._signature(model)
        default = self.context.host.default_max_batch_size(self.name)
        complete_config(self.context.config, inputs, outputs, default)

    async def load(self) -> None:
        """Read, shape, check against the config, and compile once for all instances."""
        config, name = self.context.config, self.context.name
        options = OpenVinoOptions.from_parameters(self.context.parameters, name)
        core, model = await asyncio.to_thread(self._read, options)
        self._shape(model, options)
        inputs, outputs = self._signature(model)
        check_config(config, inputs, outputs, name, self.file_label)
        self.strings = {s.name for s in inputs if s.datatype == "BYTES"}
        try:
            self.compiled = await asyncio.to_thread(
                core.compile_model, model, options.device, options.properties
            )
        except RuntimeError as exc:
            raise Internal(
                f"model '{name}': OpenVINO cannot compile '{self.file_label}' for "
                f"{options.device}: {_summary(exc)}"
            ) from None

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        """An infer request of the shared compiled model."""
        config = self.context.config
        outputs = [o.name for o in config.output]
        request = self.compiled.create_infer_request()
        budget = inline_budget(self.context.config)
        batched = config.max_batch_size > 0
        return OpenVinoInstance(spec, request, self.strings, outputs, batched, budget)

    def _read(self, options: OpenVinoOptions) -> tuple[Any, Any]:
        import openvino as ov

        path, name = self.context.model_file, self.context.name
        if not path.is_file():
            raise ConfigError(f"model '{name}': model file '{self.file_label}' not found")
        core = ov.Core()
        try:
            if options.extension:
                core.add_extension(options.extension)
            return core, core.read_model(str(path))
        except RuntimeError as exc:
            detail = _summary(exc).replace(str(path), self.file_label)
            raise Internal(
                f"model '{name}': OpenVINO cannot read '{self.file_label}': {detail}"
            ) from None

    def _shape(self, model: Any, options: OpenVinoOptions) -> None:
        """Make the batch dimension dynamic (or the config's dims, RESHAPE_IO_LAYERS)."""
        import openvino as ov

        config = self.context.config
        batched = config.max_batch_size > 0
        lead = [-1] if batched else []
        shapes: dict[str, Any] = {}
        if options.reshape_io:
            for tensor in config.input:
                shapes[tensor.name] = ov.PartialShape(lead + [int(d) for d in tensor.dims])
        elif batched and not options.skip_dynamic_batch:
            for port in model.inputs:
                shape = port.get_partial_shape()
                if shape.rank.is_static and len(shape) and shape[0].is_static:
                    shape[0] = ov.Dimension()
                    shapes[port.get_any_name()] = shape
        if shapes:
            try:
                model.reshape(shapes)
            except RuntimeError as exc:
                raise ConfigError(
                    f"model '{self.context.name}', file '{self.file_label}': cannot reshape the "
                    f"inputs to {', '.join(f'{k} {v}' for k, v in shapes.items())}: {_summary(exc)}"
                ) from None

    def _signature(self, model: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
        return [self._spec(p) for p in model.inputs], [self._spec(p) for p in model.outputs]

    def _spec(self, port: Any) -> TensorSpec:
        name = port.get_any_name()
        element = port.get_element_type().get_type_name()
        datatype = OV_TO_DATATYPE.get(element)
        if datatype is None:
            raise ConfigError(
                f"model '{self.context.name}', file '{self.file_label}': tensor '{name}' has "
                f"element type {element}, which Despina's OpenVINO backend cannot exchange"
            )
        shape = port.get_partial_shape()
        if shape.rank.is_dynamic:
            raise ConfigError(
                f"model '{self.context.name}', file '{self.file_label}': tensor '{name}' has a "
                "dynamic rank; set RESHAPE_IO_LAYERS to YES and give its dims in the config"
            )
        dims = tuple(d.get_length() if d.is_static else -1 for d in shape)
        return TensorSpec(name, datatype, dims)


class OpenVinoInstance(ThreadedInstance):
    """One infer request; ``infer`` shares the input arrays and copies the outputs out."""

    def __init__(
        self,
        spec: InstanceSpec,
        request: Any,
        strings: set[str],
        outputs: list[str],
        batched: bool,
        inline_budget_s: float,
    ) -> None:
        super().__init__(f"openvino-{spec.name}", batched, outputs, inline_budget_s=inline_budget_s)
        self.spec = spec
        self.request = request
        self.strings = strings

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        for name in self.strings.intersection(inputs):
            inputs[name] = inputs[name].astype(np.bytes_)
        try:
            # Outputs are copied: the request reuses its output memory on the next call.
            self.mark_infer_start()
            result = self.request.infer(inputs, share_inputs=True, share_outputs=False)
            self.mark_infer_end()
        except RuntimeError as exc:
            raise Internal(f"OpenVINO inference failed: {_summary(exc)}") from None
        return {name: result[name] for name in outputs}


def _summary(exc: Exception) -> str:
    """OpenVINO's message without its source-location lines."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Exception from", "Check '"))]
    return " ".join(useful or lines or [type(exc).__name__])
