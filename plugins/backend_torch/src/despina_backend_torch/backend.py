"""The PyTorch backend: a loaded module per instance (or per device with weight sharing),
each batch one forward() call in the instance's thread (a config's ragged inputs, batch
inputs and batch outputs join and split it by Triton's ragged rules).

Auto-complete: ``torch.export`` programs (``.pt2``) declare their tensors, so inputs
(named after forward()'s parameters), outputs (``OUTPUT__<i>``) and ``max_batch_size``
(default when every first dimension is dynamic) are filled as for ONNX. TorchScript and
``model.py`` modules carry no data types or shapes: their config must list inputs and
outputs, or the load fails saying so.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import numpy as np
from despina import (
    Backend,
    ConfigError,
    InstanceSpec,
    Internal,
    ModelInstance,
    RaggedBatch,
    ThreadedInstance,
    Unavailable,
    check_config,
    complete_config,
    config_to_datatype,
    datatype_of,
    mc,
    threads_per_instance,
)

from despina_backend_torch.convert import from_torch, to_torch
from despina_backend_torch.loading import LoadedModel, load_model
from despina_backend_torch.naming import input_positions, output_positions, pick_outputs
from despina_backend_torch.settings import TorchSettings

NO_SIGNATURE = (
    "model '{model}': '{label}' declares no input/output data types or shapes, so its "
    "config.pbtxt must list inputs (named after forward()'s arguments or INPUT__<i>) and "
    "outputs (OUTPUT__<i>); only torch.export programs (.pt2) are auto-completed"
)


class TorchBackend(Backend):
    """Serves ``model.pt`` (TorchScript, platform ``pytorch_libtorch``), and with
    ``default_model_filename`` ``model.pt2`` / ``model.py`` PyTorch 2 models."""

    name = "pytorch"
    platforms = ("pytorch_libtorch",)
    default_model_filename = "model.pt"

    @classmethod
    def gpu_support(cls) -> str | None:
        """GPUs need a CUDA build of torch (checked without initialising CUDA)."""
        import torch

        if torch.backends.cuda.is_built():  # type: ignore[no-untyped-call]
            return None
        return f"the installed torch {torch.__version__} is a CPU-only build"

    @property
    def file_label(self) -> str:
        return f"{self.context.version}/{self.context.config.default_model_filename}"

    async def auto_complete(self) -> None:
        """Fill the config from a ``.pt2`` program; require listed tensors otherwise."""
        config, path = self.context.config, self.context.model_file
        if path.suffix == ".pt2":
            loaded = await asyncio.to_thread(self._load, "cpu")
            assert loaded.inputs is not None and loaded.outputs is not None
            default = self.context.host.default_max_batch_size(self.name)
            complete_config(config, loaded.inputs, loaded.outputs, default)
        elif not config.input or not config.output:
            raise ConfigError(NO_SIGNATURE.format(model=self.context.name, label=self.file_label))

    async def load(self) -> None:
        """Parse the parameters and apply the process-wide ones."""
        self.settings = TorchSettings.from_parameters(self.context.parameters, self.context.name)
        if not self.settings.intra_op_threads:
            per_instance = threads_per_instance(self.context.config)
            if per_instance:
                self.settings = replace(self.settings, intra_op_threads=per_instance)
        self.settings.apply_process_wide()
        #: Modules by device, kept only with ENABLE_WEIGHT_SHARING.
        self._shared: dict[str | None, LoadedModel] = {}

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        """Load the module on the instance's device and bind the config's tensors to it."""
        device = _device(spec, self.context.name)
        loaded = self._shared.get(device) if self.settings.weight_sharing else None
        if loaded is None:
            loaded = await asyncio.to_thread(self._load, device)
            if self.settings.weight_sharing:
                self._shared[device] = loaded
        config, model = self.context.config, self.context.name
        if loaded.inputs is not None and loaded.outputs is not None:
            check_config(config, loaded.inputs, loaded.outputs, model, self.file_label)
        names = [i.name for i in config.input] + sequence_inputs(config)
        positions = input_positions(
            names,
            loaded.arg_names,
            loaded.required,
            model,
            self.file_label,
            self.context.logger.warning,
        )
        order = [name for _, name in sorted(zip(positions, names, strict=True))]
        return TorchInstance(spec, loaded, order, self.settings, device, self.context.config)

    def _load(self, device: str | None) -> LoadedModel:
        return load_model(self.context.model_file, device, self.context.name, self.file_label)


class TorchInstance(ThreadedInstance):
    """Runs forward() on the joined batch under the model's torch settings."""

    def __init__(
        self,
        spec: InstanceSpec,
        loaded: LoadedModel,
        order: list[str],
        settings: TorchSettings,
        device: str | None,
        config: Any,
    ) -> None:
        outputs = [o.name for o in config.output]
        outputs += [
            s.output_name for s in config.sequence_batching.state if s.output_name not in outputs
        ]
        on_gpu = device is not None and device.startswith("cuda")
        super().__init__(
            f"torch-{spec.name}",
            config.max_batch_size > 0,
            outputs,
            self._init_gpu_thread if on_gpu else settings.init_thread,
        )
        self.spec = spec
        self.loaded = loaded
        self.order = order
        self.settings = settings
        #: Where inputs go: the instance's device (CPU for KIND_MODEL).
        self.device = device or "cpu"
        #: A KIND_GPU instance's own CUDA stream (Triton: one per instance), so instances
        #: on one GPU do not serialise on the default stream.
        self.stream = _cuda_stream(self.device) if on_gpu else None
        #: A GPU instance takes DeviceArray inputs (torch reads them through DLPack).
        self.device_inputs = on_gpu
        self.datatypes = {
            t.name: config_to_datatype(mc.DataType.Name(t.data_type))
            for t in [*config.input, *config.output]
        }
        for state in config.sequence_batching.state:
            datatype = config_to_datatype(mc.DataType.Name(state.data_type))
            self.datatypes.update({state.input_name: datatype, state.output_name: datatype})
        #: Where each output is in a returned tuple or list.
        self.positions = output_positions(outputs)
        self.ragged = RaggedBatch.of(config)

    def datatype(self, name: str, array: Any) -> str:
        """The datatype of input ``name``: the config's, or for a sequence control
        input (typed by its control) that of the array the sequence batcher made."""
        return self.datatypes.get(name) or datatype_of(array)

    def _init_gpu_thread(self) -> None:
        """The instance thread's torch settings, and its current device: the instance's."""
        import torch

        self.settings.init_thread()
        torch.cuda.set_device(torch.device(self.device))

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """Inputs copied, forward run and outputs copied back on the instance's stream
        (on a GPU); the copy to host waits for that stream only."""
        if self.stream is None:
            return self._run(inputs, outputs)
        import torch

        with torch.cuda.stream(self.stream):
            return self._run(inputs, outputs)

    def _run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        import torch

        args = [
            to_torch(inputs[name], self.datatype(name, inputs[name]), self.device, name)
            if name in inputs
            else None
            for name in self.order
        ]
        while args and args[-1] is None:
            args.pop()
        try:
            with self.settings.guards():
                self.mark_infer_start()
                result = self.loaded.module(*args)
                self.mark_infer_end()
        except Exception as exc:  # noqa: BLE001 - a model's forward() may raise anything
            raise Internal(f"PyTorch execute failure: {_summary(exc)}") from None
        picked = pick_outputs(result, outputs, self.positions)
        stream = self.stream
        on_device = stream is not None and self.outputs_may_stay_on_device()
        arrays = {
            name: from_torch(value, self.datatypes[name], name, on_device)
            for name, value in picked.items()
        }
        if stream is not None and on_device:  # DeviceArrays are handed over ready
            stream.synchronize()
        if self.settings.cache_cleaning and self.device.startswith("cuda"):
            torch.cuda.empty_cache()
        return arrays  # type: ignore[return-value] # DeviceArrays only where the batch takes them


