"""The SageMaker frontend's settings, read once (``despina_configure``): its flags, and the
environment variables tritonserver's SageMaker server reads (``SAGEMAKER_TRITON_*``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass

from despina import StashKey

#: Where ``/invocations`` goes, by ``SAGEMAKER_TRITON_INFERENCE_TYPE``.
INFERENCE_TYPES = ("infer", "generate", "generate_stream")
#: The model ``/invocations`` runs without ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME``
#: (tritonserver's placeholder, answered 404 as an unknown model).
UNSPECIFIED_MODEL = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"


@dataclass(frozen=True)
class SageMakerOptions:
    """``--allow-sagemaker``, ``--sagemaker-*`` and ``SAGEMAKER_TRITON_*``, typed and checked."""

    allow: bool
    port: int
    address: str
    #: ``--sagemaker-safe-port-range``: (first, last), or None.
    safe_port_range: tuple[int, int] | None
    thread_count: int
    #: ``--sagemaker-mme-root``: a multi-model load's url is ``<root>/<hash>/model[/<sub>]``.
    mme_root: str
    #: ``SAGEMAKER_TRITON_PING_MODE``: ``live`` answers /ping with liveness, anything else
    #: with readiness (default ``ready``).
    ping_mode: str
    #: ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME``: the model ``/invocations`` runs.
    default_model: str
    #: ``SAGEMAKER_TRITON_INFERENCE_TYPE``: infer, generate or generate_stream.
    inference_type: str

    @classmethod
    def from_namespace(
        cls, flags: argparse.Namespace, environ: Mapping[str, str] | None = None
    ) -> SageMakerOptions:
        """Read and check the flags and ``environ`` (default: the process's); ValueError
        with tritonserver's texts for a bad value or a port outside the safe range."""
        env = os.environ if environ is None else environ
        safe_range = None
        if flags.sagemaker_safe_port_range is not None:
            safe_range = parse_port_range(flags.sagemaker_safe_port_range)
        inference_type = env.get("SAGEMAKER_TRITON_INFERENCE_TYPE", "infer")
        options = cls(
            allow=bool(flags.allow_sagemaker),
            port=int(flags.sagemaker_port),
            address=str(flags.sagemaker_address),
            safe_port_range=safe_range,
            thread_count=int(flags.sagemaker_thread_count),
            mme_root=os.path.normpath(flags.sagemaker_mme_root),
            ping_mode=env.get("SAGEMAKER_TRITON_PING_MODE", "ready"),
            default_model=env.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", UNSPECIFIED_MODEL),
            inference_type=inference_type,
        )
        if options.allow:
            if inference_type not in INFERENCE_TYPES:
                raise ValueError(
                    f"Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{inference_type}': must be "
                    "one of: infer, generate, generate_stream"
                )
            check_ports(options, flags)
        return options


def parse_port_range(text: str) -> tuple[int, int]:
    """``<first>-<second>``; ValueError (tritonserver's text) otherwise."""
    first, sep, second = text.partition("-")
    if not sep:
        raise ValueError(
            "Cannot parse pair option due to incorrect number of inputs."
            "--<pair option> argument requires format <first>-<second>. "
            f"Found: {text}"
        )
    try:
        return int(first), int(second)
    except ValueError:
        raise ValueError(f"--sagemaker-safe-port-range: invalid port range '{text}'") from None


def _others(flags: argparse.Namespace) -> list[tuple[str, str, int]]:
    """The other listeners tritonserver checks (name, address, port), where enabled (a
    flag of a plugin not installed reads as disabled)."""
    found = []
    for name, allow, address, port in (
        ("HTTP", "allow_http", "http_address", "http_port"),
        ("GRPC", "allow_grpc", "grpc_address", "grpc_port"),
        ("metrics", "allow_metrics", "metrics_address", "metrics_port"),
    ):
        if getattr(flags, allow, None) and getattr(flags, port, None) is not None:
            bound = str(getattr(flags, address, None) or "0.0.0.0")
            found.append((name, bound, int(getattr(flags, port))))
    return found


def check_ports(options: SageMakerOptions, flags: argparse.Namespace) -> None:
    """tritonserver's port checks for the SageMaker listener: every other one on its
    address inside ``--sagemaker-safe-port-range``, none on its port (port 0, an
    ephemeral one, collides with none)."""
    for name, address, port in _others(flags):
        if address != options.address:
            continue
        if options.safe_port_range is not None:
            first, last = options.safe_port_range
            if port != 0 and not first <= port <= last:
                raise ValueError(
                    f"The server cannot listen to {name} requests at port {port}, allowed "
                    f"port range is [{first}, {last}]"
                )
        if options.port != 0 and port == options.port:
            raise ValueError(
                f"The server cannot listen to SageMaker requests and {name} requests at the "
                f"same address and port {address}:{port}"
            )


#: Where the SageMaker frontend's options live in the server's stash.
SAGEMAKER_OPTIONS: StashKey[SageMakerOptions] = StashKey("despina-frontend-sagemaker")
