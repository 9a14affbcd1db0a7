"""Every serving stack on the same models, machine shapes and load, in one interleaved run.

Stacks: HTTP on Despina's own HTTP/1.1 front (the default), ``--http-stack=aiohttp`` and
``--http-worker-processes`` 1 and 2; gRPC on Despina's own HTTP/2 server (the default),
``--grpc-stack=grpcio`` and ``--grpc-worker-processes`` 1 and 2. Models: bench's in-process
add_sub (the serving path alone) and the Python backend's add_sub in process mode. Shapes:
the servers pinned to CPU 0 (perf_analyzer then pinned to CPU 1) or unpinned (both CPUs,
shared with perf_analyzer). Each stack is a ``despina serve`` of its own on 127.0.0.1
(ports 19300-19399); perf_analyzer (``-p 2000 --max-trials 4 -s 50``: a
shared host is noisy) drives it at each
concurrency. Per round the shape, model and stack orders alternate. Every measurement is
appended to ``--raw`` (JSON lines), and the table (medians over rounds, ratio to the
default stack of the protocol on the same shape) is printed from that file::

    flock /tmp/bench.lock python bench/stacks.py --rounds 2
    python bench/stacks.py --table-only              # the table of what --raw holds
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
from dataclasses import dataclass
from pathlib import Path

from run import PERF_ANALYZER, wait_ready

HERE = Path(__file__).resolve().parent
FIRST_PORT = 19300
MODELS = {
    "bench in-process": HERE / "model_repository",
    "python process mode": HERE / "python_repos/process",
}
# shape -> (prefix for the servers, prefix for perf_analyzer)
SHAPES = {
    "1 core": (["taskset", "-c", "0"], ["taskset", "-c", "1"]),
    "2 cores": ([], []),
}


@dataclass(frozen=True)
class Stack:
    """One way to serve ``protocol``; ``default`` marks the stack the others are compared to."""

    name: str
    protocol: str
    flags: tuple[str, ...]
    default: bool = False


STACKS = (
    Stack("http despina", "http", (), default=True),
    Stack("http aiohttp", "http", ("--http-stack=aiohttp",)),
    Stack("http workers=1", "http", ("--http-worker-processes=1",)),
    Stack("http workers=2", "http", ("--http-worker-processes=2",)),
    Stack("grpc despina", "grpc", (), default=True),
    Stack("grpc grpcio", "grpc", ("--grpc-stack=grpcio",)),
    Stack("grpc workers=1", "grpc", ("--grpc-worker-processes=1",)),
    Stack("grpc workers=2", "grpc", ("--grpc-worker-processes=2",)),
)


@dataclass
class Server:
    """A running ``despina serve`` for one stack; ``url`` is its port for the stack's protocol."""

    stack: Stack
    process: subprocess.Popen[bytes]
    http_port: int
    url: str


