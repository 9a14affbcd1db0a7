"""The gRPC frontend: Despina's own HTTP/2 server (or ``grpc.aio``, ``--grpc-stack
grpcio``) on the Despina server's event loop, or worker processes.

Serves ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` (SERVING while the
server is ready) on ``--grpc-address:--grpc-port``, with the keepalive, message-size,
compression, TLS and restricted-protocol settings of the ``--grpc-*`` flags.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from despina import reserve_port
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from despina_frontend_grpc import calls
from despina_frontend_grpc.grpc_framing import ZLIB_LEVELS
from despina_frontend_grpc.http2_server import ConnectionLimits, Http2GrpcServer, tls_context
from despina_frontend_grpc.infer import Inference
from despina_frontend_grpc.options import ALLOCATION_POOL_SIZE, COMPRESSION_LEVELS
from despina_frontend_grpc.pool import WorkerPool
from despina_frontend_grpc.restrict import SERVICE, RestrictionInterceptor, parse_restrictions
from despina_frontend_grpc.service import InferenceServicer, add_to_server
from despina_frontend_grpc.wire import HEALTH_SERVICE

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.frontend.grpc")


def server_options(settings: argparse.Namespace) -> list[tuple[str, Any]]:
    """grpc channel arguments from the flags (keepalive, message size, port reuse)."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", settings.grpc_max_message_size),
        ("grpc.max_send_message_length", settings.grpc_max_message_size),
        ("grpc.so_reuseport", int(settings.reuse_grpc_port)),
        ("grpc.keepalive_time_ms", settings.grpc_keepalive_time),
        ("grpc.keepalive_timeout_ms", settings.grpc_keepalive_timeout),
        ("grpc.keepalive_permit_without_calls", int(settings.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", settings.grpc_http2_max_pings_without_data),
        (
            "grpc.http2.min_recv_ping_interval_without_data_ms",
            settings.grpc_http2_min_recv_ping_interval_without_data,
        ),
        ("grpc.http2.max_ping_strikes", settings.grpc_http2_max_ping_strikes),
        # a level, not an algorithm: grpc picks one the client accepts (gzip, deflate)
        (
            "grpc.default_compression_level",
            COMPRESSION_LEVELS[settings.grpc_infer_response_compression_level],
        ),
    ]
    if settings.grpc_max_connection_age is not None:
        options.append(("grpc.max_connection_age_ms", settings.grpc_max_connection_age))
    if settings.grpc_max_connection_age_grace is not None:
        options.append(("grpc.max_connection_age_grace_ms", settings.grpc_max_connection_age_grace))
    return options


def connection_limits(settings: argparse.Namespace) -> ConnectionLimits:
    """The flags' limits and keepalive rules for Despina's own HTTP/2 server."""

    def seconds(ms: int | None) -> float | None:
        return None if ms is None else ms / 1000.0

    return ConnectionLimits(
        max_receive=settings.grpc_max_message_size,
        max_send=settings.grpc_max_message_size,
        zlib_level=ZLIB_LEVELS[COMPRESSION_LEVELS[settings.grpc_infer_response_compression_level]],
        keepalive_time=settings.grpc_keepalive_time / 1000.0,
        keepalive_timeout=settings.grpc_keepalive_timeout / 1000.0,
        permit_without_calls=bool(settings.grpc_keepalive_permit_without_calls),
        max_pings_without_data=settings.grpc_http2_max_pings_without_data,
        min_recv_ping_interval=settings.grpc_http2_min_recv_ping_interval_without_data / 1000.0,
        max_ping_strikes=settings.grpc_http2_max_ping_strikes,
        max_connection_age=seconds(settings.grpc_max_connection_age),
        max_connection_age_grace=seconds(settings.grpc_max_connection_age_grace),
    )


def credentials(settings: argparse.Namespace) -> grpc.ServerCredentials | None:
    """TLS credentials (mutual when ``--grpc-use-ssl-mutual``), or None for plaintext."""
    mutual = bool(settings.grpc_use_ssl_mutual)
    if not (settings.grpc_use_ssl or mutual):
        return None
    key = Path(settings.grpc_server_key).read_bytes()
    cert = Path(settings.grpc_server_cert).read_bytes()
    root = Path(settings.grpc_root_cert).read_bytes() if settings.grpc_root_cert else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=mutual
    )


def bind_address(settings: argparse.Namespace, port: int | None = None) -> str:
    """``host:port`` (``--grpc-port`` unless ``port`` is given), bracketing IPv6 hosts."""
    host = str(settings.grpc_address)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{settings.grpc_port if port is None else port}"


def create_server(settings: argparse.Namespace, share_port: bool = False) -> grpc.aio.Server:
    """A grpc.aio server with the flags' options and restricted protocols; ``share_port``
    forces SO_REUSEPORT (worker processes share the port among themselves)."""
    restrictions = parse_restrictions(settings.grpc_restricted_protocol)
    interceptors = [RestrictionInterceptor(restrictions)] if restrictions else []
    options = server_options(settings)
    if share_port:
        options = [(k, v) for k, v in options if k != "grpc.so_reuseport"]
        options.append(("grpc.so_reuseport", 1))
    return grpc.aio.server(options=options, interceptors=interceptors)


