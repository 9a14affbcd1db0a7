"""Entry-point module: the SageMaker frontend's flags (tritonserver's, taken over from the
core's inert list) and its frontend class. Cheap to import."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from despina import hookimpl, triton_bool

if TYPE_CHECKING:
    from despina import Stash

#: tritonserver's defaults: the SageMaker port and thread count.
DEFAULT_PORT = 8080
DEFAULT_THREAD_COUNT = 8
#: Where SageMaker puts the models of a multi-model endpoint (Triton's fixed path).
DEFAULT_MME_ROOT = "/opt/ml/models"


@hookimpl
def despina_addoption(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("SageMaker frontend (despina-frontend-sagemaker)")
    group.add_argument(
        "--allow-sagemaker",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="serve SageMaker's container API (/ping, /invocations, /models) on "
        "--sagemaker-port (default: false)",
    )
    group.add_argument(
        "--sagemaker-port",
        type=int,
        default=DEFAULT_PORT,
        metavar="INT",
        help=f"port of the SageMaker API (default: {DEFAULT_PORT}; 0: an ephemeral one)",
    )
    group.add_argument(
        "--sagemaker-safe-port-range",
        default=None,
        metavar="<INT>-<INT>",
        help="the ports every other listener on the SageMaker address must use; start-up "
        "fails otherwise, as tritonserver's (default: none)",
    )
    group.add_argument(
        "--sagemaker-thread-count",
        type=int,
        default=DEFAULT_THREAD_COUNT,
        metavar="INT",
        help="accepted for tritonserver command lines: SageMaker requests are served on "
        f"the server's event loop (default: {DEFAULT_THREAD_COUNT})",
    )
    group.add_argument(
        "--sagemaker-address",
        default="0.0.0.0",
        metavar="ADDR",
        help="address the SageMaker API binds (Despina; default: 0.0.0.0, tritonserver's "
        "fixed one)",
    )
    group.add_argument(
        "--sagemaker-mme-root",
        default=DEFAULT_MME_ROOT,
        metavar="PATH",
        help="the folder a multi-model load's url must lie in, as <PATH>/<hash>/model"
        f"[/<subdir>] (Despina; default: {DEFAULT_MME_ROOT}, tritonserver's fixed one)",
    )


@hookimpl
def despina_configure(settings: argparse.Namespace, stash: Stash) -> None:
    from despina_frontend_sagemaker.options import SAGEMAKER_OPTIONS, SageMakerOptions

    stash[SAGEMAKER_OPTIONS] = SageMakerOptions.from_namespace(settings)


@hookimpl
def despina_frontends() -> list[type[Any]]:
    from despina_frontend_sagemaker.frontend import SageMakerFrontend

    return [SageMakerFrontend]


@hookimpl
def despina_serving_processes(flags: argparse.Namespace, count: int) -> None:
    """Refused with ``--serving-processes`` above 1: this frontend's port is not shared."""
    from despina import refuse_unshared_port

    refuse_unshared_port(
        flags.allow_sagemaker, "--allow-sagemaker", count, "use --serving-processes 1"
    )
