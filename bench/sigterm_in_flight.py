"""SIGTERM with requests in flight (reliability issue 37, item 4), on Despina or Triton.

A Python model ``sleepy`` sleeps 0.2 s per execution in 2 instances; ``--requests``
clients (tritonclient threads, one request each, HTTP or gRPC) send at once; SIGTERM
follows ``--after-s`` later. Then, on a connection opened before the signal, a request is
sent 0.1 s after it, and, on the sequence model ``counter`` (same delay, one instance), a
request continuing a sequence started before the signal and a new START. Every answer is
classified; the process's exit status and time are recorded. One line per run, printed
as a markdown table row::

    .venv/bin/python bench/sigterm_in_flight.py --server despina --protocol http
    .venv/bin/python bench/sigterm_in_flight.py --server triton --protocol grpc
"""

from __future__ import annotations

import argparse
import collections
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from python_servers import TRITON, write_model
from reliability import MODEL_PY, model_config
from run import free_port, wait_ready
from tritonclient.utils import InferenceServerException

SEQUENCE_PY = """\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.2)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
SEQUENCE_CONFIG = """\
name: "counter"
backend: "python"
max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }
instance_group { count: 1 kind: KIND_CPU }
sequence_batching { max_sequence_idle_microseconds: 3000000 }
"""


def answered(result: Any) -> bool:
    """Any answer counts (requests whose output is not checked)."""
    return True


def repository(root: Path, batching: bool) -> Path:
    config = model_config("sleepy", 0.2, 2)
    if batching:  # 64 requests in batches of 4: each execution sleeps 0.2 s per request
        config = config.replace("max_batch_size: 0", "max_batch_size: 4").replace(
            "dims: [ 4 ]", "dims: [ 1 ]"
        )
        config += "dynamic_batching { max_queue_delay_microseconds: 1000 }\n"
    write_model(root, "sleepy", config, MODEL_PY)
    write_model(root, "counter", SEQUENCE_CONFIG, SEQUENCE_PY)
    return root


class Run:
    """One server process and its clients."""

    def __init__(self, options: argparse.Namespace, root: Path) -> None:
        self.options = options
        self.http, self.grpc = free_port(), free_port()
        ports = [f"--http-port={self.http}", f"--grpc-port={self.grpc}"]
        if options.server == "triton":
            command = [str(TRITON), f"--model-repository={root}", "--allow-metrics=false"]
        else:
            despina = str(Path(sys.executable).parent / "despina")
            command = [despina, "serve", f"--model-repository={root}", "--allow-metrics=false"]
            command += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]
        command += [*ports, f"--exit-timeout-secs={options.exit_timeout_s}"]
        self.log = root.parent / "server.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        wait_ready(self.http, self.process, timeout_s=180)
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def client(self) -> Any:
        if self.options.protocol == "http":
            return httpclient.InferenceServerClient(f"127.0.0.1:{self.http}", network_timeout=60)
        return grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc}")

    def inputs(self, value: float) -> list[Any]:
        module = httpclient if self.options.protocol == "http" else grpcclient
        shape = [1, 1] if self.options.batching else [4]
        array = np.full(shape, value, np.float32)
        inputs = [module.InferInput(n, shape, "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(array)
        inputs[1].set_data_from_numpy(np.ones(shape, np.float32))
        return inputs

    def record(self, label: str, call: Callable[[], Any], expected: Any) -> None:
        """Run ``call`` and count how it ended under ``label``."""
        try:
            result = call()
        except InferenceServerException as exc:
            kind = f"{label}: {exc.status()} {str(exc.message())[:90]}"
        except Exception as exc:  # noqa: BLE001 - connection-level failures are counted
            kind = f"{label}: {type(exc).__name__} {str(exc)[:60]}"
        else:
            kind = f"{label}: ok" if expected(result) else f"{label}: WRONG"
        with self.lock:
            self.outcomes[kind] += 1

    def in_flight(self, index: int, started: threading.Barrier) -> None:
        client = self.client()
        inputs = self.inputs(float(index))
        started.wait()
        self.record(
            "in flight",
            lambda: client.infer("sleepy", inputs),
            lambda r: float(r.as_numpy("OUTPUT0").ravel()[0]) == index + 1,
        )

    def sequence(self, client: Any, value: int, flags: dict[str, bool]) -> Any:
        module = httpclient if self.options.protocol == "http" else grpcclient
        tensor = module.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], np.int32))
        return client.infer("counter", [tensor], sequence_id=value, **flags)


def measure(options: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(options, repository(Path(tmp) / "models", options.batching))
        signalled = threading.Event()

        def late() -> None:  # a connection opened before the signal, used 0.1 s after it
            client = run.client()
            client.infer("sleepy", run.inputs(0.0))
            ready.wait()
            signalled.wait()
            time.sleep(0.1)
            run.record("sent after", lambda: client.infer("sleepy", run.inputs(1.0)), answered)

        def follow_on() -> None:  # a sequence started before the signal, ended after it
            client = run.client()
            run.sequence(client, 7, {"sequence_start": True})
            ready.wait()
            signalled.wait()
            time.sleep(0.1)
            ending = {"sequence_end": True}
            run.record("sequence follow-on", lambda: run.sequence(client, 7, ending), answered)

        def new_start() -> None:  # a sequence started 0.1 s after the signal
            ready.wait()
            signalled.wait()
            time.sleep(0.1)
            starting = {"sequence_start": True}
            run.record("new START", lambda: run.sequence(run.client(), 8, starting), answered)

        ready = threading.Barrier(options.requests + 4)
        threads = [
            threading.Thread(target=run.in_flight, args=(i, ready)) for i in range(options.requests)
        ] + [threading.Thread(target=actor) for actor in (late, follow_on, new_start)]
        for thread in threads:
            thread.start()
        ready.wait()
        time.sleep(options.after_s)
        began = time.monotonic()
        run.process.send_signal(signal.SIGTERM)
        signalled.set()
        for thread in threads:
            thread.join(120)
        status = run.process.wait(120)
        exited = time.monotonic() - began
        if options.log:
            options.log.write_bytes(run.log.read_bytes())
    outcomes = "; ".join(f"{n} x {k}" for k, n in sorted(run.outcomes.items()))
    batching = "dynamic" if options.batching else "default"
    return (
        f"| {options.server} | {options.protocol} | {batching} | {options.exit_timeout_s} | "
        f"{status} | {exited:.2f} | {outcomes} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("despina", "triton"), default="despina")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--batching", action="store_true", help="sleepy with dynamic_batching")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--after-s", type=float, default=1.0)
    parser.add_argument("--exit-timeout-s", type=int, default=30)
    parser.add_argument("--log", type=Path, help="keep the server's log there")
    print(measure(parser.parse_args()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
