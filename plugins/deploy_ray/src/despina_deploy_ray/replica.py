"""The Ray Serve deployment: each replica runs one Despina :class:`~despina.Server` in
process (no frontend listens inside a replica) and answers the v2 requests Ray Serve's
proxies route to it: REST from the HTTP proxy (:mod:`despina_deploy_ray.rest`), unary
gRPC calls from the gRPC proxy (:mod:`despina_deploy_ray.grpc_service`).

Ray Serve's health check calls :meth:`DespinaReplica.check_health`: a replica whose server
is not ready (a model failed, the server is stopping) is restarted by the controller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

from despina import DespinaError, Server
from ray import serve
from starlette.requests import Request
from starlette.responses import Response
from tritonclient.grpc import service_pb2

from despina_deploy_ray.grpc_service import CallContext, GrpcCalls
from despina_deploy_ray.rest import HEADER_LENGTH, RestRoutes

#: The listeners a replica must not open: Ray Serve's proxies face the clients.
NO_LISTENERS = ("--allow-http=false", "--allow-grpc=false", "--allow-metrics=false")
#: Response header naming the replica that answered (for tracing the spread over replicas).
REPLICA_HEADER = "x-despina-replica"


class DespinaReplica:
    """One replica: ``args`` is a ``despina serve`` command line (``--model-repository``
    local or ``s3://``/``gs://``/``as://`` with despina-repository-fsspec installed)."""

    async def __init__(self, args: Sequence[str]) -> None:  # type: ignore[misc] # Ray awaits it
        self.server = Server.from_args([*args, *NO_LISTENERS])
        await self.server.start()
        host = self.server.dataplane
        self.rest = RestRoutes(host)
        self.grpc = GrpcCalls(host)
        self.replica_id = serve.get_replica_context().replica_id.unique_id

    async def __call__(self, request: Request) -> Response:
        """A v2 REST request from Ray Serve's HTTP proxy."""
        body = await request.body() if request.method == "POST" else b""
        reply = await self.rest.handle(
            request.method, request.url.path, request.headers.get(HEADER_LENGTH), body
        )
        headers = {**reply.headers, REPLICA_HEADER: self.replica_id}
        return Response(reply.body, status_code=reply.status, headers=headers)

    def check_health(self) -> None:
        """Ray Serve's replica health check: raises unless the server is ready."""
        if not self.server.ready:
            raise RuntimeError("the Despina server in this replica is not ready")

    async def __del__(self) -> None:
        """Ray Serve's replica shutdown: stop the server (graceful, within
        ``--exit-timeout-secs``); Ray stops routing here first."""
        await self.server.shutdown()

    # gRPC: Ray Serve calls the method named after the RPC with the request message.
    async def ServerLive(self, message: Any, grpc_context: CallContext) -> Any:
        return await self._grpc(self.grpc.server_live(), grpc_context, "ServerLive")

    async def ServerReady(self, message: Any, grpc_context: CallContext) -> Any:
        return await self._grpc(self.grpc.server_ready(), grpc_context, "ServerReady")

    async def ServerMetadata(self, message: Any, grpc_context: CallContext) -> Any:
        return await self._grpc(self.grpc.server_metadata(), grpc_context, "ServerMetadata")

    async def ModelReady(self, message: Any, grpc_context: CallContext) -> Any:
        return await self._grpc(self.grpc.model_ready(message), grpc_context, "ModelReady")

    async def ModelMetadata(self, message: Any, grpc_context: CallContext) -> Any:
        return await self._grpc(self.grpc.model_metadata(message), grpc_context, "ModelMetadata")

    async def ModelInfer(self, message: Any, grpc_context: CallContext) -> Any:
        return await self._grpc(self.grpc.model_infer(message), grpc_context, "ModelInfer")

    async def _grpc(self, call: Awaitable[Any], context: CallContext, rpc: str) -> Any:
        """Await one call; a DespinaError sets the call's status and an empty ``rpc``
        response is returned (Ray sends the status, not the message)."""
        try:
            return await call
        except DespinaError as exc:
            return self.grpc.failed(context, exc, getattr(service_pb2, f"{rpc}Response")())
