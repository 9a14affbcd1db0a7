"""Despina's gRPC frontend: Triton's ``inference.GRPCInferenceService`` served by
Despina's own HTTP/2 server.

The public API, for hosts serving the service from their own gRPC server (the Ray Serve
deployment): the servicer (:class:`InferenceServicer`) over an :class:`Inference`, the
:class:`ServicerContext` a host gives it, the :class:`StatusCode` its ``abort`` takes, and
the stash key of the frontend's settings (:data:`GRPC_OPTIONS`). Every other module is
internal. Names load on first use; no module of the plugin imports grpcio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public name -> the module defining it.
_EXPORTS: dict[str, str] = {
    "GRPC_OPTIONS": "despina_frontend_grpc.options",
    "Inference": "despina_frontend_grpc.infer",
    "InferenceServicer": "despina_frontend_grpc.service",
    "ServicerContext": "despina_frontend_grpc.servicer_context",
    "StatusCode": "despina_frontend_grpc.status",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'despina_frontend_grpc' has no attribute '{name}'")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # the same names, for type checkers
    from despina_frontend_grpc.infer import Inference as Inference
    from despina_frontend_grpc.options import GRPC_OPTIONS as GRPC_OPTIONS
    from despina_frontend_grpc.service import InferenceServicer as InferenceServicer
    from despina_frontend_grpc.servicer_context import ServicerContext as ServicerContext
    from despina_frontend_grpc.status import StatusCode as StatusCode
