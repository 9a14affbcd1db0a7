"""What requests and responses know of their model (:class:`ModelRef`), so that they need
not import :mod:`tritonserver._model`, which imports them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tritonserver._running import RunningServer


class ModelRef(Protocol):
    """A :class:`~tritonserver.Model`, as requests and responses use it."""

    name: str
    version: int
    _running: RunningServer

    def _answered_by(self, version: int) -> ModelRef: ...
