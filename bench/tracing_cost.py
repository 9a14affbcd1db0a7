"""Per-request cost of tracing: tracing off, level TIMESTAMPS at rate 1000 and at rate 1.

Three ``despina serve`` processes (the in-process ``bench`` add_sub backend) run at once,
one per configuration; perf_analyzer (concurrency 1, a few seconds per point) visits them
in interleaved rounds, so a noisy shared host shifts every configuration alike. Prints a
Markdown table of the median latency and throughput per configuration and protocol.

    .venv/bin/python bench/tracing_cost.py [--rounds 2] [--seconds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERF_ANALYZER = os.environ.get("PERF_ANALYZER", str(ROOT.parent / "shared/tools/perf_analyzer"))
CONFIGS = {
    "off": [],
    "rate=1000": ["--trace-config=level=TIMESTAMPS", "--trace-config=rate=1000"],
    "rate=1": ["--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"],
}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(name: str, flags: list[str], folder: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """A server for one configuration; its trace file rotates every 1000 traces."""
    http, grpc = free_port(), free_port()
    trace = [f"--trace-config=triton,file={folder / name}.json"] if flags else []
    command = [
        sys.executable,
        "-m",
        "despina",
        "serve",
        "--plugin=bench_backend",
        f"--model-repository={ROOT / 'bench/model_repository'}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        "--allow-metrics=false",
        *flags,
        *trace,
        "--trace-config=triton,log-frequency=1000",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bench"))
    log = (folder / f"{name}.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1):
                return process, http, grpc
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"server '{name}' did not start: see {folder / name}.log")


def measure(port: int, protocol: str, seconds: float) -> tuple[float, float]:
    """(average latency in µs, throughput per second) of one perf_analyzer point."""
    command = [
        PERF_ANALYZER,
        "-m",
        "add_sub",
        "-u",
        f"127.0.0.1:{port}",
        "-i",
        protocol,
        "--concurrency-range",
        "1",
        "-p",
        str(int(seconds * 1000)),
        "-r",
        "3",
        "-s",
        "1000",
        "--shape",
        "INPUT0:1,16",
        "--shape",
        "INPUT1:1,16",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    output = done.stdout
    if done.returncode:
        raise RuntimeError(f"perf_analyzer failed: {output[-1000:]}{done.stderr[-1000:]}")
    throughput = re.findall(r"Throughput: ([\d.]+) infer/sec", output)[-1]
    latency = re.findall(r"Avg latency: (\d+) usec", output)[-1]
    return float(latency), float(throughput)


async def in_process(rounds: int, count: int, folder: Path) -> dict[str, float]:
    """Median µs per request of the core's path alone (what a frontend does: sample when
    the tracer is active, submit, wait, release), one server switched between the
    configurations through the trace extension, interleaved."""
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_backend
    import numpy as np
    from despina.inference.request import InferenceRequest
    from despina.serving.server import Server

    server = Server.from_args(
        [
            f"--model-repository={ROOT / 'bench/model_repository'}",
            f"--trace-config=triton,file={folder / 'in_process'}.json",
            "--trace-config=triton,log-frequency=1000",
        ],
        plugins=[bench_backend],
    )
    await server.start()
    data = np.ones((1, 16), np.float32)
    settings = {
        "off": {"trace_level": ["OFF"]},
        "rate=1000": {"trace_level": ["TIMESTAMPS"], "trace_rate": "1000"},
        "rate=1": {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"},
    }
    samples: dict[str, list[float]] = {name: [] for name in settings}
    tracer = server.tracer
    for _ in range(rounds):
        for name, changes in settings.items():
            tracer.update(changes)
            start = time.perf_counter()
            for _ in range(count):
                request = InferenceRequest("add_sub", {"INPUT0": data, "INPUT1": data})
                if tracer.active:
                    request.trace = tracer.sample("add_sub")
                await server.infer(request)
                if request.trace is not None:
                    request.trace.release()
            samples[name].append((time.perf_counter() - start) / count * 1e6)
    await server.stop()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=1.0)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tracing_cost"))
    servers = {name: start(name, flags, folder) for name, flags in CONFIGS.items()}
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for _ in range(options.rounds):
            for protocol in ("http", "grpc"):
                for name, (_, http, grpc) in servers.items():
                    port = http if protocol == "http" else grpc
                    points.setdefault((name, protocol), []).append(
                        measure(port, protocol, options.seconds)
                    )
    finally:
        for process, _, _ in servers.values():
            process.terminate()
            process.wait(30)
    print("| configuration | protocol | median latency (µs) | vs off (µs) | median infer/s |")
    print("| --- | --- | ---: | ---: | ---: |")
    for protocol in ("http", "grpc"):
        base = statistics.median(p[0] for p in points[("off", protocol)])
        for name in CONFIGS:
            rows = points[(name, protocol)]
            latency = statistics.median(p[0] for p in rows)
            rate = statistics.median(p[1] for p in rows)
            print(f"| {name} | {protocol} | {latency:.0f} | {latency - base:+.0f} | {rate:.0f} |")
    core = asyncio.run(in_process(options.rounds * 5, 5000, folder))
    print("\n| configuration | in-process core path (µs/request) | vs off (µs) |")
    print("| --- | ---: | ---: |")
    for name, value in core.items():
        print(f"| {name} | {value:.2f} | {value - core['off']:+.2f} |")
    written = len(list(folder.glob("*.json*")))
    print(
        f"\n{options.rounds} rounds x {options.seconds:g} s per perf_analyzer point; "
        f"{written} trace files written"
    )


if __name__ == "__main__":
    main()
