"""Per-request cost of Triton's latency histograms and summaries (``--metrics-config``).

Three configurations, interleaved round by round so a noisy shared host shifts them
alike: metrics as by default (counters only), ``histogram_latencies=true``, and
histograms plus ``summary_latencies=true``.

- end to end: one ``despina serve`` process per configuration (the in-process ``bench``
  add_sub backend), perf_analyzer over gRPC at concurrency 1, ``--seconds`` per point;
- the core's path alone: one in-process Server per configuration, ``server.infer`` in a
  loop (no protocol, no network), microseconds per request.

    .venv/bin/python bench/latency_metrics_cost.py [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tracing_cost import free_port, measure  # perf_analyzer, one point

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = f"--model-repository={ROOT / 'bench/model_repository'}"
LOOPBACK_ANY_PORT = [
    f"--{part}-{key}={value}"
    for part in ("http", "grpc", "metrics")
    for key, value in (("address", "127.0.0.1"), ("port", 0))
]
DEFAULT = "counters (default)"
#: The core-path loop: many short interleaved rounds (the host is shared and noisy).
CORE_ROUNDS, CORE_REQUESTS = 60, 500
CONFIGS = {
    DEFAULT: [],
    "histogram_latencies": ["--metrics-config=histogram_latencies=true"],
    "histograms + summaries": [
        "--metrics-config=histogram_latencies=true",
        "--metrics-config=summary_latencies=true",
    ],
}


def start(name: str, flags: list[str], folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A server for one configuration; returns it and its gRPC port."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        *(sys.executable, "-m", "despina", "serve", "--plugin=bench_backend", REPOSITORY),
        *(f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"),
        "--metrics-address=127.0.0.1",
        *flags,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bench"))
    log = (folder / f"{len(list(folder.iterdir()))}.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1):
                return process, grpc
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"server '{name}' did not start: see {log.name}")


async def core_path(rounds: int, count: int) -> dict[str, tuple[float, float]]:
    """Per configuration: (median µs per ``server.infer``, median of its difference to the
    default within each round), the configurations interleaved round by round."""
    import bench_backend
    import numpy as np
    from despina.inference.request import InferenceRequest
    from despina.serving.server import Server

    servers = {}
    for name, flags in CONFIGS.items():
        server = Server.from_args(
            [REPOSITORY, *LOOPBACK_ANY_PORT, "--allow-cpu-metrics=false", *flags],
            plugins=[bench_backend],
        )
        await server.start()
        servers[name] = server
    data = np.ones((1, 16), np.float32)
    samples: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(rounds):
        for name, server in servers.items():
            began = time.perf_counter()
            for _ in range(count):
                await server.infer(InferenceRequest("add_sub", {"INPUT0": data, "INPUT1": data}))
            samples[name].append((time.perf_counter() - began) / count * 1e6)
    for server in servers.values():
        await server.stop()
    base = samples[DEFAULT]
    return {
        name: (
            statistics.median(values),
            statistics.median(v - b for v, b in zip(values, base, strict=True)),
        )
        for name, values in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="latency_metrics_cost"))
    servers = {name: start(name, flags, folder) for name, flags in CONFIGS.items()}
    points: dict[str, list[tuple[float, float]]] = {name: [] for name in CONFIGS}
    try:
        for _ in range(options.rounds):
            for name, (_, grpc) in servers.items():
                # measure() runs 3 windows of its argument: one point lasts --seconds
                points[name].append(measure(grpc, "grpc", options.seconds / 3))
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(30)
    base = statistics.median(p[0] for p in points[DEFAULT])
    print("| configuration | median latency (µs) | vs default (µs) | median infer/s | runs (µs) |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, rows in points.items():
        latency = statistics.median(p[0] for p in rows)
        rate = statistics.median(p[1] for p in rows)
        runs = ", ".join(f"{p[0]:.0f}" for p in rows)
        print(f"| {name} | {latency:.0f} | {latency - base:+.0f} | {rate:.0f} | {runs} |")
    core = asyncio.run(core_path(CORE_ROUNDS, CORE_REQUESTS))
    print("\n| configuration | core path (µs/request) | vs default, paired by round (µs) |")
    print("| --- | ---: | ---: |")
    for name, (value, difference) in core.items():
        print(f"| {name} | {value:.2f} | {difference:+.2f} |")
    print(
        f"\n{options.rounds} rounds x {options.seconds:g} s per perf_analyzer point (gRPC, "
        f"concurrency 1); core path: {CORE_ROUNDS} rounds x {CORE_REQUESTS} requests"
    )


if __name__ == "__main__":
    main()
