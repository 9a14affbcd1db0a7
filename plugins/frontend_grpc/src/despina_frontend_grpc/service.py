"""The ``inference.GRPCInferenceService`` servicer: every RPC of Triton's service.

Each unary RPC is :func:`~despina_frontend_grpc.errors.guarded`: a request that did not
parse ends the call with INTERNAL "Unable to parse request" (Triton's text), a
DespinaError with its ``grpc_code`` and text, anything else with INTERNAL; the server
keeps serving.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from despina import InvalidArgument, grpc_service as pb
from google.protobuf import json_format

from despina_frontend_grpc import parameters as params
from despina_frontend_grpc.errors import guarded
from despina_frontend_grpc.infer import Inference

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.frontend.grpc")


#: Triton's test hook: every answer to an RPC other than inference waits this many whole
#: seconds before it is sent (Triton's ``L0_client_timeout`` times clients out with it).
RESPONSE_DELAY_ENV = "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC"

#: The RPCs the delay leaves alone.
_INFERENCE_RPCS = ("ModelInfer", "ModelStreamInfer")


class InferenceServicer:
    """Serves one server's :class:`despina.plugin.ports.FrontendHost`."""

    def __init__(self, host: FrontendHost, inference: Inference) -> None:
        self.host = host
        self.inference = inference
        delay = _response_delay_s()
        if delay:
            log.warning(
                "%s=%d: answers to non-inference RPCs are delayed", RESPONSE_DELAY_ENV, delay
            )
            for name in dir(InferenceServicer):
                if name[0].isupper() and name not in _INFERENCE_RPCS:
                    setattr(self, name, _delayed(getattr(self, name), delay))

    # health and metadata
    @guarded
    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=self.host.live)

    @guarded
    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=await self.host.ready_checked())

    @guarded
    async def ModelReady(self, request: Any, context: Any) -> Any:
        ready = await self.host.model_ready_checked(request.name, request.version)
        return pb.ModelReadyResponse(ready=ready)

    @guarded
    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return pb.ServerMetadataResponse(**self.host.server_metadata())

    @guarded
    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        return json_format.ParseDict(
            self.host.model_metadata(request.name, request.version), pb.ModelMetadataResponse()
        )

    @guarded
    async def ModelConfig(self, request: Any, context: Any) -> Any:
        return pb.ModelConfigResponse(config=self.host.model_config(request.name, request.version))

    @guarded
    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        stats = {"model_stats": await self.host.model_statistics(request.name, request.version)}
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

    # inference
    @guarded
    async def ModelInfer(self, request: Any, context: Any) -> Any:
        return await self.inference.infer(request, context)

    async def ModelStreamInfer(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        async for response in self.inference.stream(request_iterator, context):
            yield response

    # model repository
    @guarded
    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        rows = self.host.repository_index(ready_only=request.ready)
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(**row) for row in rows]
        )

    @guarded
    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        config: str | None = None
        files: dict[str, bytes] = {}
        for key, parameter in request.parameters.items():
            value = params.value_of(parameter)
            if key == "config":
                if not isinstance(value, str):
                    raise InvalidArgument("the 'config' parameter must be a string_param")
                config = value
            elif key.startswith("file:"):
                if not isinstance(value, bytes):
                    raise InvalidArgument(f"the '{key}' parameter must be a bytes_param")
                files[key.removeprefix("file:")] = value
        await self.host.load(request.model_name, config, files)
        return pb.RepositoryModelLoadResponse()

    @guarded
    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        dependents = request.parameters.get("unload_dependents")
        cascade = dependents is not None and params.value_of(dependents) is True
        await self.host.unload(request.model_name, unload_dependents=cascade)
        return pb.RepositoryModelUnloadResponse()

    # shared memory
    @guarded
    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        response = pb.SystemSharedMemoryStatusResponse()
        for region in self.host.system_shm_status(request.name):
            response.regions[region["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**region)
            )
        return response

    @guarded
    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        await self.host.system_shm_register(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @guarded
    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        await self.host.system_shm_unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @guarded
    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        response = pb.CudaSharedMemoryStatusResponse()
        for region in self.host.cuda_shm_status(request.name):
            response.regions[region["name"]].CopyFrom(
                pb.CudaSharedMemoryStatusResponse.RegionStatus(**region)
            )
        return response

    @guarded
    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        await self.host.cuda_shm_register(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @guarded
    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        await self.host.cuda_shm_unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # trace and log settings
    @guarded
    async def TraceSetting(self, request: Any, context: Any) -> Any:
        changes = {key: (list(s.value) or None) for key, s in request.settings.items()}
        current = await self.host.trace_settings(request.model_name, changes)
        response = pb.TraceSettingResponse()
        for key, values in current.items():
            response.settings[key].value.extend(values)
        return response

    @guarded
    async def LogSettings(self, request: Any, context: Any) -> Any:
        changes = {key: params.value_of(s) for key, s in request.settings.items()}
        response = pb.LogSettingsResponse()
        for key, value in (await self.host.log_settings(changes)).items():
            setting = response.settings[key]
            if isinstance(value, bool):
                setting.bool_param = value
            elif isinstance(value, int):
                setting.uint32_param = value
            else:
                setting.string_param = value
        return response


def _response_delay_s() -> int:
    """``$TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC`` as Triton reads it (``atoi``: the
    leading digits, else 0)."""
    digits = re.match(r"\s*\+?(\d+)", os.environ.get(RESPONSE_DELAY_ENV, ""))
    return int(digits.group(1)) if digits else 0


def _delayed(
    rpc: Callable[[Any, Any], Awaitable[Any]], seconds: int
) -> Callable[[Any, Any], Awaitable[Any]]:
    """``rpc``, its answer held back ``seconds`` before it is returned."""

    @functools.wraps(rpc)
    async def run(request: Any, context: Any) -> Any:
        response = await rpc(request, context)
        log.debug("Delaying the write of the response by %d seconds", seconds)
        await asyncio.sleep(seconds)
        return response

    return run
