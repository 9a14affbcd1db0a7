"""The gRPC frontend's flags: tritonserver's names, types and defaults.

Importing this module is cheap (argparse only): ``despina --help`` and ``despina plugins``
import it without grpc.
"""

from __future__ import annotations

import argparse

from despina.triton_flags import triton_bool

#: grpc's own default would cap requests at 4 MiB; Triton accepts messages up to 2 GiB.
MAX_MESSAGE_SIZE = 2**31 - 1
#: tritonserver's ``--grpc-infer-allocation-pool-size`` default.
ALLOCATION_POOL_SIZE = 8
#: ``--grpc-infer-response-compression-level`` -> grpc's compression level.
COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 2, "high": 3}
#: ``--grpc-stack`` choices: Despina's own HTTP/2 server, or grpc.aio.
STACKS = ("despina", "grpcio")


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
        help="forward request headers matching REGEX as inference request parameters",
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
        "--grpc-stack",
        choices=STACKS,
        default="despina",
        help="what serves HTTP/2: despina (Despina's own, on the server's event loop) or "
        "grpcio (grpc.aio); worker processes always run grpcio (Despina; default: despina)",
    )
    add(
        "--grpc-worker-processes",
        type=int,
        default=0,
        metavar="INT",
        help="serve the gRPC port from INT worker processes that forward calls to the server "
        "process (Despina; default: 0, serve in the server process)",
    )
    add(
        "--grpc-max-message-size",
        type=int,
        default=MAX_MESSAGE_SIZE,
        metavar="BYTES",
        help="largest request and response message in bytes (Despina; default: 2147483647, as Triton)",
    )
