"""The time to answer with a large BYTES tensor: a Python-backend model returns a
100,000-element string tensor; the figure is the client's round trip (binary output, body
read, not decoded), for Despina in process mode and in-process, and Triton 2.51 with
``--triton`` (``../shared/tools/tritonserver``). Servers run one after another on
127.0.0.1; results go to ``bench/results/bytes_response.md``::

    python bench/bytes_response.py --elements 100000 --requests 50 --triton
"""

from __future__ import annotations

import http.client
import json
import statistics
import tempfile
import time
from pathlib import Path

from python_servers import arguments, each_server, write_model, write_report

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


def main() -> None:
    parser = arguments(__doc__, "bytes_response.md")
    parser.add_argument("--elements", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=50)
    options = parser.parse_args()
    model_py = MODEL_PY.format(elements=options.elements)
    with tempfile.TemporaryDirectory() as tmp:
        results = each_server(
            Path(tmp),
            lambda root, params: write_model(
                root, "strings", CONFIG.format(parameters=params), model_py
            ),
            options.triton,
            lambda _, port: round_trips(port, options.requests),
        )
    write_report(
        options.output,
        f"A {options.elements:,}-element BYTES response (Python backend)",
        f"`python bench/bytes_response.py --elements {options.elements} --requests "
        f"{options.requests}{' --triton' if options.triton else ''}`. The model returns a "
        "prebuilt object array; the time is the client's round trip over HTTP on one "
        "connection with the output as a binary tensor (body read, not decoded).",
        ["server", "median ms", "min ms", "max ms"],
        (
            [name, f"{statistics.median(t):.1f}", f"{min(t):.1f}", f"{max(t):.1f}"]
            for name, t in results
        ),
    )


if __name__ == "__main__":
    main()
