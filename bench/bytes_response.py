"""The time to answer with a large BYTES tensor: a Python-backend model returns a
100,000-element string tensor; the figure is the client's round trip (binary output, body
read, not decoded), for Despina in process mode and in-process, and Triton 2.51 with
``--triton`` (``../shared/tools/tritonserver``). Servers run one after another on
127.0.0.1; results go to ``bench/results/bytes_response.md``::

    python bench/bytes_response.py --elements 100000 --requests 50 --triton
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import free_port, wait_ready

HERE = Path(__file__).resolve().parent
TRITON = HERE.parent.parent / "shared/tools/tritonserver"

MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        items = [b"item-%d" % i for i in range({elements})]
        self.items = np.array(items, dtype=np.object_)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", self.items)])
            for _ in requests
        ]
"""

CONFIG = """
name: "strings"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_STRING dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{parameters}
"""

IN_PROCESS = 'parameters { key: "DESPINA_EXECUTION_MODE" value: { string_value: "in-process" } }'


def write_repository(root: Path, elements: int, parameters: str) -> Path:
    """A repository holding the ``strings`` model."""
    folder = root / "strings"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG.format(parameters=parameters))
    (folder / "1/model.py").write_text(MODEL_PY.format(elements=elements))
    return root


def request_body() -> tuple[bytes, dict[str, str]]:
    """An inference request for OUTPUT as a binary tensor (one INT32 input)."""
    header = json.dumps(
        {
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1], "data": [0]}],
            "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header, {"Content-Type": "application/json"}


def round_trips(port: int, count: int) -> list[float]:
    """``count`` sequential requests on one connection (after two unmeasured); ms each."""
    body, headers = request_body()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    times = []
    for index in range(count + 2):
        start = time.perf_counter()
        connection.request("POST", "/v2/models/strings/infer", body, headers)
        response = connection.getresponse()
        data = response.read()
        elapsed = (time.perf_counter() - start) * 1000
        if response.status != 200:
            raise SystemExit(f"HTTP {response.status}: {data[:300]!r}")
        if index >= 2:
            times.append(elapsed)
    connection.close()
    return times


def serve(command: list[str], http_port: int, count: int) -> list[float]:
    """Start a server, measure, stop it."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(http_port, process, timeout_s=120)
        return round_trips(http_port, count)
    finally:
        process.terminate()
        process.wait(60)


def ports() -> list[str]:
    http, grpc, metrics = free_port(), free_port(), free_port()
    return [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--triton", action="store_true", help="also measure tritonserver")
    parser.add_argument("--output", type=Path, default=HERE / "results/bytes_response.md")
    options = parser.parse_args()
    despina = str(Path(sys.executable).parent / "despina")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repos = {
            "despina process mode": write_repository(Path(tmp) / "p", options.elements, ""),
            "despina in-process": write_repository(Path(tmp) / "i", options.elements, IN_PROCESS),
        }
        runs = [
            (
                name,
                [despina, "serve", "--model-repository", str(repo), "--http-address", "127.0.0.1"],
            )
            for name, repo in repos.items()
        ]
        if options.triton:
            runs.append(
                (
                    "triton 2.51",
                    [str(TRITON), "--model-repository", str(repos["despina process mode"])],
                )
            )
        for name, command in runs:
            flags = ports()
            times = serve([*command, *flags], int(flags[0].split("=")[1]), options.requests)
            rows.append((name, statistics.median(times), min(times), max(times)))
            print(f"{name}: median {rows[-1][1]:.1f} ms", flush=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# A {options.elements:,}-element BYTES response (Python backend)",
        "",
        f"{stamp}, {platform.node()} ({platform.machine()}), `python bench/bytes_response.py "
        f"--elements {options.elements} --requests {options.requests}"
        f"{' --triton' if options.triton else ''}`. The model returns a prebuilt object array; "
        "the time is the client's round trip over HTTP on one connection with the output as "
        "a binary tensor (body read, not decoded).",
        "",
        "| server | median ms | min ms | max ms |",
        "| --- | ---: | ---: | ---: |",
        *(f"| {n} | {med:.1f} | {lo:.1f} | {hi:.1f} |" for n, med, lo, hi in rows),
        "",
    ]
    options.output.write_text("\n".join(lines))
    print(f"written to {options.output}")


if __name__ == "__main__":
    main()
