"""Every tritonserver 2.71 flag, so ``despina serve`` takes a tritonserver command line.

Flags Despina implements are added by the core (:mod:`despina.serving.flags`) or by the plugin that
implements them (``despina_addoption``). Every flag of :data:`TRITON_FLAGS` that no one
added is registered as *inert*: accepted with tritonserver's value syntax, and if given,
the server starts with a one-line warning naming the flag and why it has no effect.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

#: Parses tritonserver's boolean syntax.
_TRUE = {"true", "1", "on", "yes", "y", "t"}
_FALSE = {"false", "0", "off", "no", "n", "f"}


def triton_bool(value: str) -> bool:
    """``true/false/1/0/on/off/yes/no`` (case-insensitive), as tritonserver accepts."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value '{value}'")


def gpu_limit(value: str) -> str:
    """``<device ID>:<fraction>`` of ``--model-load-gpu-limit``, checked with
    tritonserver's texts (``expects device ID >= 0, got -1``)."""
    device, sep, fraction = value.partition(":")
    try:
        device_id, limit = int(device), float(fraction)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid value '{value}': expects <device ID>:<fraction>"
        ) from None
    if not sep:
        raise argparse.ArgumentTypeError(f"invalid value '{value}': expects <device ID>:<fraction>")
    if device_id < 0:
        raise argparse.ArgumentTypeError(f"expects device ID >= 0, got {device_id}")
    if not 0.0 <= limit <= 1.0:
        raise argparse.ArgumentTypeError(
            f"expects limit fraction to be in range [0.0, 1.0], got {limit:f}"
        )
    return value


_HTTP = "the HTTP frontend plugin (despina-frontend-http) is not installed"
_GRPC = "the gRPC frontend plugin (despina-frontend-grpc) is not installed"
_METRICS = "the metrics plugin (despina-metrics-prometheus) is not installed"
_NO_SAGEMAKER = "the SageMaker frontend plugin (despina-frontend-sagemaker) is not installed"
_NO_VERTEX = "the Vertex AI frontend plugin (despina-frontend-vertex-ai) is not installed"
_GRPC_THREADS = "the gRPC frontend serves calls on the event loop, without handler threads"
_GRPC_POOL = (
    "a streaming call's unsent responses are bounded in bytes (HTTP/2 flow control); "
    "a model's sends never wait for the client"
)
_CUDA_MEM = "Despina allocates no CUDA memory pools of its own; frameworks manage device memory"

