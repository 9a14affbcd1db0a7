"""The ``python`` backend: serves ``model.py`` files written for Triton's Python backend.

Execution mode, per model, from the config's ``parameters``::

    parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }

- ``process`` (default, as Triton): each instance runs ``model.py`` in its own child
  process; tensors cross through shared memory; a crashed instance is restarted.
- ``in-process``: instances share one model object inside the server process.

``FORCE_CPU_ONLY_INPUT_TENSORS`` (as Triton; default ``yes``): ``no`` lets inputs reach
the model where they are, GPU tensors included (the instances take device inputs).
"""

from __future__ import annotations

import asyncio
import json

from despina import (
    Backend,
    ConfigError,
    InstanceSpec,
    ModelInstance,
    config_json,
    instance_specs,
    to_json_dict,
)
from google.protobuf import json_format

from despina_backend_python.hosting.loading import initialize_args
from despina_backend_python.pb import device
from despina_backend_python.server import in_process_mode
from despina_backend_python.server.auto_complete import run_auto_complete
from despina_backend_python.server.model_host import ServerRuntime
from despina_backend_python.server.process_mode import start_instance

#: The config parameter choosing the execution mode.
MODE_KEY = "DESPINA_EXECUTION_MODE"
PROCESS, IN_PROCESS = "process", "in-process"
#: Triton's parameter: "no" gives the model its inputs where they are (GPU or CPU).
FORCE_CPU_KEY = "FORCE_CPU_ONLY_INPUT_TENSORS"


class PythonBackend(Backend):
    """Backend ``python`` (config ``backend: "python"``, file ``model.py``)."""

    name = "python"
    default_model_filename = "model.py"
    parallel_instance_loading = True  # as Triton's: each instance starts its own process

    @classmethod
    def gpu_support(cls) -> str | None:
        """Always: the instance is told its kind and device; model.py uses the GPU."""
        return None

    @property
    def mode(self) -> str:
        mode = self.context.parameters.get(MODE_KEY, PROCESS) or PROCESS
        if mode not in (PROCESS, IN_PROCESS):
            raise ConfigError(
                f"model '{self.context.name}': parameter {MODE_KEY} must be "
                f"'{PROCESS}' or '{IN_PROCESS}', got '{mode}'"
            )
        return mode

    @property
    def device_inputs(self) -> bool:
        """Whether inputs may reach the model in GPU memory (``FORCE_CPU_ONLY_INPUT_TENSORS``
        is "no"); ConfigError with Triton's text for a value other than yes/no."""
        value = self.context.parameters.get(FORCE_CPU_KEY, "yes")
        if value not in ("yes", "no"):
            raise ConfigError(f"Incorrect value for {FORCE_CPU_KEY}: {value}'")  # sic, as Triton
        return value == "no"

    def _runtime(self) -> ServerRuntime:
        ctx = self.context
        return ServerRuntime(ctx.host, asyncio.get_running_loop(), ctx.name, str(ctx.version_dir))

    def args_for(self, spec: InstanceSpec) -> dict[str, str]:
        ctx = self.context
        return initialize_args(
            config_json(ctx.config),
            ctx.model_dir,
            ctx.name,
            ctx.version,
            spec.name,
            spec.kind,
            spec.device_id,
        )

    async def auto_complete(self) -> None:
        """Run the model's ``auto_complete_config`` (if any) and take its config."""
        config = self.context.config
        given = json.dumps(to_json_dict(config))
        completed = await run_auto_complete(self.context, given, in_process=self.mode == IN_PROCESS)
        if completed is not None:
            config.Clear()
            json_format.ParseDict(completed, config)

    async def load(self) -> None:
        self.shared: in_process_mode.SharedModel | None = None
        device_inputs = self.device_inputs
        if self.mode == IN_PROCESS:
            first = instance_specs(self.context.config)[0]
            shared = in_process_mode.SharedModel(
                self.context, self._runtime(), self.args_for(first), device_inputs
            )
            await shared.load()
            self.shared = shared

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        instance: ModelInstance
        if self.shared is not None:
            cls = (
                in_process_mode.AsyncInProcessInstance
                if self.shared.is_async
                else in_process_mode.InProcessInstance
            )
            instance = cls(self.shared, spec)
        else:
            instance = await start_instance(
                self.context, spec, self.args_for(spec), self._runtime()
            )
            if self.device_inputs and not instance.has_cupy:
                self.context.logger.warning(
                    "model '%s' instance '%s': %s is \"no\" but the model's environment "
                    "has no cupy (%s), so its inputs are given in host memory",
                    self.context.name,
                    spec.name,
                    FORCE_CPU_KEY,
                    device.CUPY_HINT,
                )
                return instance
        instance.device_inputs = self.device_inputs
        return instance

    async def unload(self) -> None:
        if self.shared is not None:
            await self.shared.finalize()
            self.shared = None
