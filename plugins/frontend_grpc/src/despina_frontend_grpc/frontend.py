"""The gRPC frontend: Despina's own HTTP/2 server (or ``grpc.aio``, ``--grpc-stack
grpcio``) on the Despina server's event loop, or worker processes.

Serves ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` (SERVING while the
server is ready) on ``--grpc-address:--grpc-port``, with the keepalive, message-size,
compression, TLS and restricted-protocol settings of the ``--grpc-*`` flags.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from despina import CORE, WorkerPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from despina_frontend_grpc import calls
from despina_frontend_grpc.connection_limits import ConnectionLimits
from despina_frontend_grpc.grpc_framing import ZLIB_LEVELS
from despina_frontend_grpc.http2_server import Http2GrpcServer, tls_context
from despina_frontend_grpc.infer import Inference
from despina_frontend_grpc.options import (
    ALLOCATION_POOL_SIZE,
    COMPRESSION_LEVELS,
    GRPC_OPTIONS,
    GrpcOptions,
)
from despina_frontend_grpc.pool import DRAIN_GRACE, start_workers
from despina_frontend_grpc.restrict import SERVICE, RestrictionInterceptor, method_rules
from despina_frontend_grpc.service import InferenceServicer, add_to_server
from despina_frontend_grpc.wire import HEALTH_SERVICE

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.frontend.grpc")


def server_options(options: GrpcOptions) -> list[tuple[str, Any]]:
    """grpc channel arguments from the options (keepalive, message size, port reuse)."""
    arguments: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", options.max_message_size),
        ("grpc.max_send_message_length", options.max_message_size),
        ("grpc.so_reuseport", int(options.reuse_port)),
        ("grpc.keepalive_time_ms", options.keepalive_time),
        ("grpc.keepalive_timeout_ms", options.keepalive_timeout),
        ("grpc.keepalive_permit_without_calls", int(options.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", options.http2_max_pings_without_data),
        (
            "grpc.http2.min_recv_ping_interval_without_data_ms",
            options.http2_min_recv_ping_interval_without_data,
        ),
        ("grpc.http2.max_ping_strikes", options.http2_max_ping_strikes),
        ("grpc.max_concurrent_streams", options.max_concurrent_streams),
        # a level, not an algorithm: grpc picks one the client accepts (gzip, deflate)
        (
            "grpc.default_compression_level",
            COMPRESSION_LEVELS[options.infer_response_compression_level],
        ),
    ]
    if options.max_connections:
        # grpc closes a connection accepted beyond it at once (no GOAWAY)
        arguments.append(("grpc.max_allowed_incoming_connections", options.max_connections))
    if options.max_connection_age is not None:
        arguments.append(("grpc.max_connection_age_ms", options.max_connection_age))
    if options.max_connection_age_grace is not None:
        arguments.append(("grpc.max_connection_age_grace_ms", options.max_connection_age_grace))
    return arguments


def connection_limits(options: GrpcOptions) -> ConnectionLimits:
    """The options' limits and keepalive rules for Despina's own HTTP/2 server."""

    def seconds(ms: int | None) -> float | None:
        return None if ms is None else ms / 1000.0

    return ConnectionLimits(
        max_receive=options.max_message_size,
        max_send=options.max_message_size,
        zlib_level=ZLIB_LEVELS[COMPRESSION_LEVELS[options.infer_response_compression_level]],
        keepalive_time=options.keepalive_time / 1000.0,
        keepalive_timeout=options.keepalive_timeout / 1000.0,
        permit_without_calls=options.keepalive_permit_without_calls,
        max_pings_without_data=options.http2_max_pings_without_data,
        min_recv_ping_interval=options.http2_min_recv_ping_interval_without_data / 1000.0,
        max_ping_strikes=options.http2_max_ping_strikes,
        max_connection_age=seconds(options.max_connection_age),
        max_connection_age_grace=seconds(options.max_connection_age_grace),
        max_concurrent_streams=options.max_concurrent_streams,
        max_connections=options.max_connections,
    )


def credentials(options: GrpcOptions) -> grpc.ServerCredentials | None:
    """TLS credentials (mutual when ``--grpc-use-ssl-mutual``), or None for plaintext."""
    if not options.tls:
        return None
    key = Path(options.server_key).read_bytes()
    cert = Path(options.server_cert).read_bytes()
    root = Path(options.root_cert).read_bytes() if options.root_cert else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=options.use_ssl_mutual
    )


def bind_address(options: GrpcOptions, port: int | None = None) -> str:
    """``host:port`` (the options' port unless ``port`` is given), bracketing IPv6 hosts."""
    host = options.address
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{options.port if port is None else port}"


def create_server(options: GrpcOptions, share_port: bool = False) -> grpc.aio.Server:
    """A grpc.aio server with the options' channel arguments and restricted protocols;
    ``share_port`` forces SO_REUSEPORT (worker processes share the port among themselves)."""
    restrictions = method_rules(options.restrictions)
    interceptors = [RestrictionInterceptor(restrictions)] if restrictions else []
    arguments = server_options(options)
    if share_port:
        arguments = [(k, v) for k, v in arguments if k != "grpc.so_reuseport"]
        arguments.append(("grpc.so_reuseport", 1))
    return grpc.aio.server(options=arguments, interceptors=interceptors)


def bind(server: grpc.aio.Server, options: GrpcOptions) -> int:
    """Add the options' port (TLS or plaintext) to ``server``; OSError when it cannot bind."""
    address = bind_address(options)
    creds = credentials(options)
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
        self.grpc_server: grpc.aio.Server | None = None
        self.http2_server: Http2GrpcServer | None = None
        self.pool: WorkerPool | None = None
        self.health: ReadinessHealth | None = None
        #: The port :meth:`start` bound; None before, and when gRPC is not served.
        self.port: int | None = None

    async def start(self) -> None:
        """Bind and start serving; OSError when the address cannot be bound."""
        options = self.host.stash[GRPC_OPTIONS]
        if not options.allow_grpc:
            return
        if options.infer_allocation_pool_size != ALLOCATION_POOL_SIZE:
            log.warning(
                "--grpc-infer-allocation-pool-size has no effect: Python allocates per request"
            )
        inference = Inference(self.host, options.header_forward_pattern)
        servicer = InferenceServicer(self.host, inference)
        self.health = ReadinessHealth(self.host)
        await self.health.refresh()
        servicers = {SERVICE: servicer, HEALTH_SERVICE: self.health}
        if options.worker_processes > 0:
            exit_timeout = float(self.host.stash[CORE].exit_timeout_secs)
            self.pool, self.port = await start_workers(servicers, options, exit_timeout)
            stack = f"grpcio in {options.worker_processes} worker processes"
        elif options.stack == "grpcio":
            self.grpc_server, self.port = await self._serve_here(servicer, options)
            stack = "grpcio"
        else:
            self.http2_server, self.port = await self._serve_http2(servicers, options)
            stack = "despina"
        log.info("Started GRPCInferenceService at %s (%s)", bind_address(options, self.port), stack)

    async def _serve_here(
        self, servicer: InferenceServicer, options: GrpcOptions
    ) -> tuple[grpc.aio.Server, int]:
        server = create_server(options)
        add_to_server(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        port = bind(server, options)
        await server.start()
        return server, port

    @staticmethod
    async def _serve_http2(
        servicers: dict[str, Any], options: GrpcOptions
    ) -> tuple[Http2GrpcServer, int]:
        context = None
        if options.tls:
            context = tls_context(
                options.server_cert,
                options.server_key,
                options.root_cert or None,
                options.use_ssl_mutual,
            )
        server = Http2GrpcServer(
            calls.route_table(servicers),
            connection_limits(options),
            method_rules(options.restrictions),
            context,
        )
        try:
            port = await server.start(options.address, options.port, options.reuse_port)
        except OSError as exc:
            raise OSError(f"cannot bind gRPC to {bind_address(options)}: {exc}") from None
        return server, port

    def drain(self) -> None:
        """The server begins to stop: Despina's HTTP/2 server stops listening and shuts
        its connections down gracefully (two GOAWAYs, refused streams after the last,
        close after the last call); worker processes stop accepting (DRAIN), their calls
        getting ``--exit-timeout-secs``. grpc.aio in this process drains in :meth:`stop`."""
        if self.http2_server is not None:
            self.http2_server.drain()
        if self.pool is not None:
            self.pool.drain(self.pool.exit_timeout)

    async def stop(self) -> None:
        """Report NOT_SERVING, stop accepting calls; calls still running get a second to
        finish."""
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self.grpc_server is not None:
            await self.grpc_server.stop(grace=1.0)
            self.grpc_server = None
        if self.http2_server is not None:
            await self.http2_server.stop(grace=1.0)
            self.http2_server = None
        if self.pool is not None:
            await self.pool.stop(DRAIN_GRACE)
            self.pool = None