#: flag -> (value type: a key of _TYPES or "none", repeatable, why inert)
TRITON_FLAGS: dict[str, tuple[str, bool, str]] = {
    "--model-namespacing": ("bool", False, "model namespacing is not supported yet"),
    "--model-config-name": ("str", False, "custom config names are not supported yet"),
    "--enable-peer-access": ("bool", False, "GPU peer access is left to the frameworks"),
    "--allow-http": ("bool", False, _HTTP),
    "--http-address": ("str", False, _HTTP),
    "--http-port": ("int", False, _HTTP),
    "--reuse-http-port": ("bool", False, _HTTP),
    "--http-header-forward-pattern": ("str", False, _HTTP),
    "--http-thread-count": ("int", False, _HTTP),
    "--http-max-input-size": ("int", False, _HTTP),
    "--http-restricted-api": ("str", True, _HTTP),
    "--allow-grpc": ("bool", False, _GRPC),
    "--grpc-address": ("str", False, _GRPC),
    "--grpc-port": ("int", False, _GRPC),
    "--reuse-grpc-port": ("bool", False, _GRPC),
    "--grpc-header-forward-pattern": ("str", False, _GRPC),
    "--grpc-infer-thread-count": ("int", False, _GRPC_THREADS),
    "--grpc-infer-allocation-pool-size": ("int", False, _GRPC),
    "--grpc-max-response-pool-size": ("int", False, _GRPC_POOL),
    "--grpc-use-ssl": ("bool", False, _GRPC),
    "--grpc-use-ssl-mutual": ("bool", False, _GRPC),
    "--grpc-server-cert": ("str", False, _GRPC),
    "--grpc-server-key": ("str", False, _GRPC),
    "--grpc-root-cert": ("str", False, _GRPC),
    "--grpc-infer-response-compression-level": ("str", False, _GRPC),
    "--grpc-keepalive-time": ("int", False, _GRPC),
    "--grpc-keepalive-timeout": ("int", False, _GRPC),
    "--grpc-keepalive-permit-without-calls": ("bool", False, _GRPC),
    "--grpc-http2-max-pings-without-data": ("int", False, _GRPC),
    "--grpc-http2-min-recv-ping-interval-without-data": ("int", False, _GRPC),
    "--grpc-http2-max-ping-strikes": ("int", False, _GRPC),
    "--grpc-max-connection-age": ("int", False, _GRPC),
    "--grpc-max-connection-age-grace": ("int", False, _GRPC),
    "--grpc-restricted-protocol": ("str", True, _GRPC),
    "--allow-sagemaker": ("bool", False, _NO_SAGEMAKER),
    "--sagemaker-port": ("int", False, _NO_SAGEMAKER),
    "--sagemaker-safe-port-range": ("str", False, _NO_SAGEMAKER),
    "--sagemaker-thread-count": ("int", False, _NO_SAGEMAKER),
    "--allow-vertex-ai": ("bool", False, _NO_VERTEX),
    "--vertex-ai-port": ("int", False, _NO_VERTEX),
    "--vertex-ai-thread-count": ("int", False, _NO_VERTEX),
    "--vertex-ai-default-model": ("str", False, _NO_VERTEX),
    "--allow-metrics": ("bool", False, _METRICS),
    "--allow-gpu-metrics": ("bool", False, _METRICS),
    "--allow-cpu-metrics": ("bool", False, _METRICS),
    "--metrics-address": ("str", False, _METRICS),
    "--metrics-port": ("int", False, _METRICS),
    "--metrics-interval-ms": ("float", False, _METRICS),
    "--metrics-config": ("str", True, _METRICS),
    "--repoagent-directory": ("str", False, "repository agents are Python plugins"),
    "--cache-directory": ("str", False, "caches are Python plugins, not shared libraries"),
    "--pinned-memory-pool-byte-size": (
        "int",
        False,
        "Despina keeps tensors in ordinary host memory",
    ),
    "--cuda-memory-pool-byte-size": ("str", True, _CUDA_MEM),
    "--cuda-virtual-address-size": ("str", True, _CUDA_MEM),
    "--buffer-manager-thread-count": ("int", False, "Despina has no buffer manager threads"),
    "--host-policy": ("str", True, "host policies (NUMA, CPU pinning) are not supported"),
    "--model-load-gpu-limit": (
        "gpu_limit",
        True,
        "GPU memory limits on loading are not supported",
    ),
}

_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": triton_bool,
    "gpu_limit": gpu_limit,
}


def add_inert_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Register every flag of TRITON_FLAGS not yet defined; return {dest: reason}."""
    defined = set(parser._option_string_actions)
    inert: dict[str, str] = {}
    group = parser.add_argument_group(
        "tritonserver flags without effect in Despina",
        "accepted so tritonserver command lines run unchanged; each one given is warned about",
    )
    for flag, (kind, repeatable, reason) in TRITON_FLAGS.items():
        if flag in defined:
            continue
        dest = flag.lstrip("-").replace("-", "_")
        group.add_argument(
            flag,
            dest=dest,
            type=_TYPES[kind],
            action="append" if repeatable else "store",
            default=None,
            metavar=kind.upper(),
            help=f"no effect: {reason}",
        )
        inert[dest] = f"--{dest.replace('_', '-')}: {reason}"
    return inert
