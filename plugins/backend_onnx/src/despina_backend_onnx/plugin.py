"""Entry-point module: registers the ONNX Runtime backend (imports no onnxruntime)."""

from __future__ import annotations

from despina import Backend, hookimpl

from despina_backend_onnx.backend import OnnxBackend


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [OnnxBackend]
