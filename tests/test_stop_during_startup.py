"""A stop signal while the start-up models load ends ``despina serve`` promptly: the load
still running is cancelled, what was loaded is unloaded, and the process exits 0 without
ever serving (a pod terminated during a long start-up is not kept waiting for it)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from despina.testing import RepositoryBuilder

pytest.importorskip("despina_backend_python")

#: A Python model whose initialize takes longer than any test may wait.
SLOW_INIT = """
import time

class TritonPythonModel:
    def initialize(self, args):
        time.sleep(600)

    def execute(self, requests):
        return []
"""
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
"""
QUICK = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests]
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_while_models_load_ends_the_start(
    model_repository: RepositoryBuilder, tmp_path: Path, sig: signal.Signals
) -> None:
    model_repository.add("quick", CONFIG.format(name="quick"), {"1/model.py": QUICK})
    model_repository.add("slow", CONFIG.format(name="slow"), {"1/model.py": SLOW_INIT})
    log = tmp_path / "serve.log"
    command = [
        sys.executable,
        "-m",
        "despina",
        "serve",
        f"--model-repository={model_repository.root}",
    ]
    command += ["--http-port=0", "--grpc-port=0", "--allow-metrics=false"]
    with log.open("w") as handle:
        server = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "successfully loaded 'quick'" not in log.read_text():
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        server.send_signal(sig)
        assert server.wait(timeout=60) == 0, log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = log.read_text()
    assert "shutting down before the start finished" in text
    assert "successfully unloaded 'quick'" in text
    assert "Started HTTPService" not in text
