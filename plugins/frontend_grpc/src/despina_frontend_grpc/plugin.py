"""Entry point of ``despina-frontend-grpc``: its flags and its frontend class.

Cheap to import: grpc is imported only when the server asks for frontends.
"""

from __future__ import annotations

import argparse
from typing import Any

from despina import hookimpl

from despina_frontend_grpc.options import add_options


@hookimpl
def despina_addoption(parser: argparse.ArgumentParser) -> None:
    add_options(parser)


@hookimpl
def despina_configure(settings: argparse.Namespace) -> None:
    """Refuse malformed ``--grpc-restricted-protocol`` values and TLS without files."""
    from despina_frontend_grpc.restrict import parse_restrictions

    parse_restrictions(settings.grpc_restricted_protocol)
    if settings.allow_grpc and (settings.grpc_use_ssl or settings.grpc_use_ssl_mutual):
        if not (settings.grpc_server_cert and settings.grpc_server_key):
            raise ValueError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
        if settings.grpc_use_ssl_mutual and not settings.grpc_root_cert:
            raise ValueError("--grpc-use-ssl-mutual needs --grpc-root-cert")


@hookimpl
def despina_frontends() -> list[type[Any]]:
    from despina_frontend_grpc.frontend import GrpcFrontend

    return [GrpcFrontend]
