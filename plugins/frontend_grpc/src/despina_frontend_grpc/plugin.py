"""Entry point of ``despina-frontend-grpc``: its flags and its frontend class.

Cheap to import: grpc is imported only when the server asks for frontends.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from despina import hookimpl

from despina_frontend_grpc.options import GRPC_OPTIONS, GrpcOptions, add_options

if TYPE_CHECKING:
    from despina import Stash


@hookimpl
def despina_addoption(parser: argparse.ArgumentParser) -> None:
    add_options(parser)


@hookimpl
def despina_configure(settings: argparse.Namespace, stash: Stash) -> None:
    """Store the :class:`GrpcOptions`; ValueError for malformed
    ``--grpc-restricted-protocol`` values and TLS without files."""
    stash[GRPC_OPTIONS] = GrpcOptions.from_namespace(settings)


@hookimpl
def despina_frontends() -> list[type[Any]]:
    from despina_frontend_grpc.frontend import GrpcFrontend

    return [GrpcFrontend]


@hookimpl
def despina_serving_processes(flags: argparse.Namespace, count: int) -> Any:
    """Every serving process binds --grpc-port with --reuse-grpc-port; port 0 is refused."""
    from despina import SharedPort

    return SharedPort.of(
        flags.allow_grpc, flags.grpc_port, "--grpc-port", "--reuse-grpc-port", count
    )
