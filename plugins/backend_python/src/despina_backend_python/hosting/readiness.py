"""A model's own ``is_ready()`` (Triton 2.67+), read as Triton's stub reads it, wherever
the model runs."""

from __future__ import annotations

from typing import Any


def defines_is_ready(model: Any) -> bool:
    """Whether the model has ``is_ready`` (else it is ready while its instance is healthy,
    and no check calls into it)."""
    return hasattr(model, "is_ready")


def readiness_of(value: Any) -> bool:
    """What ``is_ready()`` returned (awaited, when it was a coroutine): a ``bool``, else
    TypeError with Triton's text."""
    if not isinstance(value, bool):
        raise TypeError("is_ready() must return a boolean value")
    return value
