"""Entry-point module: registers the OpenVINO backend (imports no openvino)."""

from __future__ import annotations

from despina import Backend, hookimpl

from despina_backend_openvino.backend import OpenVinoBackend


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [OpenVinoBackend]
