"""``inference.GRPCInferenceService`` answered from a :class:`~despina.FrontendHost`, for a
replica behind Ray Serve's gRPC proxy: the unary health, metadata and inference calls
(Ray Serve routes each call to the deployment method of the same name and passes the
request message). Messages are coded by the gRPC frontend's codec; errors set the call's
status code and details as ``despina serve`` does.

:data:`SERVICER` is what Ray Serve's ``gRPCOptions.grpc_servicer_functions`` lists.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

import grpc
from despina import DespinaError, FrontendHost
from despina_frontend_grpc.codec import RequestDecoder, encode_response
from google.protobuf import json_format
from tritonclient.grpc import service_pb2, service_pb2_grpc

#: The servicer registration function Ray Serve's gRPC proxy adds.
SERVICER = "despina_deploy_ray.grpc_service.add_servicer"

# tritonclient's generated messages name their module ``grpc_service_pb2``; Ray pickles
# them between the proxy and a replica by that name, so both processes must resolve it.
sys.modules.setdefault("grpc_service_pb2", service_pb2)


def add_servicer(servicer: Any, server: Any) -> None:
    """Register ``inference.GRPCInferenceService`` on Ray Serve's gRPC proxy."""
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)


class CallContext(Protocol):
    """What is used of Ray Serve's ``RayServegRPCContext``."""

    def set_code(self, code: grpc.StatusCode) -> None: ...

    def set_details(self, details: str) -> None: ...


class GrpcCalls:
    """The v2 gRPC calls of one replica's server; each returns the response message."""

    def __init__(self, host: FrontendHost) -> None:
        self.host = host

    def failed(self, context: CallContext, exc: DespinaError, empty: Any) -> Any:
        """Set the call's status from ``exc``; return the (empty) message Ray sends."""
        context.set_code(getattr(grpc.StatusCode, exc.grpc_code))
        context.set_details(str(exc))
        return empty

    async def server_live(self) -> Any:
        return service_pb2.ServerLiveResponse(live=self.host.live)

    async def server_ready(self) -> Any:
        return service_pb2.ServerReadyResponse(ready=self.host.ready)

    async def model_ready(self, message: Any) -> Any:
        ready = self.host.model_ready(message.name, message.version)
        return service_pb2.ModelReadyResponse(ready=ready)

    async def server_metadata(self) -> Any:
        return json_format.ParseDict(
            self.host.server_metadata(), service_pb2.ServerMetadataResponse()
        )

    async def model_metadata(self, message: Any) -> Any:
        metadata = self.host.model_metadata(message.name, message.version)
        return json_format.ParseDict(
            metadata, service_pb2.ModelMetadataResponse(), ignore_unknown_fields=True
        )

    async def model_infer(self, message: Any) -> Any:
        host = self.host
        model = host.inference_model(message.model_name, message.model_version)
        assert model.signature is not None
        request = RequestDecoder(message, host.shared_memory).request(model.signature)
        response = await host.infer(request, model=model)
        return encode_response(response, request, host.shared_memory)
