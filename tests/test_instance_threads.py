"""Per-instance thread defaults of the framework backends (issue 29, item 3): with N > 1
CPU instances and no thread setting, each PyTorch instance gets max(1, cores // N)
intra-op threads; ONNX Runtime's CPU instances share one session with onnxruntime's own
default (tested in its plugin's test_serving.py), and OpenVINO's infer requests share one
compiled model with OpenVINO's default; an explicit setting wins; one instance keeps the framework's default. ONNX Runtime's shared pool runs in a
server process of its own (once created, it is every session's in that process)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina import mc, threads_per_instance
from despina.testing import RepositoryBuilder, free_port

onnx_options = pytest.importorskip("despina_backend_onnx.options")

CORES = len(os.sched_getaffinity(0))
ROOT = Path(__file__).resolve().parents[1]


def config(*counts: int, params: dict[str, str] | None = None) -> mc.ModelConfig:
    result = mc.ModelConfig(name="m")
    for count in counts:
        result.instance_group.add(count=count, kind=mc.ModelInstanceGroup.KIND_CPU)
    for key, value in (params or {}).items():
        result.parameters[key].string_value = value
    return result


@pytest.mark.parametrize("counts", [(1,), (2,), (4,), (2, 3)])
def test_onnx_session_keeps_the_framework_default(counts: tuple[int, ...]) -> None:
    """The one session a model's CPU instances share keeps onnxruntime's pool size."""
    pytest.importorskip("onnxruntime")
    conf = config(*counts)
    opts = onnx_options.session_options(conf, "m")
    assert opts.intra_op_num_threads == 0
    assert opts.use_per_session_threads
    assert not onnx_options.states_threads(conf)


def test_onnx_explicit_thread_count_wins() -> None:
    pytest.importorskip("onnxruntime")
    for value in ("0", "3"):
        params = {"intra_op_thread_count": value}
        conf = config(4, params=params)
        opts = onnx_options.session_options(conf, "m")
        assert opts.intra_op_num_threads == int(value)
        assert onnx_options.states_threads(conf)


def test_gpu_instances_do_not_count() -> None:
    conf = config(1)
    conf.instance_group.add(count=4, kind=mc.ModelInstanceGroup.KIND_GPU)
    assert threads_per_instance(conf) == 0


def test_instances_split_the_cores() -> None:
    """The rule the torch backend applies in each instance's thread."""
    assert threads_per_instance(config(1)) == 0
    assert threads_per_instance(config(2)) == max(1, CORES // 2)
    assert threads_per_instance(config(8)) == max(1, CORES // 8)


def test_shared_pool_serves_every_instance(model_repository: RepositoryBuilder) -> None:
    """``--backend-config=onnxruntime,thread-pool=shared`` in a server process of its own:
    the sessions of a 3-instance model run on the shared pool and answer correctly; a bad
    value fails that model's load naming the choices."""
    pytest.importorskip("onnxruntime")
    onnx = (ROOT / "examples/model_repository/onnx_add_sub/1/model.onnx").read_bytes()
    three = "instance_group [ { count: 3 kind: KIND_CPU } ]"
    model_repository.add("add", three, {"1/model.onnx": onnx})
    port = free_port()
    command = [
        sys.executable, "-m", "despina", "serve", f"--model-repository={model_repository.root}",
        "--http-address=127.0.0.1", f"--http-port={port}", "--allow-grpc=false",
        "--allow-metrics=false", "--backend-config=onnxruntime,thread-pool=shared",
    ]  # fmt: skip
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(Exception):
                if client.is_model_ready("add"):
                    break
            time.sleep(0.1)
        rng = np.random.default_rng(0)
        for _ in range(6):
            a, b = (rng.standard_normal((1, 16), dtype=np.float32) for _ in range(2))
            inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer("add", inputs)
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        client.close()
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    assert f"onnxruntime sessions share one pool of {CORES} threads" in stderr


def test_thread_pool_value_is_checked() -> None:
    from despina import ConfigError

    threads = pytest.importorskip("despina_backend_onnx.threads")
    assert threads.wants_shared(None) is False
    assert threads.wants_shared("per-session") is False
    assert threads.wants_shared("shared") is True
    with pytest.raises(ConfigError, match="expected 'shared' or 'per-session'"):
        threads.wants_shared("global")
