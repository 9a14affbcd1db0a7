"""What more cores can give one Despina host: N serving processes sharing a port against
N event loops in threads of one process (issue 39, item 5; ``bench/results/many_cores.md``).

Each configuration (``CONFIGS``) serves bench's in-process add_sub (INPUT0/INPUT1 FP32
[1,16]) from P processes of L event loops each. Every loop is a full Despina
server (``despina.testing.start_server``: its own models and frontends) on its own thread;
the loops of all processes bind the load protocol's port together (``--reuse-http-port`` /
``--reuse-grpc-port``, SO_REUSEPORT: the kernel spreads *connections* over them) and each
has a port of its own for the other protocol, through which its statistics are read.
perf_analyzer drives the shared port at concurrency ``--concurrency``. Around each run the
bench reads from ``/proc`` the user and system CPU time of the servers' processes and of
each loop's thread, and perf_analyzer's own CPU (``RUSAGE_CHILDREN``), and divides them by
the requests the servers counted. Busy polling is off, so CPU time is work.

Shapes: ``1+1``: the servers on CPU 0, perf_analyzer on CPU 1 (one core for the serving
side, the load generator apart); ``2 shared``: servers and perf_analyzer on CPUs 0-1.
Configurations and shapes are visited in turn, reversed on odd rounds.
``--pipeline-floor`` instead measures what the loop spends on a request with no protocol::

    flock /tmp/bench.lock .venv/bin/python bench/many_cores.py --rounds 3
    .venv/bin/python bench/many_cores.py --pipeline-floor
    .venv/bin/python bench/many_cores.py --gil 0,1 --rounds 3
    .venv/bin/python bench/many_cores.py --balance

``--gil CPUS`` runs that protocol-free path on 1 loop, on 2 loops in threads of one
process and on 2 processes at once, pinned to ``CPUS``: whether loops in threads add
anything under the GIL (no load generator needed, so 2 cores can be compared with 1), and
how long each loop thread slept (waiting for the GIL) while it had work. ``--balance``
sends one client's and 8 clients' requests to 2 processes sharing a port and prints
where they landed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from run import PERF_ANALYZER

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")
LOAD_PORT = 19400
OWN_PORT = 19410
CONFIGS = ((1, 1), (2, 1), (1, 2))  # (processes, loops per process)
SHAPES = {"1+1": ("0", "1"), "2 shared": ("0,1", "0,1")}


def serve(load: str, loops: int, first_own_port: int) -> None:
    """Run ``loops`` servers in this process until SIGTERM; print their loop thread ids."""
    from despina.testing import start_server

    sys.path.insert(0, str(HERE))
    import bench_backend

    own = "grpc" if load == "http" else "http"
    common = ["--busy-poll-us=0", "--allow-metrics=false", f"--reuse-{load}-port=true"]
    tids = []
    for number in range(loops):
        running = start_server(
            HERE / "model_repository",
            [*common, f"--{load}-port={LOAD_PORT}", f"--{own}-port={first_own_port + number}"],
            plugins=[bench_backend],
        )
        tids.append(running.call(_thread_id()))
    print(json.dumps(tids), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    os._exit(0)


async def _thread_id() -> int:
    return threading.get_native_id()


@dataclass
class Servers:
    """The running server processes of one configuration."""

    processes: list[subprocess.Popen[str]]
    loop_tids: list[tuple[int, int]]  # (pid, tid) of every loop
    own_ports: list[int]
    own: str

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            process.wait(30)


def start(load: str, processes: int, loops: int, cpus: str) -> Servers:
    """``processes`` runners of ``loops`` servers each, pinned to ``cpus``."""
    started: list[subprocess.Popen[str]] = []
    tids: list[tuple[int, int]] = []
    ports: list[int] = []
    for index in range(processes):
        first = OWN_PORT + index * loops
        command = ["taskset", "-c", cpus, sys.executable, __file__, "--serve", load]
        command += [f"--loops={loops}", f"--own-port={first}"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise SystemExit(f"server runner exited with {process.wait()}")
        tids += [(process.pid, tid) for tid in json.loads(line)]
        ports += range(first, first + loops)
    return Servers(started, tids, ports, "grpc" if load == "http" else "http")


def _times(path: str) -> tuple[float, float]:
    with open(path) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def cpu(servers: Servers) -> dict[str, float]:
    """CPU seconds so far: user and system of the processes and of their loop threads."""
    user = system = loop_user = loop_system = 0.0
    for process in servers.processes:
        u, s = _times(f"/proc/{process.pid}/stat")
        user, system = user + u, system + s
    for pid, tid in servers.loop_tids:
        u, s = _times(f"/proc/{pid}/task/{tid}/stat")
        loop_user, loop_system = loop_user + u, loop_system + s
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "user": user,
        "system": system,
        "loop user": loop_user,
        "loop system": loop_system,
        "client": child.ru_utime + child.ru_stime,
    }


def counts(servers: Servers) -> list[int]:
    """Requests each server has answered, read through its own port."""
    found = []
    for port in servers.own_ports:
        if servers.own == "http":
            url = f"http://127.0.0.1:{port}/v2/models/add_sub/stats"
            with urllib.request.urlopen(url, timeout=10) as response:
                stats = json.load(response)["model_stats"][0]
            found.append(int(stats["inference_stats"]["success"].get("count", 0)))
        else:
            import tritonclient.grpc as grpcclient

            client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
            reply = client.get_inference_statistics("add_sub", as_json=True)
            found.append(int(reply["model_stats"][0]["inference_stats"]["success"].get("count", 0)))
            client.close()
    return found


def rss_mib(servers: Servers) -> float:
    """Resident memory of all the server processes, MiB."""
    total = 0
    for process in servers.processes:
        with open(f"/proc/{process.pid}/status") as handle:
            line = next(line for line in handle if line.startswith("VmRSS:"))
        total += int(line.split()[1])
    return total / 1024


def measure(load: str, servers: Servers, client_cpus: str, concurrency: int) -> dict[str, object]:
    """One perf_analyzer run: µs of CPU per request and the servers' shares of requests."""
    import tempfile

    before, first, start_s = cpu(servers), counts(servers), time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.csv"
        command = ["taskset", "-c", client_cpus, PERF_ANALYZER, "-m", "add_sub"]
        command += ["-u", f"127.0.0.1:{LOAD_PORT}", "-i", load]
        command += ["--concurrency-range", str(concurrency), "-p", "2000", "--max-trials", "4"]
        command += ["--stability-percentage", "50", "-f", str(report)]
        command += ["--shape", "INPUT0:1,16", "--shape", "INPUT1:1,16"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        rate = None
        if done.returncode == 0 and report.exists():
            rate = float(report.read_text().splitlines()[1].split(",")[1])
    after, last, wall = cpu(servers), counts(servers), time.monotonic() - start_s
    served = [b - a for a, b in zip(first, last, strict=True)]
    total = sum(served)
    row: dict[str, object] = {key: (after[key] - before[key]) * 1e6 / total for key in before}
    busy = after["user"] + after["system"] - before["user"] - before["system"]
    row["server cores"] = busy / wall
    row["infer/s"] = rate
    row["shares"] = [round(n / total, 2) for n in served]
    return row


def _median(rows: list[dict[str, object]], key: str) -> float:
    """The median of ``key`` over the rows that have it (NaN when none has)."""
    values = [float(str(row[key])) for row in rows if row[key] is not None]
    return statistics.median(values) if values else float("nan")


def balance(requests: int) -> None:
    """Print how SO_REUSEPORT spreads one client's requests, and 8 clients' requests, over
    2 serving processes, per protocol (each tritonclient client keeps one connection)."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    ones = np.ones((1, 16), np.float32)
    for load in ("http", "grpc"):
        servers = start(load, 2, 1, "0,1")
        try:
            for clients in (1, 8):
                module: Any = httpclient if load == "http" else grpcclient
                made = [
                    module.InferenceServerClient(f"127.0.0.1:{LOAD_PORT}") for _ in range(clients)
                ]
                first = counts(servers)
                for number in range(requests):
                    inputs = [module.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
                    for tensor in inputs:
                        tensor.set_data_from_numpy(ones)
                    made[number % clients].infer("add_sub", inputs)
                for client in made:
                    client.close()
                served = [b - a for a, b in zip(first, counts(servers), strict=True)]
                print(f"{load}, {clients} client(s), {requests} requests: per process {served}")
        finally:
            servers.stop()


def _pipeline_servers(loops: int) -> tuple[list[Any], Callable[[Any, int, int], Any]]:
    """``loops`` servers of bench's add_sub in threads of this process, and a coroutine
    factory ``drive(running, requests, concurrency)`` that sends ``requests`` through
    ``Server.infer`` from ``concurrency`` tasks on that server's own loop and returns the
    loop thread's CPU seconds."""
    import asyncio

    import numpy as np
    from despina import InferenceRequest
    from despina.testing import RunningServer, start_server

    sys.path.insert(0, str(HERE))
    import bench_backend

    args = ["--busy-poll-us=0", "--allow-metrics=false", "--http-port=0", "--grpc-port=0"]
    servers = [
        start_server(HERE / "model_repository", args, plugins=[bench_backend]) for _ in range(loops)
    ]
    ones = np.ones((1, 16), np.float32)

    async def drive(running: RunningServer, requests: int, concurrency: int) -> float:
        async def client() -> None:
            for _ in range(requests // concurrency):
                request = InferenceRequest("add_sub", {"INPUT0": ones, "INPUT1": ones})
                await running.server.infer(request)

        started = time.thread_time()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return time.thread_time() - started

    return servers, drive


def pipeline_floor(requests: int, repeats: int) -> None:
    """Print the loop's CPU per request with no protocol at all: ``Server.infer`` of
    add_sub from a coroutine on the server's own loop (admission, scheduler, the model,
    delivery and statistics), at concurrency 1 and 16: what a model host would still spend
    per request if frontend processes did every protocol step (channel not counted)."""
    (running,), drive = _pipeline_servers(1)
    try:
        for concurrency in (1, 16):
            found = [
                running.call(drive(running, requests, concurrency)) * 1e6 / requests
                for _ in range(repeats)
            ]
            print(
                f"pipeline floor, c={concurrency}: median {statistics.median(found):.1f} "
                f"µs of loop CPU per request ({', '.join(f'{v:.1f}' for v in found)})"
            )
    finally:
        running.stop()


def _schedstat(tid: int) -> tuple[int, int]:
    """Nanoseconds thread ``tid`` of this process has run, and has waited runnable for a
    CPU (``/proc/.../schedstat``)."""
    with open(f"/proc/self/task/{tid}/schedstat") as handle:
        ran, waited, _ = handle.read().split()
    return int(ran), int(waited)


def gil_worker(loops: int, requests: int, start_at: float) -> None:
    """Drive ``loops`` servers in threads of this process at once, from ``start_at``
    (epoch seconds). Print requests/s over the wall time, the process's CPU cores, and
    the loop threads' mean shares of the wall time on a CPU, runnable but waiting for
    one (other processes' load), and asleep: a loop that always has work sleeps only
    while it waits for the GIL."""
    import asyncio

    servers, drive = _pipeline_servers(loops)
    tids = [running.call(_thread_id()) for running in servers]
    time.sleep(max(0.0, start_at - time.time()))
    before = [_schedstat(tid) for tid in tids]
    wall, cpu_before = time.monotonic(), time.process_time()
    futures = [
        asyncio.run_coroutine_threadsafe(drive(running, requests, 16), running.loop)
        for running in servers
    ]
    for future in futures:
        future.result(600)
    wall, busy = time.monotonic() - wall, time.process_time() - cpu_before
    after = [_schedstat(tid) for tid in tids]
    ran = statistics.mean(b[0] - a[0] for a, b in zip(before, after, strict=True)) / 1e9
    waited = statistics.mean(b[1] - a[1] for a, b in zip(before, after, strict=True)) / 1e9
    row = {"rate": loops * requests / wall, "cores": busy / wall}
    row |= {"on cpu": ran / wall, "runnable": waited / wall}
    row["asleep"] = 1 - row["on cpu"] - row["runnable"]
    print(json.dumps(row), flush=True)
    os._exit(0)


def gil(cpus: str, requests: int, rounds: int) -> None:
    """The pipeline on 1 loop, 2 loops in threads of one process, and 2 processes of 1
    loop, pinned to ``cpus``, interleaved over ``rounds``: whether loops in threads add."""
    keys = ("rate", "cores", "on cpu", "runnable", "asleep")
    found: dict[str, list[dict[str, float]]] = {}
    configs = (
        ("1 process x 1 loop", 1, 1),
        ("1 process x 2 loops", 1, 2),
        ("2 processes x 1 loop", 2, 1),
    )
    for number in range(rounds):
        for label, processes, loops in configs if number % 2 == 0 else configs[::-1]:
            start_at = time.time() + 8
            command = ["taskset", "-c", cpus, sys.executable, __file__, "--gil-worker"]
            command += [str(loops), str(requests), str(start_at)]
            running = [
                subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
                for _ in range(processes)
            ]
            rows = [json.loads(process.communicate(timeout=600)[0]) for process in running]
            row = {key: sum(r[key] for r in rows) for key in ("rate", "cores")}
            row |= {key: statistics.mean(r[key] for r in rows) for key in keys[2:]}
            found.setdefault(label, []).append(row)
            print(number, label, f"on CPUs {cpus}:", json.dumps(row), flush=True)
    print("| CPUs | configuration | infer/s | cores | loop on CPU | runnable | asleep |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, values in found.items():
        med = {key: statistics.median(v[key] for v in values) for key in keys}
        print(
            f"| {cpus} | {label} | {med['rate']:.0f} | {med['cores']:.2f} "
            f"| {med['on cpu']:.2f} | {med['runnable']:.2f} | {med['asleep']:.2f} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", choices=("http", "grpc"), help=argparse.SUPPRESS)
    parser.add_argument("--loops", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--own-port", type=int, default=OWN_PORT, help=argparse.SUPPRESS)
    parser.add_argument(
        "--pipeline-floor", action="store_true", help="measure the loop without a protocol"
    )
    parser.add_argument(
        "--gil", metavar="CPUS", help="the pipeline in loops in threads vs processes on CPUS"
    )
    parser.add_argument("--gil-worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument(
        "--balance", action="store_true", help="how 2 processes share 1 and 8 clients"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--protocols", nargs="+", default=["http", "grpc"])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.loops, args.own_port)
        return 0
    if args.pipeline_floor:
        pipeline_floor(20_000, 5)
        return 0
    if args.gil_worker:
        loops, requests, start_at = args.gil_worker
        gil_worker(int(loops), int(requests), float(start_at))
        return 0
    if args.balance:
        balance(400)
        return 0
    if args.gil:
        gil(args.gil, 100_000, args.rounds)
        return 0
    points = list(itertools.product(args.protocols, args.shapes, CONFIGS))
    rows: dict[tuple[str, str, tuple[int, int]], list[dict[str, object]]] = {}
    for number in range(args.rounds):
        for load, shape, (processes, loops) in points if number % 2 == 0 else points[::-1]:
            server_cpus, client_cpus = SHAPES[shape]
            servers = start(load, processes, loops, server_cpus)
            try:
                time.sleep(1)
                idle = rss_mib(servers)
                row = measure(load, servers, client_cpus, args.concurrency)
            finally:
                servers.stop()
            row["rss MiB"] = idle
            rows.setdefault((load, shape, (processes, loops)), []).append(row)
            label = f"{load} {shape} {processes}p x {loops} loops"
            print(number, label, row, flush=True)
    print(f"\nmedians over {args.rounds} rounds, c={args.concurrency}, µs of CPU per request")
    print(
        "| protocol | shape | processes x loops | infer/s | server user | server sys "
        "| loop user | loop sys | perf_analyzer | server cores | idle RSS MiB | shares per loop |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for (load, shape, (processes, loops)), found in rows.items():
        med = {key: _median(found, key) for key in found[0] if key != "shares"}
        shares = " / ".join(str(r["shares"]) for r in found)
        print(
            f"| {load} | {shape} | {processes} x {loops} | {med['infer/s']:.0f} "
            f"| {med['user']:.0f} | {med['system']:.0f} | {med['loop user']:.0f} "
            f"| {med['loop system']:.0f} | {med['client']:.0f} | {med['server cores']:.2f} "
            f"| {med['rss MiB']:.0f} | {shares} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
