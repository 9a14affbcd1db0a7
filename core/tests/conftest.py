"""Shared pieces of the core's tests: toy model configs and a request builder."""

from __future__ import annotations

import numpy as np
from despina.inference import InferenceRequest

TOY_CONFIG = """
backend: "toy"
max_batch_size: {mbs}
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }}
]
{extra}
"""


def toy_config(mbs: int = 0, extra: str = "") -> str:
    """A toy model's config.pbtxt text."""
    return TOY_CONFIG.format(mbs=mbs, extra=extra)


def toy_request(
    model: str, batch: int | None = None, value: float = 1.0, **kwargs: object
) -> InferenceRequest:
    """INPUT0 = value, INPUT1 = 1, shape [4] or [batch, 4]."""
    shape = (4,) if batch is None else (batch, 4)
    return InferenceRequest(
        model,
        {
            "INPUT0": np.full(shape, value, np.float32),
            "INPUT1": np.ones(shape, np.float32),
        },
        **kwargs,  # type: ignore[arg-type]
    )
