"""Entry-point module: the Vertex AI frontend's flags (tritonserver's, taken over from the
core's inert list, with their ``AIP_*`` defaults) and its frontend class."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from despina import hookimpl, triton_bool

if TYPE_CHECKING:
    from despina import Stash

DEFAULT_PORT = 8080
DEFAULT_THREAD_COUNT = 8


def prediction_mode() -> bool:
    """Whether Vertex AI runs this container for predictions (``AIP_MODE=PREDICTION``)."""
    return os.environ.get("AIP_MODE", "") == "PREDICTION"


@hookimpl(trylast=True)  # after the HTTP and gRPC plugins: it changes their defaults
def despina_addoption(parser: argparse.ArgumentParser) -> None:
    port = os.environ.get("AIP_HTTP_PORT", str(DEFAULT_PORT))
    group = parser.add_argument_group("Vertex AI frontend (despina-frontend-vertex-ai)")
    group.add_argument(
        "--allow-vertex-ai",
        type=triton_bool,
        default=prediction_mode(),
        metavar="BOOL",
        help="serve Vertex AI's prediction and health routes (AIP_PREDICT_ROUTE, "
        "AIP_HEALTH_ROUTE) on --vertex-ai-port (default: true if AIP_MODE=PREDICTION, "
        "false otherwise)",
    )
    group.add_argument(
        "--vertex-ai-port",
        type=int,
        default=int(port),
        metavar="INT",
        help="port of the Vertex AI routes (default: AIP_HTTP_PORT if set, 8080 otherwise)",
    )
    group.add_argument(
        "--vertex-ai-thread-count",
        type=int,
        default=DEFAULT_THREAD_COUNT,
        metavar="INT",
        help="accepted for tritonserver command lines: Vertex AI requests are served on "
        f"the server's event loop (default: {DEFAULT_THREAD_COUNT})",
    )
    group.add_argument(
        "--vertex-ai-default-model",
        default="",
        metavar="NAME",
        help="the model the prediction route runs (default: the repository's only model)",
    )
    group.add_argument(
        "--vertex-ai-address",
        default="0.0.0.0",
        metavar="ADDR",
        help="address the Vertex AI routes bind (Despina; default: 0.0.0.0, "
        "tritonserver's fixed one)",
    )
    if prediction_mode():
        # as tritonserver: on Vertex AI the HTTP and gRPC ports are off unless asked for
        parser.set_defaults(allow_http=False, allow_grpc=False)


@hookimpl
def despina_configure(settings: argparse.Namespace, stash: Stash) -> None:
    from despina_frontend_vertex_ai.options import VERTEX_OPTIONS, VertexOptions

    stash[VERTEX_OPTIONS] = VertexOptions.from_namespace(settings)


@hookimpl
def despina_frontends() -> list[type[Any]]:
    from despina_frontend_vertex_ai.frontend import VertexAiFrontend

    return [VertexAiFrontend]


@hookimpl
def despina_serving_processes(flags: argparse.Namespace, count: int) -> None:
    """Refused with ``--serving-processes`` above 1: this frontend's port is not shared."""
    from despina import refuse_unshared_port

    refuse_unshared_port(
        flags.allow_vertex_ai, "--allow-vertex-ai", count, "use --serving-processes 1"
    )
