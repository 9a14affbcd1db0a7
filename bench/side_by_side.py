"""Despina (in-process ``bench`` add_sub) beside Triton 2.51 (Python-backend add_sub) and
the peers kit's bare aiohttp handler, driven by wrk in one interleaved run.

The peers kit (``../shared/tools/peers``) serves Despina's Python-backend add_sub; this
measures the server path with the in-process backend instead, using the kit's payloads,
wrk script and ceiling server. Every server listens on 127.0.0.1 only::

    python bench/side_by_side.py --reps 3 --dur 5 --conc 8   # needs wrk, the kit's cl venv
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = Path(os.environ.get("PEERS_HOME", HERE.parent.parent / "shared/tools/peers"))
SCRATCH = Path(os.environ.get("PEERS_SCRATCH", "/tmp/peers"))
LOOPBACK = [
    "--http-address",
    "127.0.0.1",
    "--grpc-address",
    "127.0.0.1",
    "--metrics-address",
    "127.0.0.1",
]


def servers() -> dict[str, tuple[list[str], int]]:
    despina = [
        str(Path(sys.executable).parent / "despina"),
        "serve",
        "--plugin",
        "bench_backend",
        "--model-repository",
        str(HERE / "model_repository"),
        *LOOPBACK,
    ]
    found = {
        "despina": (
            [*despina, "--http-port", "8710", "--grpc-port", "8711", "--metrics-port", "8712"],
            8710,
        ),
        "triton": (
            [
                str(PEERS.parent / "tritonserver"),
                "--model-repository",
                str(PEERS / "despina/model_repository"),
                *LOOPBACK,
                "--http-port",
                "8720",
                "--grpc-port",
                "8721",
                "--metrics-port",
                "8722",
            ],
            8720,
        ),
        "ceiling-aiohttp": (
            [str(SCRATCH / "cl/bin/python"), str(PEERS / "ceiling/aiohttp_server.py"), "8730", "1"],
            8730,
        ),
    }
    return found


def wait_ready(port: int) -> None:
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server on {port} not ready")


def wrk(port: int, encoding: str, conc: int, dur: int, payloads: Path) -> dict[str, float]:
    if encoding == "json":
        args = [str(payloads / "infer_json.body"), "application/json"]
    else:
        args = [
            str(payloads / "infer_binary.body"),
            "application/octet-stream",
            (payloads / "infer_binary.hlen").read_text(),
        ]
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{conc}",
            f"-d{dur}s",
            "-s",
            str(PEERS / "load/post.lua"),
            f"http://127.0.0.1:{port}/v2/models/add_sub/infer",
            "--",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(
        next(line for line in out.splitlines() if line.startswith("WRKJSON")).split(" ", 1)[1]
    )
    assert data["non2xx"] == 0, data
    return {"rps": data["requests"] / (data["duration_us"] / 1e6), "p50_ms": data["p50_us"] / 1000}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dur", type=int, default=5)
    parser.add_argument("--conc", default="1,8")
    options = parser.parse_args()
    payloads = SCRATCH / "payloads-side-by-side"
    subprocess.run(
        [str(SCRATCH / "cl/bin/python"), str(PEERS / "load/make_payloads.py"), str(payloads)],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    table = servers()
    procs = {
        n: subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for n, (cmd, _) in table.items()
    }
    results: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    try:
        for _, port in table.values():
            wait_ready(port)
        for rep in range(options.reps):
            for encoding in ("json", "binary"):
                for conc in (int(c) for c in options.conc.split(",")):
                    names = list(table)
                    random.shuffle(names)
                    for name in names:
                        result = wrk(table[name][1], encoding, conc, options.dur, payloads)
                        results.setdefault((name, encoding, conc), []).append(result)
                        print(
                            f"rep{rep} {encoding:6} c={conc:<3} {name:16} {result['rps']:8.0f}/s p50 {result['p50_ms']:.3f} ms",
                            flush=True,
                        )
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(30)
    print("\n| server | tensors | c | median infer/s | median p50 (ms) | vs triton |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (name, encoding, conc), runs in sorted(
        results.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])
    ):
        rps = statistics.median(r["rps"] for r in runs)
        triton = statistics.median(r["rps"] for r in results[("triton", encoding, conc)])
        p50 = statistics.median(r["p50_ms"] for r in runs)
        print(f"| {name} | {encoding} | {conc} | {rps:.0f} | {p50:.3f} | {rps / triton:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
