"""The gRPC frontend's flags (tritonserver's names, types and defaults) and the
:class:`GrpcOptions` read from them once (``despina_configure``).

Importing this module is cheap (argparse only): ``despina --help`` and ``despina plugins``
import it without grpc.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from despina import (
    Restriction,
    StashKey,
    header_forward_matcher,
    parse_restricted,
    triton_bool,
)

from despina_frontend_grpc.connection_limits import HANDSHAKE_TIMEOUT, MAX_CONNECTIONS
from despina_frontend_grpc.h2_limits import MAX_CONCURRENT_STREAMS

#: grpc's own default would cap requests at 4 MiB; Triton accepts messages up to 2 GiB.
MAX_MESSAGE_SIZE = 2**31 - 1
#: tritonserver's ``--grpc-infer-allocation-pool-size`` default.
ALLOCATION_POOL_SIZE = 8
#: ``--grpc-infer-response-compression-level`` -> the zlib level of gzip responses (grpc's
#: levels; 0: responses not compressed).
COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 6, "high": 9}
#: The flag whose values restrict protocol groups.
RESTRICTED_FLAG = "--grpc-restricted-protocol"
#: A restricted group's key ``KEY`` is called with the metadata ``<prefix>KEY``.
HEADER_PREFIX = "triton-grpc-protocol-"


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add every ``--grpc-*`` flag of tritonserver, plus ``--grpc-max-message-size``."""
    group = parser.add_argument_group("gRPC frontend (despina-frontend-grpc)")
    add = group.add_argument
    add(
        "--allow-grpc",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="serve the gRPC protocol (default: true)",
    )
    add(
        "--grpc-address",
        default="0.0.0.0",
        metavar="ADDR",
        help="address the gRPC server binds to (default: 0.0.0.0)",
    )
    add("--grpc-port", type=int, default=8001, metavar="INT", help="gRPC port (default: 8001)")
    add(
        "--reuse-grpc-port",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="set SO_REUSEPORT so several servers share the port (default: false)",
    )
    add(
        "--grpc-header-forward-pattern",
        default="",
        metavar="REGEX",
        help="forward request headers matching REGEX (RE2, case-insensitive unless it starts "
        "with (?-i)) as inference request parameters",
    )
    add(
        "--grpc-infer-allocation-pool-size",
        type=int,
        default=ALLOCATION_POOL_SIZE,
        metavar="INT",
        help="accepted for compatibility; Python allocates request objects per request (default: 8)",
    )
    add(
        "--grpc-use-ssl",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="serve gRPC over TLS (default: false)",
    )
    add(
        "--grpc-use-ssl-mutual",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="TLS with client certificates checked against --grpc-root-cert (default: false)",
    )
    add(
        "--grpc-server-cert",
        default="",
        metavar="PATH",
        help="PEM server certificate (with --grpc-use-ssl)",
    )
    add(
        "--grpc-server-key",
        default="",
        metavar="PATH",
        help="PEM server private key (with --grpc-use-ssl)",
    )
    add(
        "--grpc-root-cert",
        default="",
        metavar="PATH",
        help="PEM root certificate that client certificates must chain to (mutual TLS)",
    )
    add(
        "--grpc-infer-response-compression-level",
        choices=list(COMPRESSION_LEVELS),
        default="none",
        help="gzip level of inference responses: none, low, medium, high (default: none)",
    )
    add(
        "--grpc-keepalive-time",
        type=int,
        default=7200000,
        metavar="MS",
        help="keepalive ping period in ms (default: 7200000)",
    )
    add(
        "--grpc-keepalive-timeout",
        type=int,
        default=20000,
        metavar="MS",
        help="keepalive ping acknowledgement timeout in ms (default: 20000)",
    )
    add(
        "--grpc-keepalive-permit-without-calls",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="allow keepalive pings without calls in flight (default: false)",
    )
    add(
        "--grpc-http2-max-pings-without-data",
        type=int,
        default=2,
        metavar="INT",
        help="pings sent without data before pinging stops; 0 = no limit (default: 2)",
    )
    add(
        "--grpc-http2-min-recv-ping-interval-without-data",
        type=int,
        default=300000,
        metavar="MS",
        help="minimum ms between a client's pings without data (default: 300000)",
    )
    add(
        "--grpc-http2-max-ping-strikes",
        type=int,
        default=2,
        metavar="INT",
        help="bad pings tolerated before GOAWAY; 0 = any (default: 2)",
    )
    add(
        "--grpc-max-connection-age",
        type=int,
        default=None,
        metavar="MS",
        help="maximum connection age in ms (default: unlimited)",
    )
    add(
        "--grpc-max-connection-age-grace",
        type=int,
        default=None,
        metavar="MS",
        help="grace period after the maximum age in ms (default: unlimited)",
    )
    add(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="GROUPS:KEY=VALUE",
        help="restrict protocol groups (health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging) to calls carrying the header 'triton-grpc-protocol-KEY: VALUE'; repeatable",
    )
    add(
        "--grpc-max-message-size",
        type=int,
        default=MAX_MESSAGE_SIZE,
        metavar="BYTES",
        help="largest request and response message in bytes (Despina; default: 2147483647, as Triton)",
    )
    add(
        "--grpc-max-concurrent-streams",
        type=int,
        default=MAX_CONCURRENT_STREAMS,
        metavar="INT",
        help="calls one connection may have open at once (HTTP/2 "
        "SETTINGS_MAX_CONCURRENT_STREAMS, advertised and enforced; Despina; default: 1024)",
    )
    add(
        "--grpc-max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        metavar="INT",
        help="connections served at once; one more makes room (the oldest connection "
        "without its HTTP/2 preface is closed, else the longest-idle one without calls gets "
        "GOAWAY), or is closed as soon as it is accepted when every connection has calls; "
        "0 = no limit (Despina; default: 1024)",
    )
    add(
        "--grpc-handshake-timeout-secs",
        type=float,
        default=HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help="a connection that has not sent the HTTP/2 connection preface within this time "
        "is closed (over TLS, the TLS handshake gets as long again); 0 = no limit "
        f"(Despina; default: {HANDSHAKE_TIMEOUT:g})",
    )


