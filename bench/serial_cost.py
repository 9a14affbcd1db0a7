"""What serving a request costs the server process's event loop, per protocol.

The thread that runs a server's event loop is the one resource no number of cores adds
to: a protocol's throughput on any machine is at most ``1 / (loop CPU per request)``. This
bench serves bench's in-process add_sub, drives it with perf_analyzer over HTTP and over
gRPC, and reads from ``/proc`` the CPU time of the server's main thread (its event loop),
of the whole server process and of its child processes, divided by the requests the
server counted in the same window (``/v2/models/add_sub/stats``). Busy polling is off
(``--busy-poll-us=0``) so CPU time is work, not spinning. It chose the serving stacks
Despina keeps (``bench/results/serial_cost.md``); run it before and after a change to the
request path to see the change's cost on the loop.

::

    flock /tmp/bench.lock python bench/serial_cost.py --rounds 3
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from run import PERF_ANALYZER, wait_ready

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")
FIRST_PORT = 19300
PROTOCOLS = ("http", "grpc")


@dataclass
class Server:
    """A running ``despina serve``; ``url`` is its port for ``protocol``."""

    protocol: str
    process: subprocess.Popen[bytes]
    http_port: int
    url: str


def start(protocol: str, slot: int) -> Server:
    """``despina serve`` of bench's add_sub on ports ``FIRST_PORT + 3 * slot`` .. ``+ 2``."""
    http, grpc, metrics = (FIRST_PORT + 3 * slot + i for i in range(3))
    command = [
        str(Path(sys.executable).parent / "despina"),
        "serve",
        "--plugin=bench_backend",
        f"--model-repository={HERE / 'model_repository'}",
        "--busy-poll-us=0",
        "--http-address=127.0.0.1",
        f"--http-port={http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics}",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    port = grpc if protocol == "grpc" else http
    return Server(protocol, process, http, f"127.0.0.1:{port}")


def perf_analyzer(server: Server, concurrency: int) -> float | None:
    """Throughput (infer/s) of one perf_analyzer run, or None when it found no stable figure."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.csv"
        command = [
            PERF_ANALYZER,
            *("-m", "add_sub", "-u", server.url, "-i", server.protocol),
            *("--concurrency-range", str(concurrency), "-p", "2000", "--max-trials", "4"),
            *("--stability-percentage", "50", "--shape", "INPUT0:1,16", "--shape", "INPUT1:1,16"),
            *("-f", str(report)),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or not report.exists():
            print(f"  perf_analyzer failed: {done.stdout.strip().splitlines()[-1:]}", flush=True)
            return None
        with report.open() as handle:
            return float(next(csv.DictReader(handle))["Inferences/Second"])


def _cpu_seconds(stat_path: str) -> float:
    """utime + stime of a ``/proc/.../stat`` file, in seconds."""
    with open(stat_path) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == pid:
            found.append(int(entry))
    return found


def cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far: the main thread, the whole process, and its children."""
    children = 0.0
    for child in _children(pid):
        try:
            children += _cpu_seconds(f"/proc/{child}/stat")
        except OSError:
            continue
    return {
        "loop": _cpu_seconds(f"/proc/{pid}/task/{pid}/stat"),
        "process": _cpu_seconds(f"/proc/{pid}/stat"),
        "children": children,
    }


def served(http_port: int) -> int:
    """Requests add_sub has answered successfully, from the server's statistics."""
    url = f"http://127.0.0.1:{http_port}/v2/models/add_sub/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        stats = json.load(response)
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


def measure(server: Server, concurrency: int) -> dict[str, float] | None:
    """Per-request CPU (µs) of one perf_analyzer run against ``server``."""
    before, count = cpu(server.process.pid), served(server.http_port)
    throughput = perf_analyzer(server, concurrency)
    after, requests = cpu(server.process.pid), served(server.http_port) - count
    if throughput is None or requests == 0:
        return None
    row = {key: (after[key] - before[key]) * 1e6 / requests for key in before}
    row["infer/s"] = throughput
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {protocol: [] for protocol in PROTOCOLS}
    for number in range(args.rounds):
        order = PROTOCOLS if number % 2 == 0 else PROTOCOLS[::-1]
        for slot, protocol in enumerate(order):
            server = start(protocol, slot)
            try:
                wait_ready(server.http_port, server.process)
                row = measure(server, args.concurrency)
            finally:
                server.process.terminate()
                server.process.wait(30)
            if row is not None:
                results[protocol].append(row)
                print(protocol, {k: round(v, 1) for k, v in row.items()}, flush=True)
    print(f"\nmedians over {args.rounds} rounds, c={args.concurrency}, µs of CPU per request")
    print("| protocol | loop | server process | child processes | ceiling (loop) | infer/s |")
    print("|---|---|---|---|---|---|")
    for name, rows in results.items():
        if not rows:
            continue
        med = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        print(
            f"| {name} | {med['loop']:.0f} | {med['process']:.0f} | {med['children']:.0f} "
            f"| {1e6 / med['loop']:.0f}/s | {med['infer/s']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
