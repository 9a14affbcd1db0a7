"""``despina serve --serving-processes N``: one serving process against two on this host
(``bench/results/many_cores.md``, section 5).

Each round starts ``despina serve --serving-processes N`` for N = 1 and 2 in turn
(reversed on odd rounds) on bench's in-process add_sub (INPUT0/INPUT1 FP32 [1,16]),
pinned with taskset to ``--server-cpus``, and drives its HTTP port with perf_analyzer at
concurrency ``--concurrency`` (one connection per concurrent request, so the kernel
spreads them over the processes) pinned to ``--client-cpus``. Around each run it reads
from ``/proc`` the CPU time of the whole server tree (the supervisor and its serving
processes) and perf_analyzer's own (``RUSAGE_CHILDREN``), and divides them by the
requests the server counted, read from its summed statistics; throughput is those
requests over the run's wall time (so a run perf_analyzer finds unstable still counts)::

    flock /tmp/bench.lock .venv/bin/python bench/serving_processes.py --rounds 3

``--model sequence_add_sub`` measures the same on a sequence-batched add_sub
(``bench/sequence_repository``: 32 slots, perf_analyzer's sequences of
``--sequence-length`` requests, one sequence per concurrent request): with N = 2 about
half of the requests reach a process that does not own their sequence and are forwarded,
so the difference in server CPU per request is the forwarding hop's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from run import PERF_ANALYZER, free_port

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            found += tree(int(child))
    return found


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid``'s tree so far."""
    total = 0.0
    for member in tree(pid):
        with open(f"/proc/{member}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def served(http_port: int, model: str) -> int:
    """Requests add_sub has answered, summed over the serving processes."""
    url = f"http://127.0.0.1:{http_port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=30) as response:
        stats = json.load(response)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def start(processes: int, cpus: str, model: str) -> tuple[subprocess.Popen[bytes], int]:
    """``despina serve --serving-processes processes`` on free ports; (process, HTTP port)
    once its statistics answer (every serving process serves)."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = ["taskset", "-c", cpus, sys.executable, "-m", "despina", "serve"]
    repository = HERE / ("model_repository" if model == "add_sub" else "sequence_repository")
    command += [f"--model-repository={repository}", "--plugin=bench_backend"]
    command += [f"--serving-processes={processes}", "--busy-poll-us=0"]
    command += [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
    command += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]
    command += ["--metrics-address=127.0.0.1", "--allow-gpu-metrics=false"]
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"despina serve exited with {process.returncode}")
        try:
            served(http, model)
            return process, http
        except OSError:
            time.sleep(0.5)
    raise SystemExit("despina serve did not start")


def run(processes: int, args: argparse.Namespace) -> dict[str, float]:
    """One perf_analyzer run against a fresh server of ``processes`` serving processes."""
    process, http = start(processes, args.server_cpus, args.model)
    try:
        first, server_before = served(http, args.model), cpu_seconds(process.pid)
        client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        command = ["taskset", "-c", args.client_cpus, PERF_ANALYZER, "-m", args.model]
        command += ["-u", f"127.0.0.1:{http}", "-i", "http"]
        command += ["--concurrency-range", str(args.concurrency), "-p", "3000"]
        command += ["--max-trials", "3", "--stability-percentage", "50"]
        if args.model == "add_sub":
            command += ["--shape", "INPUT0:1,16", "--shape", "INPUT1:1,16"]
        else:
            command += ["--sequence-length", str(args.sequence_length)]
        subprocess.run(command, capture_output=True, timeout=600, check=False)
        wall = time.monotonic() - started
        client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        requests = served(http, args.model) - first
        server = cpu_seconds(process.pid) - server_before
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    client = (client_after.ru_utime + client_after.ru_stime) - (
        client_before.ru_utime + client_before.ru_stime
    )
    return {
        "infer/s": requests / wall,
        "server µs": server * 1e6 / requests,
        "client µs": client * 1e6 / requests,
        "server cores": server / wall,
        "requests": requests,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--server-cpus", default="0,1")
    parser.add_argument("--client-cpus", default="0,1")
    parser.add_argument("--model", choices=("add_sub", "sequence_add_sub"), default="add_sub")
    parser.add_argument("--sequence-length", type=int, default=20)
    args = parser.parse_args()
    rows: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for number in range(args.rounds):
        order = (1, 2) if number % 2 == 0 else (2, 1)
        for processes in order:
            row = run(processes, args)
            rows[processes].append(row)
            loads = os.getloadavg()[0]
            print(json.dumps({"round": number, "N": processes, "load1": loads, **row}), flush=True)
    print("| N | infer/s | server µs/request | perf_analyzer µs/request | server cores |")
    print("|---:|---:|---:|---:|---:|")
    for processes, found in rows.items():
        medians = {key: statistics.median(row[key] for row in found) for key in found[0]}
        print(
            f"| {processes} | {medians['infer/s']:.0f} | {medians['server µs']:.0f} "
            f"| {medians['client µs']:.0f} | {medians['server cores']:.2f} |"
        )
    ratios = [two["infer/s"] / one["infer/s"] for one, two in zip(rows[1], rows[2], strict=True)]
    print("throughput ratio N=2 / N=1 by round:", [round(r, 2) for r in ratios])
    return 0


if __name__ == "__main__":
    sys.exit(main())