@dataclass(frozen=True)
class GrpcOptions:
    """``--allow-grpc``, ``--grpc-*`` and ``--reuse-grpc-port``, typed and checked.

    Times are in milliseconds, as the flags give them.
    """

    allow_grpc: bool
    address: str
    port: int
    reuse_port: bool
    header_forward_pattern: str
    #: Accepted for compatibility; only a value other than the default is warned about.
    infer_allocation_pool_size: int
    use_ssl: bool
    use_ssl_mutual: bool
    server_cert: str
    server_key: str
    root_cert: str
    #: A key of :data:`COMPRESSION_LEVELS`.
    infer_response_compression_level: str
    keepalive_time: int
    keepalive_timeout: int
    keepalive_permit_without_calls: bool
    http2_max_pings_without_data: int
    http2_min_recv_ping_interval_without_data: int
    http2_max_ping_strikes: int
    #: None: unlimited.
    max_connection_age: int | None
    max_connection_age_grace: int | None
    #: ``--grpc-restricted-protocol``: ``{group: Restriction}`` (headers prefixed).
    restrictions: Mapping[str, Restriction]
    max_message_size: int
    #: ``--grpc-max-concurrent-streams``: at least 1.
    max_concurrent_streams: int = MAX_CONCURRENT_STREAMS
    #: ``--grpc-max-connections``: 0 for no limit.
    max_connections: int = MAX_CONNECTIONS
    #: ``--grpc-handshake-timeout-secs``: 0 for no limit.
    handshake_timeout_secs: float = HANDSHAKE_TIMEOUT

    @classmethod
    def from_namespace(cls, flags: argparse.Namespace) -> GrpcOptions:
        """Read and check the flags; ValueError naming the flag for a malformed
        ``--grpc-restricted-protocol`` or ``--grpc-header-forward-pattern``, or for TLS
        without its files."""
        try:
            header_forward_matcher(flags.grpc_header_forward_pattern)
        except ValueError as exc:
            raise ValueError(f"--grpc-header-forward-pattern: {exc}") from None
        options = cls(
            allow_grpc=bool(flags.allow_grpc),
            address=str(flags.grpc_address),
            port=int(flags.grpc_port),
            reuse_port=bool(flags.reuse_grpc_port),
            header_forward_pattern=str(flags.grpc_header_forward_pattern),
            infer_allocation_pool_size=int(flags.grpc_infer_allocation_pool_size),
            use_ssl=bool(flags.grpc_use_ssl),
            use_ssl_mutual=bool(flags.grpc_use_ssl_mutual),
            server_cert=str(flags.grpc_server_cert),
            server_key=str(flags.grpc_server_key),
            root_cert=str(flags.grpc_root_cert),
            infer_response_compression_level=str(flags.grpc_infer_response_compression_level),
            keepalive_time=int(flags.grpc_keepalive_time),
            keepalive_timeout=int(flags.grpc_keepalive_timeout),
            keepalive_permit_without_calls=bool(flags.grpc_keepalive_permit_without_calls),
            http2_max_pings_without_data=int(flags.grpc_http2_max_pings_without_data),
            http2_min_recv_ping_interval_without_data=int(
                flags.grpc_http2_min_recv_ping_interval_without_data
            ),
            http2_max_ping_strikes=int(flags.grpc_http2_max_ping_strikes),
            max_connection_age=_optional_int(flags.grpc_max_connection_age),
            max_connection_age_grace=_optional_int(flags.grpc_max_connection_age_grace),
            restrictions=parse_restrictions(flags.grpc_restricted_protocol),
            max_message_size=int(flags.grpc_max_message_size),
            max_concurrent_streams=int(flags.grpc_max_concurrent_streams),
            max_connections=int(flags.grpc_max_connections),
            handshake_timeout_secs=float(flags.grpc_handshake_timeout_secs),
        )
        if options.max_concurrent_streams < 1:
            raise ValueError("--grpc-max-concurrent-streams must be at least 1")
        if options.max_connections < 0:
            raise ValueError("--grpc-max-connections must be 0 (no limit) or more")
        if not options.handshake_timeout_secs >= 0:
            raise ValueError("--grpc-handshake-timeout-secs must be 0 (no limit) or more")
        if options.allow_grpc and options.tls:
            if not (options.server_cert and options.server_key):
                raise ValueError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
            if options.use_ssl_mutual and not options.root_cert:
                raise ValueError("--grpc-use-ssl-mutual needs --grpc-root-cert")
        return options

    @property
    def tls(self) -> bool:
        """Whether the port is served over TLS (``--grpc-use-ssl`` or ``-mutual``)."""
        return self.use_ssl or self.use_ssl_mutual


def parse_restrictions(values: Iterable[str]) -> Mapping[str, Restriction]:
    """``{group: Restriction}`` from ``--grpc-restricted-protocol``'s values (headers carry
    :data:`HEADER_PREFIX`); ValueError with Triton's texts, naming the flag."""
    return parse_restricted(values, RESTRICTED_FLAG, "protocol", HEADER_PREFIX)


def _optional_int(value: int | None) -> int | None:
    return None if value is None else int(value)


#: Where the gRPC frontend's options live in the server's stash.
GRPC_OPTIONS: StashKey[GrpcOptions] = StashKey("despina-frontend-grpc")
