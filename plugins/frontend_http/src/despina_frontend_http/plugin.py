"""Entry-point module: the HTTP frontend's flags and class. Cheap to import (no aiohttp)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from despina import hookimpl, triton_bool

from despina_frontend_http.options import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_INPUT_SIZE,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_OUTPUTS,
    HTTP_OPTIONS,
    HttpOptions,
)

if TYPE_CHECKING:
    from despina import Stash


@hookimpl
def despina_addoption(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("HTTP/REST frontend (despina-frontend-http)")
    group.add_argument(
        "--allow-http",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="serve the HTTP/REST protocol (default: true)",
    )
    group.add_argument(
        "--http-port", type=int, default=8000, metavar="INT", help="HTTP port (default: 8000)"
    )
    group.add_argument(
        "--http-address",
        default="0.0.0.0",
        metavar="ADDR",
        help="HTTP address to bind (default: 0.0.0.0)",
    )
    group.add_argument(
        "--reuse-http-port",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="bind the HTTP port with SO_REUSEPORT (default: false)",
    )
    group.add_argument(
        "--http-thread-count",
        type=int,
        default=8,
        metavar="INT",
        help="threads that compress/decompress large bodies off the event loop; requests are "
        "served by the server's asyncio event loop (default: 8)",
    )
    group.add_argument(
        "--http-header-forward-pattern",
        default="",
        metavar="REGEX",
        help="request headers matching this RE2 regex (case-insensitive unless it starts with "
        "(?-i)) are forwarded to models as request parameters (default: none)",
    )
    group.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="APIS:KEY=VALUE",
        help="restrict endpoint groups (health, metadata, inference, shared-memory, "
        "model-config, model-repository, statistics, trace, logging) to requests carrying "
        "header KEY with VALUE, e.g. model-repository,shared-memory:admin-key=secret; repeatable",
    )
    group.add_argument(
        "--http-max-input-size",
        type=int,
        default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest request body accepted, after decompression (default: 64 MiB)",
    )
    group.add_argument(
        "--http-max-header-size",
        type=int,
        default=DEFAULT_MAX_HEADER_SIZE,
        metavar="BYTES",
        help="largest request line plus headers; larger is answered 431 and the connection "
        "closed (Despina; default: 65536)",
    )
    group.add_argument(
        "--http-max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="INT",
        help="open client connections; one more makes room (the oldest connection without a "
        "request yet is closed, else the longest-idle keep-alive one), or is closed at once "
        "when every connection is busy (Despina; default: 4096)",
    )
    group.add_argument(
        "--http-handshake-timeout-secs",
        type=float,
        default=DEFAULT_HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help="a connection that has not sent a whole first request head within this time is "
        "closed (over TLS, the TLS handshake gets as long again); 0 = no limit (Despina; "
        f"default: {DEFAULT_HANDSHAKE_TIMEOUT:g})",
    )
    group.add_argument(
        "--http-max-json-depth",
        type=int,
        default=DEFAULT_MAX_JSON_DEPTH,
        metavar="INT",
        help="deepest nesting of arrays and objects in a JSON body; deeper is answered 400 "
        "before parsing (Despina; default: 64, enough for rank-32 tensors)",
    )
    group.add_argument(
        "--http-max-outputs",
        type=int,
        default=DEFAULT_MAX_OUTPUTS,
        metavar="INT",
        help="outputs one inference request may name; more is answered 400 (Despina; default: 256)",
    )
    group.add_argument(
        "--http-use-ssl",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="serve HTTPS: TLS 1.2 or later (Despina; default: false)",
    )
    group.add_argument(
        "--http-use-ssl-mutual",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="HTTPS with client certificates required, checked against --http-root-cert "
        "(Despina; default: false)",
    )
    group.add_argument(
        "--http-server-cert",
        default="",
        metavar="PATH",
        help="PEM server certificate (chain) for --http-use-ssl",
    )
    group.add_argument(
        "--http-server-key",
        default="",
        metavar="PATH",
        help="PEM server private key for --http-use-ssl",
    )
    group.add_argument(
        "--http-root-cert",
        default="",
        metavar="PATH",
        help="PEM root certificate that client certificates must chain to (mutual TLS)",
    )


@hookimpl
def despina_configure(settings: argparse.Namespace, stash: Stash) -> None:
    stash[HTTP_OPTIONS] = HttpOptions.from_namespace(settings)


@hookimpl
def despina_frontends() -> list[type[Any]]:
    from despina_frontend_http.frontend import HttpFrontend

    return [HttpFrontend]


@hookimpl
def despina_serving_processes(flags: argparse.Namespace, count: int) -> Any:
    """Every serving process binds --http-port with --reuse-http-port; port 0 is refused."""
    from despina import SharedPort

    return SharedPort.of(
        flags.allow_http, flags.http_port, "--http-port", "--reuse-http-port", count
    )
