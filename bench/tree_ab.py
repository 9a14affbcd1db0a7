"""Two Despina trees side by side on the peers kit's add_sub, driven by wrk in one
interleaved run: HTTP JSON and the binary tensor extension at concurrency 1, 8 and 32.

Each tree is served by this virtualenv's ``despina serve`` with ``PYTHONPATH`` at that
tree's sources (``core/src`` and every ``plugins/*/src``), on 127.0.0.1 ports 19700-19712.
Per round, encoding and concurrency the two servers run in a random order; the table holds
medians over rounds. Needs wrk and the peers kit's payloads (``../shared/tools/peers``
``setup.sh`` and one ``load/bench.py`` run make them)::

    git archive REV | tar -x -C /tmp/before
    flock /tmp/bench.lock python bench/tree_ab.py /tmp/before . --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

from run import wait_ready

HERE = Path(__file__).resolve().parent
PEERS = Path(os.environ.get("PEERS_HOME", HERE.parent.parent / "shared/tools/peers"))
PAYLOADS = Path(os.environ.get("PEERS_SCRATCH", "/tmp/peers")) / "payloads"
CONCURRENCY = (1, 8, 32)


def serve(tree: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``despina serve`` of the kit's add_sub from ``tree``'s sources on ``port`` (+1, +2)."""
    sources = [tree / "core/src", *sorted((tree / "plugins").glob("*/src"))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(s.resolve()) for s in sources)}
    command = [
        str(Path(sys.executable).parent / "despina"),
        "serve",
        f"--model-repository={PEERS / 'despina/model_repository'}",
        *("--http-address=127.0.0.1", f"--http-port={port}"),
        *("--grpc-address=127.0.0.1", f"--grpc-port={port + 1}"),
        *("--metrics-address=127.0.0.1", f"--metrics-port={port + 2}"),
    ]
    with log.open("w") as handle:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=handle)


def wrk(port: int, body: Path, content_type: str, header_length: str, conc: int) -> float:
    """Requests per second of one 5 s wrk run (every answer must be 2xx)."""
    command = [
        *("wrk", "-t1", f"-c{conc}", "-d5s", "-s", str(PEERS / "load/post.lua")),
        *("--timeout", "10s", f"http://127.0.0.1:{port}/v2/models/add_sub/infer"),
        *("--", str(body), content_type, header_length),
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
    line = next(line for line in out.splitlines() if line.startswith("WRKJSON"))
    result = json.loads(line.removeprefix("WRKJSON "))
    if result["non2xx"]:
        raise SystemExit(f"{result['non2xx']} non-2xx answers from the server on {port}")
    return float(result["requests"]) / (result["duration_us"] / 1e6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the tree measured first in the table")
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ports = {"before": 19700, "after": 19710}
    trees = {"before": args.before, "after": args.after}
    servers = {n: serve(trees[n], ports[n], Path(f"/tmp/tree_ab_{n}.log")) for n in trees}
    encodings = {
        "json": (PAYLOADS / "infer_json.body", "application/json", ""),
        "binary": (
            PAYLOADS / "infer_binary.body",
            "application/octet-stream",
            (PAYLOADS / "infer_binary.hlen").read_text().strip(),
        ),
    }
    rates: dict[tuple[str, int, str], list[float]] = {}
    try:
        for name, process in servers.items():
            wait_ready(ports[name], process)
        for number in range(args.rounds):
            for encoding, (body, content_type, header_length) in encodings.items():
                for conc in CONCURRENCY:
                    for name in random.sample(list(trees), len(trees)):
                        rate = wrk(ports[name], body, content_type, header_length, conc)
                        rates.setdefault((encoding, conc, name), []).append(rate)
                        print(
                            f"round {number} {encoding} c={conc} {name}: {rate:.0f}/s", flush=True
                        )
    finally:
        for process in servers.values():
            process.terminate()
        for process in servers.values():
            process.wait(30)
    print(f"\n| encoding | c | before ({args.before}) | after ({args.after}) | after / before |")
    print("|---|---:|---:|---:|---:|")
    for encoding in encodings:
        for conc in CONCURRENCY:
            before = statistics.median(rates[(encoding, conc, "before")])
            after = statistics.median(rates[(encoding, conc, "after")])
            print(
                f"| HTTP {encoding} | {conc} | {before:.0f} | {after:.0f} | {after / before:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