def _summary(exc: Exception) -> str:
    """An exception's first and last lines (TorchScript puts its traceback between)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    return lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"


def _cuda_stream(device: str) -> Any:
    """A new CUDA stream on ``device`` (``cuda:<id>``)."""
    import torch

    return torch.cuda.Stream(device=torch.device(device))  # type: ignore[no-untyped-call]


def _device(spec: InstanceSpec, model: str) -> str | None:
    """``cpu``, ``cuda:<id>``, or None for KIND_MODEL (the module's own placement)."""
    if spec.kind == "KIND_CPU":
        return "cpu"
    if spec.kind == "KIND_MODEL":
        return None
    import torch

    if not torch.cuda.is_available() or spec.device_id >= torch.cuda.device_count():
        raise Unavailable(
            f"model '{model}': instance '{spec.name}' needs GPU {spec.device_id}, but the "
            f"installed torch {torch.__version__} sees {torch.cuda.device_count()} CUDA device(s)"
        )
    return f"cuda:{spec.device_id}"


def sequence_inputs(config: Any) -> list[str]:
    """The inputs the sequence batcher adds to every request, which forward() takes as
    Triton's PyTorch backend counts them: the control inputs, then the implicit states."""
    batching = config.sequence_batching
    return [c.name for c in batching.control_input] + [s.input_name for s in batching.state]
