"""The ``python`` backend: serves ``model.py`` files written for Triton's Python backend.

Execution mode, per model, from the config's ``parameters``::

    parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }

- ``process`` (default, as Triton): each instance runs ``model.py`` in its own child
  process; tensors cross through shared memory; a crashed instance is restarted.
- ``in-process``: instances share one model object inside the server process.
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

from despina_backend_python import inprocess
from despina_backend_python.loading import initialize_args
from despina_backend_python.server_runtime import ServerRuntime

#: The config parameter choosing the execution mode.
MODE_KEY = "DESPINA_EXECUTION_MODE"
PROCESS, IN_PROCESS = "process", "in-process"


class PythonBackend(Backend):
    """Backend ``python`` (config ``backend: "python"``, file ``model.py``)."""

    name = "python"
    default_model_filename = "model.py"
    inputs_optional = True  # as Triton: e.g. a model that only runs BLS calls

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
        from despina_backend_python.autocomplete import run_auto_complete

        config = self.context.config
        given = json.dumps(to_json_dict(config))
        completed = await run_auto_complete(self, given, in_process=self.mode == IN_PROCESS)
        if completed is not None:
            config.Clear()
            json_format.ParseDict(completed, config)

    async def load(self) -> None:
        self.shared: inprocess.SharedModel | None = None
        if self.mode == IN_PROCESS:
            first = instance_specs(self.context.config)[0]
            shared = inprocess.SharedModel(self.context, self._runtime(), self.args_for(first))
            await shared.load()
            self.shared = shared

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        if self.shared is not None:
            cls = (
                inprocess.AsyncInProcessInstance
                if self.shared.is_async
                else inprocess.InProcessInstance
            )
            return cls(self.shared, spec)
        from despina_backend_python.process import start_instance

        return await start_instance(self, spec, self._runtime())

    async def unload(self) -> None:
        if self.shared is not None:
            await self.shared.finalize()
            self.shared = None
