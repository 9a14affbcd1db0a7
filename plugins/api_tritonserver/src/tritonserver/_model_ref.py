"""What requests and responses know of their model (:class:`ModelRef`) and models of
their server (:class:`ServerRef`), so that no module imports one that imports it."""

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


class ServerRef(Protocol):
    """A :class:`~tritonserver.Server`, as models use it."""

    def _started(self) -> RunningServer: ...
