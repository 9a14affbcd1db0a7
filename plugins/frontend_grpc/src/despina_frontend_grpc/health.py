"""The standard gRPC health checking service (``grpc.health.v1.Health``) on Despina's own
gRPC server: ``Check`` answers a service's status, or NOT_FOUND for a service never set;
``Watch`` streams a service's status (SERVICE_UNKNOWN while it is not set) now and at
every change until the client ends the call; after :meth:`enter_graceful_shutdown` every
known service is NOT_SERVING for good. Messages are grpcio-health-checking's generated
``health_pb2`` (protobuf only; grpcio is not imported)."""

from __future__ import annotations

import asyncio
from typing import Any

from grpc_health.v1 import health_pb2

from despina_frontend_grpc.servicer_context import ServicerContext
from despina_frontend_grpc.status import StatusCode

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthServicer:
    """Statuses by service name (``""``: the whole server, SERVING at first)."""

    def __init__(self) -> None:
        self._status: dict[str, int] = {"": SERVING}
        self._watchers: dict[str, set[asyncio.Queue[int]]] = {}
        self._stopping = False

    async def Check(self, request: Any, context: ServicerContext) -> Any:
        status = self._status.get(request.service)
        if status is None:
            await context.abort(StatusCode.NOT_FOUND, "")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: Any) -> None:
        """Write the status, then each different one, until the call is cancelled."""
        changes: asyncio.Queue[int] = asyncio.Queue()
        watchers = self._watchers.setdefault(request.service, set())
        watchers.add(changes)
        try:
            sent = None
            status = self._status.get(request.service, SERVICE_UNKNOWN)
            while True:
                if status != sent:
                    await context.write(health_pb2.HealthCheckResponse(status=status))
                    sent = status
                status = await changes.get()
        finally:
            watchers.discard(changes)
            if not watchers:
                self._watchers.pop(request.service, None)

    async def set(self, service: str, status: int) -> None:
        """Set ``service``'s status (ignored once a graceful shutdown began)."""
        if not self._stopping:
            self._set(service, status)

    async def enter_graceful_shutdown(self) -> None:
        """Every known service NOT_SERVING from now on."""
        self._stopping = True
        for service in list(self._status):
            self._set(service, NOT_SERVING)

    def _set(self, service: str, status: int) -> None:
        self._status[service] = status
        for changes in self._watchers.get(service, ()):
            changes.put_nowait(status)
