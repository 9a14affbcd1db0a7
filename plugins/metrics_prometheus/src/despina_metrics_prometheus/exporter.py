"""The exporter: ``GET /metrics`` on ``--metrics-address:--metrics-port``, served by the
HTTP frontend's listener machinery on the server's event loop (so statistics are read
without locks), or with ``--metrics-on-http-port`` on the HTTP port beside the v2 routes
(``despina_http_routes``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, ClassVar, cast

from despina import AddressInUse, StashKey
from despina_frontend_http import (
    Request,
    Response,
    Route,
    Router,
    RouterListener,
    serve_router,
)

from despina_metrics_prometheus.collector import StatsCollector
from despina_metrics_prometheus.cpu import CpuSampler
from despina_metrics_prometheus.exposition import CONTENT_TYPE, render
from despina_metrics_prometheus.gpu import gpu_sampler
from despina_metrics_prometheus.options import EXPORTER_OPTIONS

if TYPE_CHECKING:
    from despina import FrontendHost, MetricsHost

log = logging.getLogger("despina.metrics")

PATH = "/metrics"
#: The started exporter, for the HTTP port's routes (:func:`http_port_routes`).
EXPORTER: StashKey[PrometheusExporter] = StashKey("despina-metrics-prometheus-exporter")


class PrometheusExporter:
    """``name = "prometheus"``; serves nothing when ``--allow-metrics=false``.

    ``--metrics-port 0`` binds an ephemeral port; :attr:`port` is the port bound (None
    with ``--metrics-on-http-port``).
    """

    name: ClassVar[str] = "prometheus"

    def __init__(self, host: MetricsHost) -> None:
        self.host = host
        #: The port :meth:`start` bound; None before, and when no port of its own serves.
        self.port: int | None = None
        self._listener: RouterListener | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.options = host.stash[EXPORTER_OPTIONS]
        self.cpu = CpuSampler() if self.options.allow_cpu_metrics else None
        #: NVML readings of the server's GPUs (None: off, or no NVML / GPU).
        self.gpu = gpu_sampler(host.gpus) if self.options.allow_gpu_metrics else None
        self.collector = StatsCollector(host, self.options.metrics, self.cpu, self.gpu)

    @property
    def routes(self) -> list[Route]:
        """``GET /metrics`` (and ``HEAD``, its head alone), the page in Triton's format."""
        return [Route("GET", PATH, self._metrics), Route("HEAD", PATH, self._metrics)]

    async def start(self) -> None:
        """Serve ``/metrics`` (bind its port unless ``--metrics-on-http-port``); OSError
        when the port cannot be bound."""
        options = self.options
        if not options.allow_metrics:
            return
        self.host.stash[EXPORTER] = self  # the HTTP port's /metrics, metrics_page()
        if not options.on_http_port:
            # The server's metrics host is its data plane, which is the frontend host
            # the listener machinery times requests and charges bodies with.
            host = cast("FrontendHost", self.host)
            try:
                self._listener = await serve_router(
                    Router(self.routes), host, options.address, options.port
                )
            except AddressInUse as exc:
                raise AddressInUse(exc.address, "Metrics") from None
            self.port = self._listener.port
            log.info("Started Metrics Service at %s:%d", options.address, self.port)
        if self.cpu is not None or self.gpu is not None:
            self._sampler = asyncio.create_task(self._sample(options.interval_ms / 1000))

    async def _metrics(self, request: Request) -> Response:
        return Response(200, {"Content-Type": CONTENT_TYPE}, render(self.collector.collect()))

    async def _sample(self, interval_s: float) -> None:
        """Refresh the CPU and GPU readings every ``--metrics-interval-ms``."""
        while True:
            await asyncio.sleep(interval_s)
            if self.cpu is not None:
                self.cpu.sample()
            if self.gpu is not None:
                self.gpu.sample()

    async def stop(self) -> None:
        """Stop sampling and serving."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None


def http_port_routes(host: FrontendHost) -> list[Route]:
    """The routes to add to the HTTP port: ``/metrics`` with ``--metrics-on-http-port``
    (and metrics allowed), else none."""
    if EXPORTER not in host.stash or not host.stash[EXPORTER].options.on_http_port:
        return []
    return host.stash[EXPORTER].routes


def metrics_page(host: FrontendHost) -> Response | None:
    """The ``/metrics`` page (Triton's format) of the server's started exporter, for
    another frontend that serves it (Vertex AI's ``metrics`` redirect); None while
    metrics are off."""
    if EXPORTER not in host.stash:
        return None
    collected = host.stash[EXPORTER].collector.collect()
    return Response(200, {"Content-Type": CONTENT_TYPE}, render(collected))
