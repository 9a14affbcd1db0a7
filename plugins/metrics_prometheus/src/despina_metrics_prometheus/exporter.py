"""The exporter: ``GET /metrics`` on ``--metrics-address:--metrics-port`` (aiohttp, on the
server's event loop, so statistics are read without locks)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, ClassVar

from aiohttp import web

from despina_metrics_prometheus.collector import StatsCollector
from despina_metrics_prometheus.cpu import CpuSampler
from despina_metrics_prometheus.exposition import CONTENT_TYPE, render
from despina_metrics_prometheus.gpu import gpu_sampler
from despina_metrics_prometheus.options import EXPORTER_OPTIONS

if TYPE_CHECKING:
    from despina import MetricsHost

log = logging.getLogger("despina.metrics")


class PrometheusExporter:
    """``name = "prometheus"``; serves nothing when ``--allow-metrics=false``.

    ``--metrics-port 0`` binds an ephemeral port; :attr:`port` is the port bound.
    """

    name: ClassVar[str] = "prometheus"

    def __init__(self, host: MetricsHost) -> None:
        self.host = host
        #: The port :meth:`start` bound; None before, and when metrics are not served.
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.options = host.stash[EXPORTER_OPTIONS]
        self.cpu = CpuSampler() if self.options.allow_cpu_metrics else None
        #: NVML readings of the server's GPUs (None: off, or no NVML / GPU).
        self.gpu = gpu_sampler(host.gpus) if self.options.allow_gpu_metrics else None
        self.collector = StatsCollector(host, self.options.metrics, self.cpu, self.gpu)

    async def start(self) -> None:
        """Bind and serve ``/metrics``; OSError when the port cannot be bound."""
        options = self.options
        if not options.allow_metrics:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, options.address, options.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        if self.cpu is not None or self.gpu is not None:
            self._sampler = asyncio.create_task(self._sample(options.interval_ms / 1000))
        log.info("Started Metrics Service at %s:%d", options.address, self.port)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=render(self.collector.collect()), headers={"Content-Type": CONTENT_TYPE}
        )

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
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None
