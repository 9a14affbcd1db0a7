"""What each serving stack costs the server process's event loop per request.

The thread that runs a server's event loop is the one resource no number of cores adds
to: a stack's throughput on any machine is at most ``1 / (loop CPU per request)``. This
bench serves bench's in-process add_sub on each stack, drives it with perf_analyzer, and
reads from ``/proc`` the CPU time of the server's main thread (its event loop), of the
whole server process, and of its child processes (the worker processes), divided by the
requests the server counted in the same window (``/v2/models/add_sub/stats``). So a stack
that moves work off the loop (worker processes parsing HTTP or HTTP/2) shows it as a
lower loop cost and a higher ceiling, whatever the cores of the host that measures it.
Busy polling is off (``--busy-poll-us=0``) so CPU time is work, not spinning.

::

    flock /tmp/bench.lock python bench/serial_cost.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import urllib.request
from pathlib import Path

from stacks import STACKS, Server, perf_analyzer, start, stop
from run import wait_ready

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


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
    throughput = perf_analyzer(server, concurrency, [])
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
    results: dict[str, list[dict[str, float]]] = {stack.name: [] for stack in STACKS}
    for number in range(args.rounds):
        order = STACKS if number % 2 == 0 else STACKS[::-1]
        for slot, base in enumerate(order):
            stack = type(base)(base.name, base.protocol, (*base.flags, "--busy-poll-us=0"))
            server = start(stack, HERE / "model_repository", [], slot)
            try:
                wait_ready(server.http_port, server.process)
                row = measure(server, args.concurrency)
            finally:
                stop([server])
            if row is not None:
                results[base.name].append(row)
                print(base.name, {k: round(v, 1) for k, v in row.items()}, flush=True)
    print(f"\nmedians over {args.rounds} rounds, c={args.concurrency}, µs of CPU per request")
    print("| stack | loop | server process | worker processes | ceiling (loop) | infer/s |")
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
