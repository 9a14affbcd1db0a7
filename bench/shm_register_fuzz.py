"""Shared-memory registration of server regions (security issue 37, item 1): a bounded fuzz.

``despina serve --allow-client-shm=true`` with two process-mode Python models; the rings
of the second are caught while its ``initialize`` waits, and hard-linked under attacker
names. Then ``--attempts`` registrations (HTTP or gRPC at random, tritonclient), of keys
drawn at random among: the server's own files (by their own names), hard links to them,
regions a well-behaved client created (registered, then unregistered), absent keys and
malformed ones; the first quarter while the rings are still named, the rest after the
server unlinked them (the hard links are then the only names). Every answer is checked
against what the key calls for; a markdown section is printed::

    .venv/bin/python bench/shm_register_fuzz.py --attempts 2000
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from python_servers import write_model
from run import free_port, wait_ready
from tritonclient.utils import InferenceServerException

SHM_DIR = "/dev/shm"
REFUSAL = "Invalid shared memory region"
IO = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
ECHO = """
import os, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        deadline = time.monotonic() + 60
        while FLAG and not os.path.exists(FLAG) and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""
#: What each kind of key must get: refused as the server's own, accepted, or refused
#: for another reason (absent, malformed).
EXPECTED = {
    "own": "own",
    "hard link": "own",
    "client": "ok",
    "absent": "other",
    "malformed": "other",
}


def model_pids(server: int) -> list[int]:
    pids = []
    for task in os.listdir(f"/proc/{server}/task"):
        pids.extend(
            int(p) for p in Path(f"/proc/{server}/task/{task}/children").read_text().split()
        )
    return pids


def named_shm(pids: list[int]) -> set[str]:
    """The /dev/shm files the processes ``pids`` map under a name that still exists."""
    found = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            path = line.split(maxsplit=5)[-1]
            if path.startswith(SHM_DIR + "/") and not path.endswith("(deleted)"):
                found.add(path)
    return found


def attempt(clients: dict[str, object], protocol: str, key: str) -> tuple[str, float]:
    """Register ``key`` (then unregister it when accepted): the outcome and seconds."""
    name = f"fuzz_{uuid.uuid4().hex[:8]}"
    client = clients[protocol]
    start = time.perf_counter()
    try:
        client.register_system_shared_memory(name, key, 64)  # type: ignore[attr-defined]
    except InferenceServerException as exc:
        elapsed = time.perf_counter() - start
        status = str(exc.status())
        if status.startswith("5") or status in ("StatusCode.INTERNAL", "StatusCode.UNKNOWN"):
            return f"5xx {status}: {exc.message()}", elapsed
        if status not in ("400", "StatusCode.INVALID_ARGUMENT"):
            return f"status {status}", elapsed
        return ("own" if REFUSAL in (exc.message() or "") else "other"), elapsed
    elapsed = time.perf_counter() - start
    client.unregister_system_shared_memory(name)  # type: ignore[attr-defined]
    return "ok", elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=37)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="despina_shm_fuzz_"))
    flag = work / "initialize-now"
    write_model(work / "repo", "echo", IO, "FLAG = ''\n" + ECHO)
    write_model(work / "repo", "slow_init", IO, f"FLAG = {str(flag)!r}\n" + ECHO)
    http_port, grpc_port = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "despina", "serve", f"--model-repository={work / 'repo'}",
         "--model-control-mode=explicit", "--load-model=echo", "--allow-client-shm=true",
         "--http-address=127.0.0.1", f"--http-port={http_port}", "--grpc-address=127.0.0.1",
         f"--grpc-port={grpc_port}", "--allow-metrics=false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    regions, links = [], []
    try:
        wait_ready(http_port, server)
        clients = {
            "http": httpclient.InferenceServerClient(f"127.0.0.1:{http_port}"),
            "grpc": grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}"),
        }
        before = named_shm(model_pids(server.pid))
        loader = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        loading = threading.Thread(target=loader.load_model, args=("slow_init",))
        loading.start()
        deadline = time.monotonic() + 30
        while len(own := sorted(named_shm(model_pids(server.pid)) - before)) < 2:
            assert time.monotonic() < deadline, "the rings never appeared"
            time.sleep(0.02)
        for path in own:
            for _ in range(4):
                links.append(os.path.join(SHM_DIR, f"despina_fuzz_{uuid.uuid4().hex}"))
                os.link(path, links[-1])
        for index in range(8):
            key = f"/despina_fuzz_client_{uuid.uuid4().hex}"
            regions.append((key, shm.create_shared_memory_region(f"c{index}", key, 256)))
        keys = {
            "own": ["/" + os.path.relpath(p, SHM_DIR) for p in own],
            "hard link": ["/" + os.path.relpath(p, SHM_DIR) for p in links],
            "client": [key for key, _ in regions],
            "absent": [f"/despina_fuzz_absent_{uuid.uuid4().hex}" for _ in range(8)],
            "malformed": ["", "/", "..", "/a/b", "/../etc/passwd", "x" * 300, "/\u00e9\u0000"],
        }
        outcomes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        seconds: dict[str, list[float]] = collections.defaultdict(list)
        wrong: list[str] = []
        phase = "rings named"
        for number in range(args.attempts):
            if number == args.attempts // 4:
                flag.touch()
                loading.join(60)
                ready = clients["http"].is_model_ready("slow_init")  # type: ignore[attr-defined]
                assert ready, "slow_init did not load"
                assert not any(os.path.exists(p) for p in own), "rings still named"
                phase = "rings unlinked"
            kind = rng.choice(list(keys))
            protocol = rng.choice(["http", "grpc"])
            got, elapsed = attempt(clients, protocol, rng.choice(keys[kind]))
            outcomes[(phase, kind, got)] += 1
            seconds[kind].append(elapsed)
            if got != EXPECTED[kind]:
                wrong.append(f"{phase} {kind} {protocol}: {got}")
        data = np.arange(4, dtype=np.float32)
        tensor = httpclient.InferInput("IN", [4], "FP32")
        tensor.set_data_from_numpy(data)
        served = clients["http"].infer("echo", [tensor]).as_numpy("OUT")  # type: ignore[attr-defined]
        alive = server.poll() is None and bool(np.array_equal(served, data))
    finally:
        flag.touch()
        for path in links:
            os.unlink(path)
        for _, handle in regions:
            shm.destroy_shared_memory_region(handle)
        server.terminate()
        server.wait(30)
    print("| phase | key | outcome | attempts |\n|---|---|---|---:|")
    for (phase_, kind, got), count in sorted(outcomes.items()):
        print(f"| {phase_} | {kind} | {got} | {count} |")
    print("\n| key | register p50 ms | p99 ms |\n|---|---:|---:|")
    for kind, values in sorted(seconds.items()):
        q = statistics.quantiles(values, n=100)
        print(f"| {kind} | {q[49] * 1e3:.2f} | {q[98] * 1e3:.2f} |")
    print(f"\nattempts {args.attempts}, unexpected answers {len(wrong)}, server alive and "
          f"serving after: {alive}")  # fmt: skip
    for line in wrong[:20]:
        print("-", line)


if __name__ == "__main__":
    main()
