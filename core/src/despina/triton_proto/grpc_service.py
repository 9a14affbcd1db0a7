"""Triton's ``grpc_service.proto`` (``inference.ModelInferRequest`` ..., the
``inference.GRPCInferenceService`` descriptor), as tritonclient's ``service_pb2`` defines
it; see :mod:`despina.triton_proto`."""

from __future__ import annotations

from typing import Any

from despina.triton_proto import model_config  # noqa: F401  (the file it imports)
from despina.triton_proto.files import schema_names

globals().update(schema_names("service_pb2.py", "grpc_service.proto"))


def __getattr__(name: str) -> Any:
    """Names the schema does not define (the defined ones are module globals)."""
    raise AttributeError(f"grpc_service.proto defines no {name!r}")
