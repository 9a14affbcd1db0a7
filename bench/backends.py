"""``make bench`` rows per backend and for the dynamic batcher.

Serves the example models (``examples/model_repository``) one backend at a time and runs
``bench/run.py`` on each, binary tensors over HTTP, writing
``bench/results/backend_<model>.md`` (the Python add_sub in both execution modes). Then serves the ONNX add_sub model with and without
``dynamic_batching`` at concurrency 32 and writes ``bench/results/dynamic_batching.md``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "model_repository"

#: example model -> perf_analyzer shapes (add_sub: 4 values unbatched; the others 1x16).
MODELS = {
    "add_sub": ["INPUT0:4", "INPUT1:4"],
    "onnx_add_sub": ["INPUT0:1,16", "INPUT1:1,16"],
    "torch_add_sub": ["INPUT__0:1,16", "INPUT__1:1,16"],
    "openvino_add_sub": ["INPUT0:1,16", "INPUT1:1,16"],
}

ONNX_CONFIG = """
backend: "onnxruntime"
max_batch_size: 32
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }}, {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }}, {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }} ]
{batching}
"""


def one_model_repository(tmp: Path, model: str) -> Path:
    """A repository holding only ``model`` (so start-up loads one framework)."""
    repo = tmp / model
    shutil.copytree(EXAMPLES / model, repo / model)
    return repo


IN_PROCESS = 'parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }\n'


def main() -> int:
    results = run.HERE / "results"
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(model, model, shapes) for model, shapes in MODELS.items()]
        runs.insert(1, ("add_sub", "add_sub_in_process", MODELS["add_sub"]))
        for model, label, shapes in runs:
            repo = one_model_repository(Path(tmp) / label, model)
            if label.endswith("_in_process"):
                with (repo / model / "config.pbtxt").open("a") as config:
                    config.write(IN_PROCESS)
            argv = ["--repository", str(repo), "--model", model, "--encoding", "binary"]
            argv += ["--concurrency", "1,8", "--out", str(results / f"backend_{label}.md")]
            for shape in shapes:
                argv += ["--shape", shape]
            run.main(argv)
        for label, batching in (("with", "dynamic_batching { }"), ("without", "")):
            repo = Path(tmp) / f"batching_{label}"
            target = repo / "onnx_add_sub"
            shutil.copytree(EXAMPLES / "onnx_add_sub", target)
            (target / "config.pbtxt").write_text(ONNX_CONFIG.format(batching=batching))
            argv = ["--repository", str(repo), "--model", "onnx_add_sub", "--encoding", "binary"]
            argv += ["--concurrency", "32", "--out", str(results / f"dynamic_batching_{label}.md")]
            argv += ["--shape", "INPUT0:1,16", "--shape", "INPUT1:1,16"]
            run.main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
