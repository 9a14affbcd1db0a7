"""Resident memory of a Python-backend model holding a large weight array at ``count: 4``:
Despina in process mode (a child per instance) and in-process (one loaded model shared
by the instances), and Triton 2.51 with ``--triton``. Each server runs alone on
127.0.0.1; the figure is the RSS and PSS summed over its process tree once the model is
ready. Results go to ``bench/results/weights_memory.md``::

    python bench/weights_memory.py --weights-mb 200 --count 4 --triton
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from bytes_response import IN_PROCESS, TRITON, ports
from run import wait_ready

HERE = Path(__file__).resolve().parent

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


def write_repository(root: Path, weights_mb: int, count: int, parameters: str) -> Path:
    """A repository holding the ``weights`` model."""
    folder = root / "weights"
    (folder / "1").mkdir(parents=True)
    config = CONFIG.format(count=count, parameters=parameters)
    (folder / "config.pbtxt").write_text(config)
    (folder / "1/model.py").write_text(MODEL_PY.format(elements=weights_mb * 2**20 // 4))
    return root


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


def measure(command: list[str]) -> tuple[int, float, float]:
    """Start a server, wait until ready, measure, stop it."""
    flags = ports()
    process = subprocess.Popen(
        [*command, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_ready(int(flags[0].split("=")[1]), process, timeout_s=180)
        return memory_mb(process.pid)
    finally:
        process.terminate()
        process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights-mb", type=int, default=200)
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--triton", action="store_true", help="also measure tritonserver")
    parser.add_argument("--output", type=Path, default=HERE / "results/weights_memory.md")
    options = parser.parse_args()
    despina = [str(Path(sys.executable).parent / "despina"), "serve", "--http-address=127.0.0.1"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        process_repo = write_repository(Path(tmp) / "p", options.weights_mb, options.count, "")
        in_process = write_repository(
            Path(tmp) / "i", options.weights_mb, options.count, IN_PROCESS
        )
        runs = [
            ("despina process mode", [*despina, f"--model-repository={process_repo}"]),
            ("despina in-process", [*despina, f"--model-repository={in_process}"]),
        ]
        if options.triton:
            runs.append(("triton 2.51", [str(TRITON), f"--model-repository={process_repo}"]))
        for name, command in runs:
            rows.append((name, *measure(command)))
            print(f"{name}: {rows[-1][1]} processes, RSS {rows[-1][2]:.0f} MB", flush=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# A {options.weights_mb} MB weight array at `count: {options.count}` (Python backend)",
        "",
        f"{stamp}, {platform.node()} ({platform.machine()}), `python bench/weights_memory.py "
        f"--weights-mb {options.weights_mb} --count {options.count}"
        f"{' --triton' if options.triton else ''}`. Summed over the server's process tree "
        "once the model is ready (PSS counts a page shared by several processes once).",
        "",
        "| server | processes | RSS MB | PSS MB |",
        "| --- | ---: | ---: | ---: |",
        *(f"| {n} | {count} | {rss:.0f} | {pss:.0f} |" for n, count, rss, pss in rows),
        "",
    ]
    options.output.write_text("\n".join(lines))
    print(f"written to {options.output}")


if __name__ == "__main__":
    main()