def bind(server: grpc.aio.Server, settings: argparse.Namespace) -> int:
    """Add the flags' port (TLS or plaintext) to ``server``; OSError when it cannot bind."""
    address = bind_address(settings)
    creds = credentials(settings)
    try:
        port = (
            server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
        )
    except RuntimeError as exc:
        raise OSError(f"cannot bind gRPC to {address}: {exc}") from None
    if not port:
        raise OSError(f"cannot bind gRPC to {address}")
    return int(port)


class ReadinessHealth(health_aio.HealthServicer):  # type: ignore[misc]
    """Standard health checking: SERVING while the Despina server is ready."""

    def __init__(self, host: FrontendHost) -> None:
        super().__init__()
        self.host = host

    async def Check(self, request: Any, context: Any) -> Any:
        await self.refresh()
        return await super().Check(request, context)

    async def Watch(self, request: Any, context: Any) -> Any:
        await self.refresh()
        return await super().Watch(request, context)

    async def refresh(self) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.host.ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", SERVICE):
            await self.set(service, status)


class GrpcFrontend:
    """``despina_frontends`` class "grpc": nothing starts when ``--allow-grpc false``.

    ``--grpc-port 0`` binds an ephemeral port (one for all worker processes); :attr:`port`
    is the port bound.
    """

    name = "grpc"

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        self.settings = host.settings
        self.grpc_server: grpc.aio.Server | None = None
        self.http2_server: Http2GrpcServer | None = None
        self.pool: WorkerPool | None = None
        self.health: ReadinessHealth | None = None
        #: The port :meth:`start` bound; None before, and when gRPC is not served.
        self.port: int | None = None

    async def start(self) -> None:
        """Bind and start serving; OSError when the address cannot be bound."""
        settings = self.settings
        if not settings.allow_grpc:
            return
        if settings.grpc_infer_allocation_pool_size != ALLOCATION_POOL_SIZE:
            log.warning(
                "--grpc-infer-allocation-pool-size has no effect: Python allocates per request"
            )
        inference = Inference(self.host, settings.grpc_header_forward_pattern)
        servicer = InferenceServicer(self.host, inference)
        self.health = ReadinessHealth(self.host)
        await self.health.refresh()
        servicers = {SERVICE: servicer, HEALTH_SERVICE: self.health}
        if settings.grpc_worker_processes > 0:
            self.pool, self.port = await self._start_workers(servicers)
            stack = f"grpcio in {settings.grpc_worker_processes} worker processes"
        elif settings.grpc_stack == "grpcio":
            self.grpc_server, self.port = await self._serve_here(servicer)
            stack = "grpcio"
        else:
            self.http2_server, self.port = await self._serve_http2(servicers)
            stack = "despina"
        log.info(
            "Started GRPCInferenceService at %s (%s)", bind_address(settings, self.port), stack
        )

    async def _start_workers(self, servicers: dict[str, Any]) -> tuple[WorkerPool, int]:
        """Start the workers on the flags' port, or on one ephemeral port all of them share
        for port 0; OSError when they cannot bind."""
        settings = self.settings
        count = int(settings.grpc_worker_processes)
        if settings.grpc_port:
            pool = WorkerPool(servicers, settings)
            return pool, await pool.start(count)
        try:
            reserved = reserve_port(str(settings.grpc_address))
        except OSError as exc:
            raise OSError(f"cannot bind gRPC to {bind_address(settings)}: {exc}") from None
        with reserved:
            port = int(reserved.getsockname()[1])
            pool = WorkerPool(
                servicers, argparse.Namespace(**{**vars(settings), "grpc_port": port})
            )
            return pool, await pool.start(count)

    async def _serve_here(self, servicer: InferenceServicer) -> tuple[grpc.aio.Server, int]:
        server = create_server(self.settings)
        add_to_server(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        port = bind(server, self.settings)
        await server.start()
        return server, port

    async def _serve_http2(self, servicers: dict[str, Any]) -> tuple[Http2GrpcServer, int]:
        settings = self.settings
        context = None
        if settings.grpc_use_ssl or settings.grpc_use_ssl_mutual:
            context = tls_context(
                settings.grpc_server_cert,
                settings.grpc_server_key,
                settings.grpc_root_cert or None,
                bool(settings.grpc_use_ssl_mutual),
            )
        server = Http2GrpcServer(
            calls.route_table(servicers),
            connection_limits(settings),
            parse_restrictions(settings.grpc_restricted_protocol),
            context,
        )
        try:
            port = await server.start(
                str(settings.grpc_address), settings.grpc_port, bool(settings.reuse_grpc_port)
            )
        except OSError as exc:
            raise OSError(f"cannot bind gRPC to {bind_address(settings)}: {exc}") from None
        return server, port

    async def stop(self) -> None:
        """Report NOT_SERVING, stop accepting calls; in-flight calls get a second to finish."""
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self.grpc_server is not None:
            await self.grpc_server.stop(grace=1.0)
            self.grpc_server = None
        if self.http2_server is not None:
            await self.http2_server.stop(grace=1.0)
            self.http2_server = None
        if self.pool is not None:
            await self.pool.stop()
            self.pool = None
