"""The ONNX Runtime backend: one ``InferenceSession`` per instance, run off the event loop.

Auto-complete reads inputs, outputs, data types and dims from the ONNX graph, with
``max_batch_size`` set to the default (4) when every tensor has a dynamic first
dimension. Each instance has a worker thread (:class:`ThreadedInstance`) and runs its
batches with ``session.run`` (onnxruntime releases the GIL while it runs).

Sessions: a GPU instance opens its own, on its device. The CPU instances of a model
share one session (``run`` is thread-safe) unless the config states
``intra_op_thread_count``: the session keeps onnxruntime's thread default (a pool of a
thread per core), so a lone request gets every core whichever instance runs it, N
concurrent ones share the cores instead of N pools competing for them, and the weights
are held once. A stated thread count opens a session per instance, each with that pool,
as Triton does. Measured in ``bench/results/instance_threads.md``.
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
    InvalidArgument,
    ModelContext,
    ModelInstance,
    RaggedBatch,
    TensorSpec,
    ThreadedInstance,
    check_config,
    complete_config,
    inline_budget,
)

from despina_backend_onnx import options
from despina_backend_onnx.bf16 import run_bound
from despina_backend_onnx.threads import THREAD_POOL_KEY, shared_pool, wants_shared

#: onnxruntime's type strings -> Triton wire datatypes.
ORT_TO_DATATYPE = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(bfloat16)": "BF16",
    "tensor(string)": "BYTES",
}


class OnnxBackend(Backend):
    """Serves ``<version>/model.onnx`` (platform ``onnxruntime_onnx``)."""

    name = "onnxruntime"
    platforms = ("onnxruntime_onnx",)
    default_model_filename = "model.onnx"

    def __init__(self, context: ModelContext) -> None:
        super().__init__(context)
        #: The session the CPU instances share, once the first of them opened it.
        self._shared_cpu: Any = None

    @classmethod
    def gpu_support(cls) -> str | None:
        """GPUs need onnxruntime's CUDA (or TensorRT) execution provider, which
        onnxruntime-gpu has (the ``gpu`` extra)."""
        import onnxruntime as ort

        if {"CUDAExecutionProvider", "TensorrtExecutionProvider"} & set(
            ort.get_available_providers()
        ):
            return None
        return (
            f"the installed onnxruntime {ort.__version__} has no CUDA execution provider "
            "(install onnxruntime-gpu in its place: see despina-backend-onnx's README)"
        )

    @property
    def file_label(self) -> str:
        """The model file as error messages name it: ``<version>/<file>``."""
        return f"{self.context.version}/{self.context.config.default_model_filename}"

    @property
    def shared_threads(self) -> bool:
        """``--backend-config=onnxruntime,thread-pool=shared`` (:mod:`.threads`)."""
        return wants_shared(self.context.host.backend_setting(self.name, THREAD_POOL_KEY))

    async def auto_complete(self) -> None:
        """Fill inputs, outputs and max_batch_size from the graph (no optimisation pass)."""
        import onnxruntime as ort

        session_opts = ort.SessionOptions()
        if self.shared_threads:
            shared_pool()
            session_opts.use_per_session_threads = False
        session_opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = await asyncio.to_thread(self._open, session_opts, [("CPUExecutionProvider", {})])
        inputs, outputs = self._signature(session)
        default = self.context.host.default_max_batch_size(self.name)
        complete_config(self.context.config, inputs, outputs, default)

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        """Open a session on the instance's device and check the config against it (the
        load fails naming the model and file when the file is missing or unreadable)."""
        config, model = self.context.config, self.context.name
        providers = options.providers(config, spec.kind, spec.device_id, model)
        shared = spec.kind == "KIND_CPU" and not options.states_threads(config)
        if shared and self._shared_cpu is not None:
            session = self._shared_cpu
        else:
            session_opts = options.session_options(config, model, self.shared_threads)
            session = await asyncio.to_thread(self._open, session_opts, providers)
            if shared:
                self._shared_cpu = session
        inputs, outputs = self._signature(session)
        check_config(config, inputs, outputs, model, self.file_label)
        run_opts = options.run_options(config, model)
        strings = {s.name for s in inputs if s.datatype == "BYTES"}
        bf16 = {s.name for s in [*inputs, *outputs] if s.datatype == "BF16"}
        if bf16 and any(s.datatype == "BYTES" for s in [*inputs, *outputs]):
            raise ConfigError(
                f"model '{model}', file '{self.file_label}': onnxruntime's Python API cannot "
                "serve a model with both BF16 and string inputs/outputs"
            )
        # implicit state outputs are served too: the sequence batcher keeps them
        served = {o.name for o in config.output}
        served.update(state.output_name for state in config.sequence_batching.state)
        names = [s.name for s in outputs if s.name in served]
        instance = OnnxInstance(
            spec,
            session,
            run_opts,
            strings,
            names,
            config.max_batch_size > 0,
            inline_budget(self.context.config),
        )
        instance.bf16 = bf16
        instance.ragged = RaggedBatch.of(config)
        return instance

    def _open(self, session_opts: Any, providers: list[options.Provider]) -> Any:
        import onnxruntime as ort

        path = self.context.model_file
        if not path.is_file():
            raise ConfigError(
                f"model '{self.context.name}': model file '{self.file_label}' not found"
            )
        try:
            return ort.InferenceSession(
                str(path),
                session_opts,
                providers=[name for name, _ in providers],
                provider_options=[opts for _, opts in providers],
            )
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors derive from Exception
            detail = str(exc).replace(str(path), self.file_label)
            raise Internal(
                f"model '{self.context.name}': onnxruntime cannot load '{self.file_label}': {detail}"
            ) from None

    def _signature(self, session: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
        return (
            [self._spec(arg) for arg in session.get_inputs()],
            [self._spec(arg) for arg in session.get_outputs()],
        )

    def _spec(self, arg: Any) -> TensorSpec:
        datatype = ORT_TO_DATATYPE.get(arg.type)
        if datatype is None:
            raise ConfigError(
                f"model '{self.context.name}', file '{self.file_label}': tensor '{arg.name}' has "
                f"type {arg.type}, which Despina's onnxruntime backend cannot exchange"
            )
        shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
        return TensorSpec(arg.name, datatype, shape)


class OnnxInstance(ThreadedInstance):
    """One session; each batch is one ``session.run`` in the instance's thread."""

    def __init__(
        self,
        spec: InstanceSpec,
        session: Any,
        run_opts: Any,
        strings: set[str],
        output_names: list[str],
        batched: bool,
        inline_budget_s: float,
    ) -> None:
        super().__init__(
            f"onnx-{spec.name}", batched, output_names, inline_budget_s=inline_budget_s
        )
        self.spec = spec
        self.session = session
        self.run_opts = run_opts
        self.strings = strings
        #: BF16 inputs/outputs; when any, batches run through an I/O binding.
        self.bf16: set[str] = set()

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        for name in self.strings.intersection(inputs):
            inputs[name] = _decode(name, inputs[name])
        try:
            self.mark_infer_start()
            if self.bf16:
                results = run_bound(self.session, inputs, outputs, self.bf16, self.run_opts)
            else:
                results = self.session.run(outputs, inputs, self.run_opts)
            self.mark_infer_end()
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors derive from Exception
            kind = InvalidArgument if type(exc).__name__ == "InvalidArgument" else Internal
            raise kind(f"onnx runtime error: {exc}") from None
        return dict(zip(outputs, results, strict=True))


def _decode(name: str, array: np.ndarray) -> np.ndarray:
    """BYTES elements as ``str`` (onnxruntime's string tensors hold UTF-8 text)."""
    out = np.empty(array.shape, dtype=np.object_)
    try:
        out.flat[:] = [x.decode() if isinstance(x, bytes) else str(x) for x in array.flat]
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"input '{name}': onnxruntime string tensors must hold UTF-8 text"
        ) from None
    return out
