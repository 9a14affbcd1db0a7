"""ONNX Runtime instances: the default (a model's CPU instances share one session with
onnxruntime's own pool; the "per-session" column, named for the pool each session owns)
against the process-wide shared pool (``--backend-config=onnxruntime,thread-pool=shared``),
issue 29 item 3.

The ResNet-like CNN of :mod:`instance_threads` with 1, 2 and 4 CPU instances and no thread
parameter, served by two ``despina serve`` processes that differ only in that flag;
perf_analyzer (HTTP) visits every (instances, concurrency, server) cell in interleaved
rounds, the server order alternating per round. Prints the median infer/s and the ratios
to one instance on the same server and to the per-session server.

    .venv/bin/python bench/onnx_thread_pool.py --rounds 3 --measurement-ms 3000
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from instance_threads import ROOT, build_models, config, perf

SERVERS = {"per-session": [], "shared": ["--backend-config=onnxruntime,thread-pool=shared"]}


def start(repo: Path, port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    """A ``despina serve`` of ``repo`` on ``port`` (HTTP only), ready."""
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/despina"), "serve", f"--model-repository={repo}",
         "--http-address=127.0.0.1", f"--http-port={port}", "--allow-grpc=false",
         "--allow-metrics=false", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(240):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2):
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError(f"server on port {port} did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--instances", default="1,2,4")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--port", type=int, default=18800)
    args = parser.parse_args()
    counts = [int(n) for n in args.instances.split(",")]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    results: dict[tuple[str, int, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        onnx, _ = build_models(Path(tmp))
        for n in counts:
            folder = repo / f"onnx_i{n}" / "1"
            folder.mkdir(parents=True)
            (folder / "model.onnx").write_bytes(onnx)
            (folder.parent / "config.pbtxt").write_text(config("onnxruntime", n, False, 0))
        ports = {name: args.port + i for i, name in enumerate(SERVERS)}
        servers = [start(repo, ports[name], extra) for name, extra in SERVERS.items()]
        try:
            for round_index in range(args.rounds):
                order = list(SERVERS) if round_index % 2 == 0 else list(reversed(SERVERS))
                for n in counts:
                    for c in concurrencies:
                        for name in order:
                            value = perf(f"onnx_i{n}", ports[name], c, args.measurement_ms)
                            results.setdefault((name, n, c), []).append(value)
                            print(name, n, c, value, file=sys.stderr, flush=True)
        finally:
            for server in servers:
                server.terminate()
                server.wait(30)
    print(f"rounds: {args.rounds}, -p {args.measurement_ms}\n")
    print("| instances | concurrency | per-session (infer/s) | shared (infer/s) | shared / per-session "
          "| per-session vs 1 instance | shared vs 1 instance |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    median = {key: statistics.median(values) for key, values in results.items()}
    for n in counts:
        for c in concurrencies:
            own, shared = median[("per-session", n, c)], median[("shared", n, c)]
            one_own, one_shared = (
                median[("per-session", counts[0], c)],
                median[("shared", counts[0], c)],
            )
            print(
                f"| {n} | {c} | {own:.1f} | {shared:.1f} | {shared / own:.2f} "
                f"| {own / one_own:.2f} | {shared / one_shared:.2f} |"
            )


if __name__ == "__main__":
    main()
