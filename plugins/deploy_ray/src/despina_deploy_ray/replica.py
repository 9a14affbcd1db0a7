"""The Ray Serve deployment: each replica runs one Despina :class:`~despina.Server` in
process (no frontend listens inside a replica) and answers the v2 requests Ray Serve's
proxies route to it: REST from the HTTP proxy (:mod:`despina_deploy_ray.rest`), gRPC
calls (unary and the bidirectional ``ModelStreamInfer``) from the gRPC proxy
(:mod:`despina_deploy_ray.grpc_service`).

Ray Serve's health check calls :meth:`DespinaReplica.check_health`: a replica whose server
is not ready (a model failed, the server is stopping) is restarted by the controller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from despina import Server
from despina_frontend_http import StreamResponse
from ray import serve
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from despina_deploy_ray.grpc_service import CallContext, GrpcCalls
from despina_deploy_ray.rest import RestRoutes

#: The listeners a replica must not open: Ray Serve's proxies face the clients.
NO_LISTENERS = ("--allow-http=false", "--allow-grpc=false", "--allow-metrics=false")
#: Response header naming the replica that answered (for tracing the spread over replicas).
REPLICA_HEADER = "x-despina-replica"

UnaryCall = Callable[["DespinaReplica", Any, CallContext], Awaitable[Any]]


def _unary(rpc: str) -> UnaryCall:
    """The deployment method Ray Serve calls for the unary RPC ``rpc``."""

    async def call(self: DespinaReplica, message: Any, grpc_context: CallContext) -> Any:
        return await self.grpc.unary(rpc, message, grpc_context)

    call.__name__ = call.__qualname__ = rpc
    return call


class DespinaReplica:
    """One replica: ``args`` is a ``despina serve`` command line (``--model-repository``
    local or ``s3://``/``gs://``/``as://`` with despina-repository-fsspec installed)."""

    async def __init__(self, args: Sequence[str]) -> None:  # type: ignore[misc] # Ray awaits it
        self.server = Server.from_args([*args, *NO_LISTENERS])
        await self.server.start()  # stores each plugin's options, which the routes read
        host = self.server.dataplane
        self.rest = RestRoutes(host)
        self.grpc = GrpcCalls(host)
        self.replica_id = serve.get_replica_context().replica_id.unique_id

    async def __call__(self, request: Request) -> Response:
        """A v2 REST request from Ray Serve's HTTP proxy (or, under direct ingress, the
        replica's own listener), its path under the app's route prefix (``root_path``)
        routed as if the app were at ``/``. Path and query come from the ASGI scope
        (Starlette's ``request.url`` parses the whole URL: a sixth of this call's CPU)."""
        scope = request.scope
        raw_path = scope.get("raw_path")
        path = raw_path.decode("latin-1") if raw_path else scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(f"{root}/"):
            path = path[len(root) :]
        query = scope.get("query_string", b"").decode("latin-1")
        answer = await self.rest.handle(
            request.method, path, request.headers, request.stream(), query
        )
        headers = {**answer.headers, REPLICA_HEADER: self.replica_id}
        if isinstance(answer, StreamResponse):
            return StreamingResponse(answer.chunks, status_code=answer.status, headers=headers)
        return Response(answer.joined(), status_code=answer.status, headers=headers)

    def check_health(self) -> None:
        """Ray Serve's replica health check: raises unless the server is ready."""
        if not self.server.ready:
            raise RuntimeError("the Despina server in this replica is not ready")

    async def __del__(self) -> None:
        """Ray Serve's replica shutdown: stop the server (graceful, within
        ``--exit-timeout-secs``); Ray stops routing here first."""
        await self.server.shutdown()
        rest: RestRoutes | None = getattr(self, "rest", None)  # None: __init__ failed
        if rest is not None:
            rest.close()

    # gRPC: Ray Serve calls the method named after the RPC with the request message (a
    # streaming RPC: with an iterator of them) and Ray's gRPC context.
    ServerLive = _unary("ServerLive")
    ServerReady = _unary("ServerReady")
    ModelReady = _unary("ModelReady")
    ServerMetadata = _unary("ServerMetadata")
    ModelMetadata = _unary("ModelMetadata")
    ModelConfig = _unary("ModelConfig")
    ModelStatistics = _unary("ModelStatistics")
    ModelInfer = _unary("ModelInfer")
    RepositoryIndex = _unary("RepositoryIndex")
    RepositoryModelLoad = _unary("RepositoryModelLoad")
    RepositoryModelUnload = _unary("RepositoryModelUnload")
    SystemSharedMemoryStatus = _unary("SystemSharedMemoryStatus")
    SystemSharedMemoryRegister = _unary("SystemSharedMemoryRegister")
    SystemSharedMemoryUnregister = _unary("SystemSharedMemoryUnregister")
    CudaSharedMemoryStatus = _unary("CudaSharedMemoryStatus")
    CudaSharedMemoryRegister = _unary("CudaSharedMemoryRegister")
    CudaSharedMemoryUnregister = _unary("CudaSharedMemoryUnregister")
    TraceSetting = _unary("TraceSetting")
    LogSettings = _unary("LogSettings")

    async def ModelStreamInfer(
        self, request_stream: AsyncIterator[Any], grpc_context: CallContext
    ) -> AsyncIterator[Any]:
        async for response in self.grpc.stream(request_stream, grpc_context):
            yield response
