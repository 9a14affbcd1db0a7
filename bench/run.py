"""``make bench``: perf_analyzer against ``despina serve``, a markdown table per protocol.

Starts ``despina serve`` on ``bench/model_repository`` (add_sub on the in-process ``bench``
backend, so the figures measure the server, not a model runtime), or drives a running
server (``--url``), then runs perf_analyzer at each concurrency and writes throughput and
p50/p99 latency to ``bench/results/<protocol>.md``::

    python bench/run.py                         # HTTP, binary and JSON tensors
    python bench/run.py --protocol grpc         # gRPC rows (bench/results/grpc.md)
    python bench/run.py --url 127.0.0.1:8000 --model add_sub --encoding binary
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PERF_ANALYZER = os.environ.get("PERF_ANALYZER", str(ROOT.parent / "shared/tools/perf_analyzer"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    protocol: str, extra: list[str], repository: Path = HERE / "model_repository"
) -> tuple[subprocess.Popen[bytes], str, int]:
    """``despina serve`` on loopback; returns (process, url for the protocol, http port)."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        str(Path(sys.executable).parent / "despina"),
        "serve",
        "--plugin",
        "bench_backend",
        "--model-repository",
        str(repository),
        "--http-address",
        "127.0.0.1",
        "--http-port",
        str(http),
        "--grpc-address",
        "127.0.0.1",
        "--grpc-port",
        str(grpc),
        "--metrics-address",
        "127.0.0.1",
        "--metrics-port",
        str(metrics),
        *extra,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"127.0.0.1:{grpc if protocol == 'grpc' else http}"
    return process, url, http


def wait_ready(http_port: int, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"despina serve exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("despina serve did not become ready")


def perf_analyzer(
    options: argparse.Namespace, url: str, concurrency: int, encoding: str
) -> dict[str, float]:
    """One perf_analyzer run; returns throughput (infer/s) and p50/p99 (µs)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.csv"
        command = [
            PERF_ANALYZER,
            "-m",
            options.model,
            "-u",
            url,
            "-i",
            options.protocol,
            "--concurrency-range",
            str(concurrency),
            "--measurement-interval",
            str(options.interval_ms),
            "-f",
            str(report),
            "--stability-percentage",
            str(options.stability),
            "--max-trials",
            "10",
        ]
        for shape in options.shape:
            command += ["--shape", shape]
        if options.protocol == "http" and encoding == "json":
            command += ["--input-tensor-format=json", "--output-tensor-format=json"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"perf_analyzer failed:\n{done.stdout}\n{done.stderr}")
        with report.open() as handle:
            row = next(csv.DictReader(handle))
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50": float(row["p50 latency"]),
        "p99": float(row["p99 latency"]),
    }


def table(
    options: argparse.Namespace,
    rows: list[tuple[str, int, dict[str, float]]],
    server: str,
    load: float,
) -> str:
    lines = [
        f"# {options.protocol.upper()} benchmark (perf_analyzer)",
        "",
        f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        f"- server: {server}",
        f"- load average before the run: {load:.1f} (other jobs share this host; compare runs made together)",
        f"- load: perf_analyzer -i {options.protocol}, model {options.model}, "
        f"{options.interval_ms} ms windows, shapes {' '.join(options.shape)}",
        "",
        "| protocol | tensors | concurrency | throughput (infer/s) | p50 (ms) | p99 (ms) |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for encoding, concurrency, result in rows:
        lines.append(
            f"| {options.protocol} | {encoding} | {concurrency} | {result['throughput']:.0f} | "
            f"{result['p50'] / 1000:.3f} | {result['p99'] / 1000:.3f} |"
        )
    return "\n".join(lines) + "\n"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument(
        "--url", help="drive this running server (host:port) instead of starting one"
    )
    parser.add_argument("--model", default="add_sub")
    parser.add_argument(
        "--repository",
        type=Path,
        default=HERE / "model_repository",
        help="model repository to serve (default: bench/model_repository)",
    )
    parser.add_argument(
        "--shape",
        action="append",
        help="perf_analyzer --shape (default: add_sub's INPUT0/INPUT1 1,16)",
    )
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated (default: 1,8,32)")
    parser.add_argument(
        "--encoding",
        choices=["binary", "json", "both"],
        default="both",
        help="HTTP tensor encoding (gRPC is always binary)",
    )
    parser.add_argument(
        "--interval-ms", type=int, default=3000, help="perf_analyzer measurement window"
    )
    parser.add_argument(
        "--stability",
        type=int,
        default=50,
        help="perf_analyzer -s: allowed %% variation between windows (shared hosts are noisy)",
    )
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra flag for despina serve; repeatable"
    )
    parser.add_argument(
        "--out", type=Path, help="markdown file (default: bench/results/<protocol>.md)"
    )
    options = parser.parse_args(argv)
    options.shape = options.shape or ["INPUT0:1,16", "INPUT1:1,16"]
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    encodings = ["binary", "json"] if options.encoding == "both" else [options.encoding]
    if options.protocol == "grpc":
        encodings = ["binary"]
    load = os.getloadavg()[0]
    process = None
    url = options.url
    server = f"running server at {url}"
    if url is None:
        process, url, http_port = start_server(
            options.protocol, options.server_arg, options.repository
        )
        server = (
            f"despina serve --plugin bench_backend --model-repository {options.repository} "
            + " ".join(options.server_arg)
        )
        wait_ready(http_port, process)
    try:
        rows = []
        for encoding in encodings:
            for concurrency in (int(c) for c in options.concurrency.split(",")):
                result = perf_analyzer(options, url, concurrency, encoding)
                rows.append((encoding, concurrency, result))
                print(
                    f"{options.protocol} {encoding} c={concurrency}: {result['throughput']:.0f} infer/s, "
                    f"p50 {result['p50'] / 1000:.3f} ms, p99 {result['p99'] / 1000:.3f} ms",
                    flush=True,
                )
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
    out = options.out or HERE / "results" / f"{options.protocol}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table(options, rows, server, load))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
