"""``inference.GRPCInferenceService`` answered from a :class:`~despina.FrontendHost`, for a
replica behind Ray Serve's gRPC proxy, by the gRPC frontend's own servicer: every RPC,
unary ones and the bidirectional ``ModelStreamInfer`` (Ray Serve routes each call to the
deployment method of the same name and passes the request message, or for a streaming
call an iterator of them). Bodies, status codes and texts are ``despina serve``'s;
statistics are those of the replica that answers.

Model load/unload, shared-memory (un)registration and log/trace setting updates would
change only the replica that answers: they end FAILED_PRECONDITION
(:mod:`despina_deploy_ray.replicated`).

:data:`SERVICER` is what Ray Serve's ``gRPCOptions.grpc_servicer_functions`` lists.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import grpc
from despina import FrontendHost
from despina_frontend_grpc import GRPC_OPTIONS, Inference, InferenceServicer, StatusCode
from tritonclient.grpc import service_pb2, service_pb2_grpc

from despina_deploy_ray.replicated import MODEL_CONTROL, SETTINGS, SHARED_MEMORY

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

    def invocation_metadata(self) -> Sequence[tuple[str, Any]]: ...


class Aborted(Exception):
    """The call ended with the status set on Ray's context."""


class ServicerContext:
    """The part of ``grpc.aio.ServicerContext`` the gRPC frontend's servicer uses, over
    Ray's context: :meth:`abort` sets the status there and raises :class:`Aborted`."""

    def __init__(self, context: CallContext) -> None:
        self.context = context

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return tuple(self.context.invocation_metadata())

    async def abort(self, code: StatusCode, details: str = "") -> None:
        self.context.set_code(grpc.StatusCode[code.name])  # Ray's context is grpcio's
        self.context.set_details(details)
        raise Aborted(details)


def refusal(rpc: str, message: Any) -> str | None:
    """The text refusing ``rpc`` on a replica, or None when it is answered."""
    if rpc in ("RepositoryModelLoad", "RepositoryModelUnload"):
        return MODEL_CONTROL
    if rpc.endswith(("SharedMemoryRegister", "SharedMemoryUnregister")):
        return SHARED_MEMORY
    if rpc in ("TraceSetting", "LogSettings") and message.settings:
        return SETTINGS
    return None


class GrpcCalls:
    """The v2 gRPC calls of one replica's server, with its ``--grpc-*`` options."""

    def __init__(self, host: FrontendHost) -> None:
        pattern = host.stash[GRPC_OPTIONS].header_forward_pattern
        self.servicer = InferenceServicer(host, Inference(host, pattern))

    async def unary(self, rpc: str, message: Any, context: CallContext) -> Any:
        """The response to one unary call; on failure the status is set on ``context``
        and an empty response returned (Ray sends the status, not the message)."""
        call = ServicerContext(context)
        try:
            refused = refusal(rpc, message)
            if refused is not None:
                await call.abort(grpc.StatusCode.FAILED_PRECONDITION, refused)
            return await getattr(self.servicer, rpc)(message, call)
        except Aborted:
            return getattr(service_pb2, f"{rpc}Response")()

    async def stream(
        self, messages: AsyncIterator[Any], context: CallContext
    ) -> AsyncIterator[Any]:
        """``ModelStreamInfer``: the responses to a stream of requests (errors inside the
        stream, or with ``triton_grpc_error`` the first one ending it: :class:`Aborted`
        then propagates, and Ray ends the call with the status set on ``context``)."""
        async for response in self.servicer.ModelStreamInfer(messages, ServicerContext(context)):
            yield response
