"""Triton's ``model_config.proto`` (``inference.ModelConfig`` ...), as tritonclient's
``model_config_pb2`` defines it; see :mod:`despina.triton_proto`."""

from __future__ import annotations

from typing import Any

from despina.triton_proto.files import schema_names

globals().update(schema_names("model_config_pb2.py", "model_config.proto"))


def __getattr__(name: str) -> Any:
    """Names the schema does not define (the defined ones are module globals)."""
    raise AttributeError(f"model_config.proto defines no {name!r}")
