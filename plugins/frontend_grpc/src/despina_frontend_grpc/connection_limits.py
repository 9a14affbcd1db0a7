"""The settings of the gRPC server's connections, from tritonserver's ``--grpc-*`` flags."""

from __future__ import annotations

from dataclasses import dataclass

from despina_frontend_grpc.h2_limits import MAX_CONCURRENT_STREAMS

#: Connections served at once (default of ``--grpc-max-connections``); one accepted
#: beyond it makes room (see :mod:`despina.transport.roster`) or is closed at once.
MAX_CONNECTIONS = 1024
#: Seconds a new connection has to send the connection preface (default of
#: ``--grpc-handshake-timeout-secs``; over TLS, the TLS handshake gets as long again).
HANDSHAKE_TIMEOUT = 5.0


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection settings (times in seconds); the HTTP/2 engine reads the stream
    limit and the PING rules (:class:`~despina_frontend_grpc.h2_engine.PingPolicy`)."""

    max_receive: int
    max_send: int
    zlib_level: int = 0
    keepalive_time: float = 7200.0
    keepalive_timeout: float = 20.0
    permit_without_calls: bool = False
    max_pings_without_data: int = 2
    min_recv_ping_interval: float = 300.0
    max_ping_strikes: int = 2
    max_connection_age: float | None = None
    max_connection_age_grace: float | None = None
    #: SETTINGS_MAX_CONCURRENT_STREAMS, advertised and enforced.
    max_concurrent_streams: int = MAX_CONCURRENT_STREAMS
    #: Connections served at once by the server; 0: no limit.
    max_connections: int = MAX_CONNECTIONS
    #: Seconds a connection has to send the preface; 0: no limit.
    handshake_timeout: float = HANDSHAKE_TIMEOUT
