"""Infer/s: one ``despina serve`` (in-process server, its HTTP frontend) next to Ray Serve
with 1 and 2 Despina replicas, on the same model (examples/onnx_add_sub), the same
closed-loop JSON clients, points interleaved. Prints a Markdown table.

    .venv/bin/python plugins/deploy_ray/bench/replicas.py --seconds 4 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import urllib.request
from pathlib import Path

import ray
from despina.testing import free_port, start_server
from despina_deploy_ray import despina_app
from ray import serve

REPOSITORY = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
BODY = json.dumps(
    {
        "inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 16], "data": list(range(16))}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()
ARGS = [
    f"--model-repository={REPOSITORY}",
    "--model-control-mode=explicit",
    "--load-model=onnx_add_sub",
]


def measure(url: str, seconds: float, clients: int) -> float:
    """Requests per second that ``clients`` closed-loop threads complete in ``seconds``."""
    done = [0] * clients
    stop = time.monotonic() + seconds

    def client(index: int) -> None:
        while time.monotonic() < stop:
            request = urllib.request.Request(url, data=BODY, method="POST")
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
            done[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    options = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    single = start_server(REPOSITORY, [*ARGS[1:], "--allow-grpc=false", "--allow-metrics=false"])
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    results: dict[str, list[float]] = {
        "despina serve": [],
        "ray 1 replica": [],
        "ray 2 replicas": [],
    }
    path = "/v2/models/onnx_add_sub/infer"
    try:
        for _ in range(options.rounds):
            results["despina serve"].append(
                measure(f"http://{single.http_url}{path}", options.seconds, options.clients)
            )
            for replicas in (1, 2):
                app = despina_app(ARGS, num_replicas=replicas, ray_actor_options={"num_cpus": 0.5})
                serve.run(app, name="bench", route_prefix="/")
                key = f"ray {replicas} replica{'s' if replicas > 1 else ''}"
                url = f"http://127.0.0.1:{port}{path}"
                measure(url, 1, options.clients)  # warm-up
                results[key].append(measure(url, options.seconds, options.clients))
    finally:
        serve.shutdown()
        ray.shutdown()
        single.stop()
    print(f"| setup | infer/s (median of {options.rounds}) | all rounds |")
    print("| --- | ---: | --- |")
    for key, values in results.items():
        rounds = ", ".join(f"{v:.0f}" for v in values)
        print(f"| {key} | {statistics.median(values):.0f} | {rounds} |")


if __name__ == "__main__":
    main()
