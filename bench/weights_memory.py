"""Resident memory of a Python-backend model holding a large weight array at ``count: 4``:
Despina in process mode (a child per instance) and in-process (one loaded model shared
by the instances), and Triton 2.51 with ``--triton``. Each server runs alone on
127.0.0.1; the figure is the RSS and PSS summed over its process tree once the model is
ready. Results go to ``bench/results/weights_memory.md``::

    python bench/weights_memory.py --weights-mb 200 --count 4 --triton
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from python_servers import arguments, each_server, write_model, write_report

MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.weights = np.ones({elements}, dtype=np.float32)  # written: resident

    def execute(self, requests):
        outputs = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = pb_utils.Tensor("OUTPUT", x * self.weights[:1])
            outputs.append(pb_utils.InferenceResponse(output_tensors=[total]))
        return outputs
"""

CONFIG = """
name: "weights"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
{parameters}
"""


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        children = Path(f"/proc/{current}/task/{current}/children")
        if children.exists():
            pending.extend(int(c) for c in children.read_text().split())
    return found


def memory_mb(pid: int) -> tuple[int, float, float]:
    """(processes, RSS MB, PSS MB) summed over the process tree of ``pid``."""
    pids = tree(pid)
    kilobytes = {"Rss": 0, "Pss": 0}
    for each in pids:
        for line in Path(f"/proc/{each}/smaps_rollup").read_text().splitlines():
            field, _, rest = line.partition(":")
            if field in kilobytes:
                kilobytes[field] += int(rest.split()[0])
    return len(pids), kilobytes["Rss"] / 1024, kilobytes["Pss"] / 1024


def main() -> None:
    parser = arguments(__doc__, "weights_memory.md")
    parser.add_argument("--weights-mb", type=int, default=200)
    parser.add_argument("--count", type=int, default=4)
    options = parser.parse_args()
    model_py = MODEL_PY.format(elements=options.weights_mb * 2**20 // 4)
    with tempfile.TemporaryDirectory() as tmp:
        results = each_server(
            Path(tmp),
            lambda root, params: write_model(
                root, "weights", CONFIG.format(count=options.count, parameters=params), model_py
            ),
            options.triton,
            lambda process, _: memory_mb(process.pid),
        )
    write_report(
        options.output,
        f"A {options.weights_mb} MB weight array at `count: {options.count}` (Python backend)",
        f"`python bench/weights_memory.py --weights-mb {options.weights_mb} --count "
        f"{options.count}{' --triton' if options.triton else ''}`. Summed over the server's "
        "process tree once the model is ready (PSS counts a page shared by several "
        "processes once).",
        ["server", "processes", "RSS MB", "PSS MB"],
        ([name, str(n), f"{rss:.0f}", f"{pss:.0f}"] for name, (n, rss, pss) in results),
    )


if __name__ == "__main__":
    main()
