"""Entry point of the Python backend: cheap to import (the backend loads on first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from despina import hookimpl

if TYPE_CHECKING:
    from despina import Backend


@hookimpl
def despina_backends() -> list[type[Backend]]:
    """The ``python`` backend (``model.py`` files written for Triton's Python backend)."""
    from despina_backend_python.server.backend import PythonBackend

    return [PythonBackend]