def start(stack: Stack, repository: Path, prefix: list[str], slot: int) -> Server:
    """``despina serve`` for ``stack`` on ports ``FIRST_PORT + 3 * slot`` .. ``+ 2``."""
    http, grpc, metrics = (FIRST_PORT + 3 * slot + i for i in range(3))
    command = [
        *prefix,
        str(Path(sys.executable).parent / "despina"),
        "serve",
        "--plugin=bench_backend",
        f"--model-repository={repository}",
        "--http-address=127.0.0.1",
        f"--http-port={http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics}",
        *stack.flags,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    port = grpc if stack.protocol == "grpc" else http
    return Server(stack, process, http, f"127.0.0.1:{port}")


def stop(servers: list[Server]) -> None:
    """SIGTERM each server, then wait for it (SIGKILL after 30 s)."""
    for server in servers:
        server.process.terminate()
    for server in servers:
        try:
            server.process.wait(30)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


def perf_analyzer(server: Server, concurrency: int, prefix: list[str]) -> float | None:
    """Throughput (infer/s) of one perf_analyzer run, or None when it found no stable figure."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.csv"
        command = [
            *prefix,
            PERF_ANALYZER,
            "-m",
            "add_sub",
            "-u",
            server.url,
            "-i",
            server.stack.protocol,
            "--concurrency-range",
            str(concurrency),
            "-p",
            "2000",
            "--max-trials",
            "4",
            "--stability-percentage",
            "50",
            "--shape",
            "INPUT0:1,16",
            "--shape",
            "INPUT1:1,16",
            "-f",
            str(report),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or not report.exists():
            print(f"  perf_analyzer failed: {done.stdout.strip().splitlines()[-1:]}", flush=True)
            return None
        with report.open() as handle:
            return float(next(csv.DictReader(handle))["Inferences/Second"])


def measure_round(number: int, concurrencies: list[int], raw: Path) -> None:
    """One round: every shape, model, concurrency and stack, orders reversed on odd rounds."""

    def ordered(items: list[str]) -> list[str]:
        return items if number % 2 == 0 else items[::-1]

    stacks = list(STACKS) if number % 2 == 0 else list(STACKS)[::-1]
    for shape_index, shape in enumerate(ordered(list(SHAPES))):
        server_prefix, client_prefix = SHAPES[shape]
        for model_index, model in enumerate(ordered(list(MODELS))):
            first_slot = (shape_index * len(MODELS) + model_index) * len(STACKS)
            servers = [
                start(stack, MODELS[model], server_prefix, first_slot + i)
                for i, stack in enumerate(stacks)
            ]
            try:
                for server in servers:
                    wait_ready(server.http_port, server.process, timeout_s=180)
                for concurrency in concurrencies:
                    for server in servers:
                        rate = perf_analyzer(server, concurrency, client_prefix)
                        row = {
                            "round": number,
                            "shape": shape,
                            "model": model,
                            "stack": server.stack.name,
                            "c": concurrency,
                            "infer_s": rate,
                        }
                        with raw.open("a") as handle:
                            handle.write(json.dumps(row) + "\n")
                        shown = "failed" if rate is None else f"{rate:.0f} infer/s"
                        print(
                            f"round {number} {shape} {model} c={concurrency} {server.stack.name}: {shown}",
                            flush=True,
                        )
            finally:
                stop(servers)


def table(rows: list[dict[str, object]]) -> str:
    """Markdown: per model, the median infer/s over rounds (min-max) of every stack, shape
    and concurrency, and its ratio to the default stack's median (min-max of the per-round
    ratios)."""
    runs: dict[tuple[str, str, str, int], dict[int, float]] = {}
    for row in rows:
        if row["infer_s"] is not None:
            key = (str(row["model"]), str(row["shape"]), str(row["stack"]), int(str(row["c"])))
            runs.setdefault(key, {})[int(str(row["round"]))] = float(str(row["infer_s"]))
    defaults = {stack.protocol: stack.name for stack in STACKS if stack.default}
    lines = []
    for model in MODELS:
        lines += [
            f"### {model}",
            "",
            "| stack | shape | c | rounds | infer/s median (min-max) | vs default (per-round min-max) |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for stack in STACKS:
            for shape in SHAPES:
                for concurrency in sorted({key[3] for key in runs}):
                    mine = runs.get((model, shape, stack.name, concurrency), {})
                    if not mine:
                        continue
                    base = runs.get((model, shape, defaults[stack.protocol], concurrency), {})
                    median = statistics.median(mine.values())
                    cell = f"{median:.0f} ({min(mine.values()):.0f}-{max(mine.values()):.0f})"
                    ratio = "-"
                    if base:
                        per_round = [mine[r] / base[r] for r in mine if r in base]
                        ratio = f"{median / statistics.median(base.values()):.2f}"
                        if per_round and not stack.default:
                            ratio += f" ({min(per_round):.2f}-{max(per_round):.2f})"
                    lines.append(
                        f"| {stack.name} | {shape} | {concurrency} | {len(mine)} | {cell} | {ratio} |"
                    )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated (default: 1,8,32)")
    parser.add_argument(
        "--raw",
        type=Path,
        default=Path("/tmp/despina-stacks.jsonl"),
        help="JSON lines, appended to",
    )
    parser.add_argument(
        "--table-only", action="store_true", help="print the table of --raw, measure nothing"
    )
    options = parser.parse_args()
    rows = (
        [json.loads(line) for line in options.raw.read_text().splitlines()]
        if options.raw.exists()
        else []
    )
    if not options.table_only:
        first = max((int(row["round"]) for row in rows), default=-1) + 1
        concurrencies = [int(c) for c in options.concurrency.split(",")]
        for number in range(first, first + options.rounds):
            measure_round(number, concurrencies, options.raw)
        rows = [json.loads(line) for line in options.raw.read_text().splitlines()]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
