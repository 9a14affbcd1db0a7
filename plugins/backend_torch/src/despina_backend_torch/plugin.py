"""Entry-point module: registers the PyTorch backend (imports no torch)."""

from __future__ import annotations

from despina import Backend, hookimpl

from despina_backend_torch.backend import TorchBackend


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [TorchBackend]
