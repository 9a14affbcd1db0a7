"""Metrics of ``despina serve --serving-processes N`` (N > 1): one port, served by the
supervising process, the sum of the serving processes' pages.

Each serving process serves its own page on 127.0.0.1 at a port the supervisor chose for
it (free when chosen). A scrape of ``--metrics-address:--metrics-port`` reads every page
and answers one: the samples of one name and labels add (counters, the pending-request
gauge, histogram buckets, sums and counts, models' custom metrics), except the host's
readings (``nv_cpu_*``, ``nv_gpu_*``, ``nv_energy_consumption``: one process's) and
``nv_model_load_duration_secs`` (the longest). A serving process that does not answer
makes the scrape fail (503): a sum without it would be silently wrong. Summaries'
quantiles cannot be summed, so ``summary_latencies`` is refused with N > 1, and so is
``--metrics-on-http-port`` (each process's own page would answer).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from despina_metrics_prometheus.exposition import CONTENT_TYPE, format_number
from despina_metrics_prometheus.options import ExporterOptions

log = logging.getLogger("despina.metrics")

#: Seconds a serving process has to answer its page.
PAGE_TIMEOUT_S = 5.0
#: Families read once: the host's readings, the same in every process.
READ_ONCE = ("nv_cpu_", "nv_gpu_", "nv_energy_consumption")
#: Families whose answer is the largest value.
LARGEST = ("nv_model_load_duration_secs",)
#: The longest request head the supervisor's port reads.
HEAD_LIMIT = 64 * 1024


def _loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SummedMetrics:
    """The metrics plugin's part of ``--serving-processes``
    (:class:`despina.ServingProcessesPart`)."""

    def __init__(self, address: str, port: int, count: int) -> None:
        self.address = address
        self.port = port
        #: Where each serving process serves its own page (127.0.0.1).
        self.child_ports = [_loopback_port() for _ in range(count)]
        self._server: asyncio.Server | None = None

    @classmethod
    def of(cls, flags: argparse.Namespace, count: int) -> SummedMetrics | None:
        """The part for ``flags`` (None with metrics off); ValueError for what cannot be
        summed or served from one port."""
        options = ExporterOptions.from_namespace(flags)
        if not options.allow_metrics:
            return None
        refused = (
            (options.port == 0, "--metrics-port=0 (give it a port number)"),
            (options.on_http_port, "--metrics-on-http-port=true (use --metrics-port)"),
            (
                options.metrics.summary_latencies,
                "--metrics-config summary_latencies=true (quantiles cannot be summed)",
            ),
        )
        for given, what in refused:
            if given:
                raise ValueError(f"--serving-processes {count}: {what} is not supported")
        return cls(options.address, options.port, count)

    def child_flags(self, index: int) -> list[str]:
        return ["--metrics-address=127.0.0.1", f"--metrics-port={self.child_ports[index]}"]

    async def start(self) -> None:
        """Serve the summed page; OSError when the port cannot be bound."""
        self._server = await asyncio.start_server(
            self._serve, self.address, self.port, limit=HEAD_LIMIT
        )
        log.info("Started Metrics Service at %s:%d", self.address, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def page(self) -> bytes:
        """Every serving process's page, summed; OSError or TimeoutError when one does
        not answer."""
        pages = await asyncio.gather(*(_fetch(port) for port in self.child_ports))
        return sum_pages(pages).encode()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if method not in ("GET", "HEAD") or path.split("?")[0] != "/metrics":
                status, body, kind = "404 Not Found", b"not found\n", "text/plain"
            else:
                try:
                    status, body, kind = "200 OK", await self.page(), CONTENT_TYPE
                except (OSError, TimeoutError, ValueError) as exc:
                    log.error("metrics: a serving process did not answer: %s", exc)
                    body = f"a serving process did not answer its metrics: {exc}\n".encode()
                    status, kind = "503 Service Unavailable", "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + (body if method != "HEAD" else b"")
            )
            await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a client that went away or sent no HTTP request head
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _fetch(port: int) -> str:
    """The page a serving process serves on 127.0.0.1:``port``."""
    return await asyncio.wait_for(_get(port), PAGE_TIMEOUT_S)


async def _get(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        await writer.drain()
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        status = head.split(" ", 2)[1]
        if status != "200":
            raise ValueError(f"port {port} answered {status}")
        length = next(
            int(line.split(":", 1)[1])
            for line in head.split("\r\n")
            if line.lower().startswith("content-length:")
        )
        return (await reader.readexactly(length)).decode()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@dataclass
class _Family:
    comments: list[str] = field(default_factory=list)
    samples: dict[str, float] = field(default_factory=dict)


def sum_pages(pages: Sequence[str]) -> str:
    """One text exposition from several of the same format (:func:`render`'s): families
    and samples in first-seen order, values combined as the module says."""
    families: dict[str, _Family] = {}
    for page in pages:
        family, rule = families.setdefault("", _Family()), "sum"
        for line in page.splitlines():
            if line.startswith("# "):
                name = line.split(" ", 3)[2]
                family, rule = families.setdefault(name, _Family()), _rule(name)
                if line not in family.comments:
                    family.comments.append(line)
            elif line:
                key, value = line.rsplit(" ", 1)
                family.samples[key] = _combine(rule, family.samples.get(key), float(value))
    lines = []
    for family in families.values():
        lines.extend(family.comments)
        lines.extend(f"{key} {format_number(value)}" for key, value in family.samples.items())
    lines.append("")
    return "\n".join(lines)


def _rule(name: str) -> str:
    if name.startswith(READ_ONCE):
        return "once"
    return "largest" if name in LARGEST else "sum"


def _combine(rule: str, before: float | None, value: float) -> float:
    if before is None:
        return value
    if rule == "once":
        return before
    return max(before, value) if rule == "largest" else before + value
