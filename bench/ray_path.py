"""Infer/s of Despina on Ray Serve next to Ray Serve's own ceiling and ``despina serve``, in
one interleaved run per Ray mode: every round measures each setup once, in turn (the
order rotating); medians, ratios and the server-side CPU per request are printed as
Markdown.

Setups (model ``examples/onnx_add_sub``, FP32 [1,16], v2 infer; closed-loop clients on
keep-alive connections, one request in flight each, in a process of their own):

- ``despina serve``: its own HTTP frontend (a subprocess), measured in every session.
- ``noop HTTP`` / ``noop gRPC``: a Ray Serve deployment that reads the request and
  answers a fixed v2 infer JSON body / ``ModelInferResponse``: Ray Serve's ceiling.
- ``despina HTTP`` / ``despina gRPC``: :func:`despina_deploy_ray.despina_app`, v2 infer
  JSON / ``tritonclient.grpc``'s ``ModelInfer``.

Ray modes (:data:`MODES`, one local cluster each, started and stopped by the run):
``proxy`` (Ray Serve's defaults: clients -> HTTP/gRPC proxy actor -> replica),
``proxy-optimized`` (the same proxies, ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1`` less direct
ingress) and ``direct`` (``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``: each replica listens
itself, clients spread over the replicas' ports as a load balancer would).

``--nodes 2`` starts a head and a second node (``ray.cluster_utils.Cluster``), each with
one ``node_slot`` resource, and ``--replicas 1 2`` deploys Despina with one replica and
with two (one per node, each taking the slot), interleaved (HTTP only).

    .venv/bin/python bench/ray_path.py --seconds 4 --rounds 3
    .venv/bin/python bench/ray_path.py --modes direct --nodes 2 --replicas 1 2
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "examples" / "model_repository"
MODEL = "onnx_add_sub"
PATH = f"/v2/models/{MODEL}/infer"
DATA = list(range(16))
BODY = json.dumps(
    {
        "inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 16], "data": DATA}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()
ARGS = [
    f"--model-repository={REPOSITORY}",
    "--model-control-mode=explicit",
    f"--load-model={MODEL}",
]
#: What the no-op deployment answers over HTTP (the shape of Despina's answer).
NOOP_ANSWER = json.dumps(
    {
        "model_name": MODEL,
        "model_version": "1",
        "outputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 16], "data": DATA}
            for n in ("OUTPUT0", "OUTPUT1")
        ],
    }
).encode()


@dataclass(frozen=True)
class Target:
    """What a client sends to: ``protocol`` "HTTP" (POST ``BODY`` to ``path``) or "gRPC"
    (``ModelInfer``, Ray Serve's ``application`` metadata set to ``app``), spread over
    ``ports`` (client i on ``ports[i % len(ports)]``, as a load balancer would)."""

    protocol: str
    ports: tuple[int, ...]
    path: str = ""
    app: str = ""


def sender(target: Target, index: int) -> Callable[[], None]:
    """One client's blocking send-and-read of one request to ``target``."""
    port = target.ports[index % len(target.ports)]
    if target.protocol == "HTTP":
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Content-Type": "application/json"}

        def send() -> None:
            connection.request("POST", target.path, BODY, headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status} from {target.path}")

        return send
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
        inputs.append(tensor)
    headers = {"application": target.app}
    return lambda: client.infer(MODEL, inputs, headers=headers) and None


def measure(target: Target, seconds: float, clients: int) -> tuple[float, int]:
    """Run in the load process: requests per second that ``clients`` closed-loop threads
    complete in ``seconds`` after a 1 s warm-up on the same connections, and the requests
    sent in all (warm-up included)."""
    senders = [sender(target, i) for i in range(clients)]
    begin = time.monotonic() + 1
    end = begin + seconds
    done = [0] * clients
    sent = [0] * clients
    errors: list[Exception] = []

    def run(index: int) -> None:
        send = senders[index]
        try:
            while (now := time.monotonic()) < end:
                send()
                sent[index] += 1
                done[index] += now >= begin
        except Exception as exc:  # noqa: BLE001 (reported below: a failed setup is no figure)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]!r} {errors[0]}")
    return sum(done) / seconds, sum(sent)


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes ``pids`` have used."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def ray_pids(title: str) -> list[int]:
    """The Ray worker processes whose title starts with ``ray::{title}``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if command.startswith(f"ray::{title}".encode()):
                found.append(int(entry.name))
    return found


@contextmanager
def despina_serve() -> Iterator[tuple[int, int]]:
    """``despina serve`` on a free port, HTTP only; yields its port and pid once ready."""
    from despina.testing import free_port

    port = free_port()
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "despina"),
            "serve",
            *ARGS,
            f"--http-port={port}",
            "--allow-grpc=false",
            "--allow-metrics=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("despina serve did not start") from None
                time.sleep(0.2)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(30)


class Noop:
    """Ray Serve's ceiling: reads the request, answers a fixed body (HTTP) or message
    (gRPC ``ModelInfer``)."""

    def __init__(self) -> None:
        # Ray pickles the message by the module name Despina's gRPC adapter registers.
        import despina_deploy_ray.grpc_service  # noqa: F401
        from tritonclient.grpc import service_pb2

        response = service_pb2.ModelInferResponse(model_name=MODEL, model_version="1")
        for name in ("OUTPUT0", "OUTPUT1"):
            response.outputs.add(name=name, datatype="FP32", shape=[1, 16])
        response.raw_output_contents.extend([np.arange(16, dtype=np.float32).tobytes()] * 2)
        self.grpc_answer = response

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import Response

        await request.body()
        return Response(NOOP_ANSWER, media_type="application/json")

    async def ModelInfer(self, message: Any) -> Any:
        return self.grpc_answer


MODES: dict[str, dict[str, str]] = {
    # Ray Serve's defaults: HTTP/gRPC proxy actor -> replica by Ray actor calls, user code
    # on a loop of its own in the replica.
    "proxy": {},
    # Ray Serve's throughput-optimized mode without direct ingress: the same proxies,
    # Serve's internal calls over gRPC, router and user code on their process's main loop.
    "proxy-optimized": {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0",
    },
    # Ray Serve's throughput-optimized mode: each ingress replica listens itself (direct
    # ingress), Serve's internal calls over gRPC, user code on the replica's own loop.
    "direct": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"},
}


@contextmanager
def ray_cluster(mode: str, nodes: int) -> Iterator[tuple[int, int]]:
    """A local Ray cluster of ``nodes`` nodes in ``mode`` (:data:`MODES`), Serve's HTTP
    and gRPC proxies on the head; yields their ports. Everything is stopped on exit."""
    import despina_deploy_ray
    import ray
    from despina.testing import free_port
    from ray import serve
    from ray.cluster_utils import Cluster
    from ray.serve.config import gRPCOptions

    saved = dict(os.environ)
    node: dict[str, Any] = {"num_cpus": 4, "resources": {"node_slot": 1}}
    os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", **MODES[mode]})
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**node, "include_dashboard": False},
    )
    for _ in range(nodes - 1):
        cluster.add_node(**node)
    try:
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        cluster.wait_for_nodes()
        http_port, grpc_port = free_port(), free_port()
        serve.start(
            http_options={"host": "127.0.0.1", "port": http_port, "location": "HeadOnly"},
            grpc_options=gRPCOptions(
                port=grpc_port, grpc_servicer_functions=[despina_deploy_ray.SERVICER]
            ),
        )
        yield http_port, grpc_port
    finally:
        try:
            serve.shutdown()  # type: ignore[no-untyped-call]
        finally:
            ray.shutdown()
            cluster.shutdown()  # type: ignore[no-untyped-call]
            os.environ.clear()
            os.environ.update(saved)


def targets(app: str, protocol: str) -> list[int]:
    """The ports the replicas of ``app`` listen on for ``protocol`` ("HTTP"/"gRPC") under
    direct ingress (read from Serve's controller)."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    deadline = time.monotonic() + 60
    while True:
        groups: list[Any] = ray.get(controller.get_target_groups.remote(app))
        ports = [
            t.port
            for g in groups
            if g.app_name == app and g.protocol.value == protocol
            for t in g.targets
        ]
        if ports or time.monotonic() > deadline:
            return ports
        time.sleep(0.5)


def deploy(mode: str, replicas: list[int], http_port: int, grpc_port: int) -> dict[str, Setup]:
    """Deploy the no-op app and one Despina app per count in ``replicas``; returns the
    setups to measure, by name."""
    from despina_deploy_ray import despina_app
    from ray import serve

    actor: dict[str, Any] = {"num_cpus": 0.5}
    serve.run(
        serve.deployment(name="noop", ray_actor_options=actor)(Noop).bind(),
        name="noop",
        route_prefix="/noop",
    )
    apps = ["noop"]
    for count in replicas:
        # Two replicas take one node each; one takes no slot.
        slot = {"resources": {"node_slot": 1}} if count > 1 else {}
        app = f"despina{count}"
        serve.run(
            despina_app(ARGS, num_replicas=count, ray_actor_options={**actor, **slot}),
            name=app,
            route_prefix=f"/{app}",
        )
        apps.append(app)
    proxies = ray_pids("ProxyActor") if mode == "proxy" else []
    setups: dict[str, Setup] = {}
    for app in apps:
        label = "noop" if app == "noop" else "despina"
        if len(replicas) > 1 and app != "noop":
            label = f"despina, {app[7:]} replica{'s' if app != 'despina1' else ''}"
        pids = [*ray_pids(f"ServeReplica:{app}:"), *proxies]
        path = f"/{app}{PATH}"
        for protocol in ("HTTP", "gRPC") if len(replicas) == 1 else ("HTTP",):
            if mode == "direct":
                ports = targets(app, protocol)
            else:
                ports = [http_port if protocol == "HTTP" else grpc_port]
            setups[f"{label} {protocol}"] = Setup(Target(protocol, tuple(ports), path, app), pids)
    return setups


@dataclass(frozen=True)
class Setup:
    """One measured setup: where clients send, and the server-side processes whose CPU
    time is counted (replicas, and the proxy when there is one)."""

    target: Target
    pids: list[int]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1])
    parser.add_argument("--only", nargs="*", default=None, help="setup names to measure")
    options = parser.parse_args()
    rates: dict[str, list[float]] = {}
    costs: dict[str, list[float]] = {}
    # The clients run in a process of their own, started before Ray (the driver's Ray
    # threads would otherwise share their interpreter).
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as load, despina_serve() as (port, pid):
        own = Setup(Target("HTTP", (port,), PATH), [pid])
        for mode in options.modes:
            with ray_cluster(mode, options.nodes) as (http_port, grpc_port):
                deployed = deploy(mode, options.replicas, http_port, grpc_port)
                setups = {"despina serve": own, **deployed}
                if options.only is not None:
                    setups = {k: v for k, v in setups.items() if any(o in k for o in options.only)}
                names = list(setups)
                for round_ in range(options.rounds):
                    shift = round_ % len(names)
                    for name in names[shift:] + names[:shift]:
                        setup = setups[name]
                        before = cpu_seconds(setup.pids)
                        rate, sent = load.submit(
                            measure, setup.target, options.seconds, options.clients
                        ).result()
                        cost = (cpu_seconds(setup.pids) - before) / sent * 1000
                        key = f"{mode}: {name}"
                        rates.setdefault(key, []).append(rate)
                        costs.setdefault(key, []).append(cost)
                        print(
                            f"round {round_ + 1}: {key}: {rate:.0f}/s, {cost:.3f} ms CPU/request",
                            flush=True,
                        )
    report(rates, costs, options.rounds)


def report(rates: dict[str, list[float]], costs: dict[str, list[float]], rounds: int) -> None:
    """Print the medians, each as a ratio of its session's no-op (same protocol) and of
    ``despina serve`` measured in the same session."""
    print(
        f"\n| setup | infer/s (median of {rounds}) | all rounds | of the no-op "
        "| of despina serve | server CPU ms/request |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for key, values in rates.items():
        mode, _, name = key.partition(": ")
        median = statistics.median(values)
        noop = rates.get(f"{mode}: noop {name.rsplit(' ', 1)[-1]}")
        own = rates.get(f"{mode}: despina serve")
        of_noop = f"{median / statistics.median(noop):.0%}" if noop and "noop" not in name else ""
        of_serve = f"{median / statistics.median(own):.0%}" if own else ""
        all_rounds = ", ".join(f"{v:.0f}" for v in values)
        cost = statistics.median(costs[key])
        print(f"| {key} | {median:.0f} | {all_rounds} | {of_noop} | {of_serve} | {cost:.2f} |")


if __name__ == "__main__":
    main()
