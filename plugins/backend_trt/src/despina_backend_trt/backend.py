"""The TensorRT backend: serves serialized engines (``model.plan``, platform
``tensorrt_plan``) on GPU instances only, as Triton's tensorrt backend.

Nothing here imports TensorRT or cupy at module level: :mod:`despina_backend_trt.runtime`
does when a model loads, and without them the model is UNAVAILABLE saying so. An engine
is deserialized once per GPU and model version and shared by the instances on that GPU;
each instance owns its execution contexts and stream (:mod:`despina_backend_trt.instance`).
The backend-wide options (``--backend-config=tensorrt,...``, :mod:`.options`) are read
when a model loads; plugin libraries are loaded before its engines are deserialized.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from despina import Backend, ConfigError, InstanceSpec, Internal, ModelInstance, safe_join

from despina_backend_trt import config_rules, ragged_rules
from despina_backend_trt.options import BackendOptions, load_plugins, read_options
from despina_backend_trt.runtime import Runtime, load_runtime, missing_reason

log = logging.getLogger("despina.backend.tensorrt")


class TensorRTBackend(Backend):
    """Serves ``<version>/model.plan`` (or the ``cc_model_filenames`` entry of the GPU)."""

    name = "tensorrt"
    platforms = ("tensorrt_plan",)
    default_model_filename = "model.plan"

    @classmethod
    def gpu_support(cls) -> str | None:
        """None when tensorrt and the device layer (cupy) import, else what is missing."""
        return missing_reason()

    async def auto_complete(self) -> None:
        """Fill the config from the engine, opened on the first GPU the first instance
        group lists (GPU 0 when none)."""
        runtime = self._prepare()
        groups = self.context.config.instance_group
        device = groups[0].gpus[0] if len(groups) and len(groups[0].gpus) else 0
        engine = await asyncio.to_thread(self._deserialize, runtime, device)
        info = _read(runtime, engine)
        config_rules.auto_complete(self.context.config, info, self.context.name)

    async def load(self) -> None:
        """Find the runtime, read the options and the model's parameters."""
        self.runtime = self._prepare()
        self.strategy = config_rules.allocation_strategy(self.context.parameters, self.context.name)
        #: (engine, its info) per GPU, shared by the instances on it.
        self.engines: dict[int, tuple[Any, Any]] = {}
        blocking = self.options.execution_policy == "BLOCKING"
        #: Per GPU, the lock its instances enqueue under (None: BLOCKING).
        self.device_locks: dict[int, threading.Lock] | None = (
            None if blocking or self.context.config.HasField("sequence_batching") else {}
        )

    def _prepare(self) -> Runtime:
        """The runtime, once the options are read and the plugin libraries loaded."""
        host = self.context.host
        self.options: BackendOptions = read_options(
            lambda key: host.backend_setting(self.name, key), self.name
        )
        load_plugins(self.options.plugins, self.name)
        return load_runtime()

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        """An instance on GPU ``spec.device_id``; KIND_CPU and KIND_MODEL are refused."""
        from despina_backend_trt.instance import TrtInstance

        model = self.context.name
        if spec.kind != "KIND_GPU":
            raise ConfigError(
                f"unable to load model '{model}', TensorRT backend supports only GPU device"
            )
        if spec.device_id not in self.engines:
            engine = await asyncio.to_thread(self._deserialize, self.runtime, spec.device_id)
            self.engines[spec.device_id] = (engine, _read(self.runtime, engine))
        engine, info = self.engines[spec.device_id]
        config = self.context.config
        config_rules.validate(config, info, model)
        ragged_rules.validate(config, info, model)
        lock = None
        if self.device_locks is not None:
            lock = self.device_locks.setdefault(spec.device_id, threading.Lock())
        runtime = self.runtime
        return await asyncio.to_thread(
            TrtInstance,
            spec,
            runtime.trt,
            runtime.memory,
            info,
            config,
            self.strategy,
            engine,
            lock,
        )

    def _deserialize(self, runtime: Runtime, device: int) -> Any:
        """The engine of the plan for GPU ``device`` (its compute capability picks the
        file); raises ConfigError for a missing file, Internal for one TensorRT refuses."""
        trt, memory = runtime.trt, runtime.memory
        capability = memory.compute_capability(device)
        filename = config_rules.model_filename(self.context.config, capability)
        label = f"{self.context.version}/{filename}"
        path = safe_join(self.context.version_dir, filename, "cc_model_filenames")
        if not path.is_file():
            raise ConfigError(f"model '{self.context.name}': model file '{label}' not found")
        logger = _logger(trt)
        with memory.on_device(device):
            trt_runtime = trt.Runtime(logger)
            if self.options.version_compatible:
                trt_runtime.engine_host_code_allowed = True
            engine = trt_runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise Internal(
                f"model '{self.context.name}': unable to create TensorRT engine from "
                f"'{label}': {logger.last_error or 'not a TensorRT plan of this version'}"
            )
        self.__dict__.setdefault("_runtimes", []).append(trt_runtime)  # outlives its engines
        return engine


def _read(runtime: Runtime, engine: Any) -> Any:
    from despina_backend_trt.engine_info import read_engine

    return read_engine(runtime.trt, engine)


def _logger(trt: Any) -> Any:
    """An ``ILogger`` sending TensorRT's messages to Despina's log, keeping the last error."""

    class Logger(trt.ILogger):  # type: ignore[misc]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.last_error = ""

        def log(self, severity: Any, msg: str) -> None:
            if int(severity) <= int(trt.ILogger.Severity.ERROR):
                self.last_error = msg
                log.error("TensorRT: %s", msg)
            elif int(severity) <= int(trt.ILogger.Severity.WARNING):
                log.warning("TensorRT: %s", msg)

    return Logger()
