"""The gRPC frontend: Despina's own HTTP/2 server
(:mod:`~despina_frontend_grpc.grpc_server`) on the Despina server's event loop.

Serves ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` (SERVING while the
server is ready) on ``--grpc-address:--grpc-port``, with the keepalive, message-size,
compression, TLS and restricted-protocol settings of the ``--grpc-*`` flags.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from despina import AddressInUse
from grpc_health.v1 import health_pb2

from despina_frontend_grpc import rpc_dispatch
from despina_frontend_grpc.connection_limits import ConnectionLimits
from despina_frontend_grpc.grpc_server import Http2GrpcServer, tls_context
from despina_frontend_grpc.health import HealthServicer
from despina_frontend_grpc.infer import Inference
from despina_frontend_grpc.options import (
    ALLOCATION_POOL_SIZE,
    COMPRESSION_LEVELS,
    GRPC_OPTIONS,
    GrpcOptions,
)
from despina_frontend_grpc.restrict import HEALTH_SERVICE, SERVICE, method_rules
from despina_frontend_grpc.service import InferenceServicer

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.frontend.grpc")


def connection_limits(options: GrpcOptions) -> ConnectionLimits:
    """The options' limits and keepalive rules for the HTTP/2 server's connections."""

    def seconds(ms: int | None) -> float | None:
        return None if ms is None else ms / 1000.0

    return ConnectionLimits(
        max_receive=options.max_message_size,
        max_send=options.max_message_size,
        zlib_level=COMPRESSION_LEVELS[options.infer_response_compression_level],
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
        handshake_timeout=options.handshake_timeout_secs,
    )


def bind_address(options: GrpcOptions, port: int | None = None) -> str:
    """``host:port`` (the options' port unless ``port`` is given), bracketing IPv6 hosts."""
    host = options.address
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{options.port if port is None else port}"


class ReadinessHealth(HealthServicer):
    """Standard health checking (called through
    :class:`~despina_frontend_grpc.rpc_dispatch.CallContext`): SERVING while the Despina
    server is ready, NOT_FOUND for a service other than ``""`` and Triton's."""

    def __init__(self, host: FrontendHost) -> None:
        super().__init__()
        self.host = host

    async def Check(self, request: Any, context: Any) -> Any:
        await self.refresh()
        return await super().Check(request, context)

    async def Watch(self, request: Any, context: Any) -> Any:
        await self.refresh()
        return await super().Watch(request, context)

    async def refresh(self, ask_models: bool = True) -> None:
        """Set the status from the server's readiness; with ``ask_models`` (a client's
        check) the models' own readiness checks are asked too."""
        ready = await self.host.ready_checked() if ask_models else self.host.ready
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", SERVICE):
            await self.set(service, status)


class GrpcFrontend:
    """``despina_frontends`` class "grpc": nothing starts when ``--allow-grpc false``.

    ``--grpc-port 0`` binds an ephemeral port; :attr:`port` is the port bound.
    """

    name = "grpc"

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        self.http2_server: Http2GrpcServer | None = None
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
        self.health = ReadinessHealth(self.host)
        await self.health.refresh(ask_models=False)
        servicers = {SERVICE: InferenceServicer(self.host, inference), HEALTH_SERVICE: self.health}
        context = None
        if options.tls:
            context = tls_context(
                options.server_cert,
                options.server_key,
                options.root_cert or None,
                options.use_ssl_mutual,
            )
        server = Http2GrpcServer(
            rpc_dispatch.route_table(servicers),
            connection_limits(options),
            method_rules(options.restrictions),
            context,
            self.host.request_bodies,
        )
        try:
            self.port = await server.start(options.address, options.port, options.reuse_port)
        except AddressInUse as exc:
            raise AddressInUse(exc.address, "GRPC") from None
        except OSError as exc:
            raise OSError(f"cannot bind gRPC to {bind_address(options)}: {exc}") from None
        self.http2_server = server
        log.info("Started GRPCInferenceService at %s", bind_address(options, self.port))

    def drain(self) -> None:
        """The server is stopping (as Triton 2.58+, before its models stop): stop
        listening and shut the connections down gracefully (two GOAWAYs, refused streams
        after the last, close after the last call). A second call does nothing."""
        if self.http2_server is not None:
            self.http2_server.drain()

    @property
    def settled(self) -> bool:
        """Always: a call is submitted as soon as its message arrives whole, so the gRPC
        port holds no request it read and did not hand to the server."""
        return True

    async def stop(self) -> None:
        """Report NOT_SERVING, stop accepting calls; calls still running get a second to
        finish, then UNAVAILABLE."""
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self.http2_server is not None:
            await self.http2_server.stop(grace=1.0)
            self.http2_server = None
