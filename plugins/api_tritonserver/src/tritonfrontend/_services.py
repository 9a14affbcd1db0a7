"""The frontends Triton's ``tritonfrontend`` starts over an in-process server —
:class:`KServeHttp`, :class:`KServeGrpc`, :class:`Metrics` — as Despina's HTTP, gRPC and
Prometheus plugins started over the same Despina server
(:meth:`despina.Server.start_frontend`)."""

from __future__ import annotations

from types import TracebackType
from typing import Any, ClassVar

import tritonserver

from tritonfrontend._options import Grpc_compression_level, GrpcOptions, HttpOptions, MetricsOptions


class _Service:
    """One frontend over a started server: :meth:`start`, :meth:`stop`, or ``with``."""

    #: The Despina frontend or exporter started, by its plugin's name.
    plugin: ClassVar[str]
    Options: ClassVar[type[Any]]

    def __init__(self, server: tritonserver.Server, options: Any = None) -> None:
        """InvalidArgumentError for options not of this frontend's Options class, or a
        server not started."""
        if options is None:
            options = self.Options()
        if not isinstance(options, self.Options):
            raise tritonserver.InvalidArgumentError(
                "Incorrect type for options. options argument must be of type "
                f"{type(self).__name__}.Options"
            )
        self._running = server._started()
        self._options = options
        self._component: Any = None

    def start(self) -> None:
        """Listen; AlreadyExistsError when started already, UnavailableError when the
        port cannot be bound, UnsupportedError when the Despina plugin is not installed."""
        if self._component is not None:
            raise tritonserver.AlreadyExistsError("server is already running.")
        try:
            self._component = self._running.start_component(self.plugin, self._options.args())
        except ValueError as exc:
            raise tritonserver.UnsupportedError(str(exc)) from None
        except OSError as exc:
            raise tritonserver.UnavailableError(f"failed to start: {exc}") from None

    def stop(self) -> None:
        """Stop listening, answer the requests in flight, close the connections
        (Despina's graceful stop; Triton's leaves requests in flight unanswered); no-op
        when not started."""
        component, self._component = self._component, None
        if component is not None:
            self._running.stop_component(component)

    def __enter__(self) -> _Service:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class KServeHttp(_Service):
    """KServe v2 HTTP/REST with Triton's extensions (despina-frontend-http)."""

    plugin = "http"
    Options = HttpOptions


class KServeGrpc(_Service):
    """KServe v2 gRPC with Triton's extensions (despina-frontend-grpc)."""

    plugin = "grpc"
    Options = GrpcOptions
    Grpc_compression_level = Grpc_compression_level


class Metrics(_Service):
    """Prometheus metrics with Triton's names (despina-metrics-prometheus)."""

    plugin = "prometheus"
    Options = MetricsOptions
