"""Entry-point module: registers the TensorRT backend (imports no tensorrt or cupy)."""

from __future__ import annotations

from despina import Backend, hookimpl

from despina_backend_trt.backend import TensorRTBackend


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [TensorRTBackend]
