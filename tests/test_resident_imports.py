"""What a serving ``despina serve`` keeps resident: ml_dtypes (about 2.5 MB per process) only
once a BF16 tensor is asked for; never prometheus-client's exposition servers (urllib,
wsgiref: the metrics plugin renders Triton's format itself), nor RE2 without a header
forward pattern; in a model process no logging, pathlib or concurrent.futures of ours. A real
server over HTTP and gRPC, a Python model in each execution mode reporting the modules of
the process it runs in (the model process; the serving process itself), the metrics
endpoint scraped; then BF16 models loaded (their configs bring ml_dtypes in) and served."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, free_port

tritonclient_http = pytest.importorskip("tritonclient.http")
tritonclient_grpc = pytest.importorskip("tritonclient.grpc")
ml_dtypes = pytest.importorskip("ml_dtypes")

#: Seconds the server gets to start on a busy host.
START_S = 120
#: Modules no process of an idle FP32 server holds (the server; each model process).
SERVER_WATCHED = ("ml_dtypes", "prometheus_client", "urllib.request", "wsgiref", "re2")
MODEL_WATCHED = (*SERVER_WATCHED, "logging", "pathlib", "concurrent.futures", "sysconfig")

#: OUT = IN (any datatype), and LOADED: which watched modules its process holds.
REPORTER = f"""
import json, sys
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        loaded = [m for m in {MODEL_WATCHED!r} if m in sys.modules]
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "IN")
            out = pb_utils.Tensor.from_dlpack("OUT", tensor.to_dlpack())
            report = pb_utils.Tensor("LOADED", np.array([json.dumps(loaded).encode()], np.object_))
            responses.append(pb_utils.InferenceResponse([out, report]))
        return responses
"""


def _config(datatype: str, mode: str) -> str:
    return f"""
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: {datatype} dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: {datatype} dims: [ 4 ] }},
         {{ name: "LOADED" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters {{ key: "DESPINA_EXECUTION_MODE" value {{ string_value: "{mode}" }} }}
"""


MODELS = {
    f"{datatype.lower()}_{mode.replace('-', '_')}": (datatype, mode)
    for datatype in ("TYPE_FP32", "TYPE_BF16")
    for mode in ("process", "in-process")
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, int]]:
    root = tmp_path_factory.mktemp("resident")
    builder = RepositoryBuilder(root / "models")
    for name, (datatype, mode) in MODELS.items():
        builder.add(name, _config(datatype, mode), {"1/model.py": REPORTER})
    http, grpc, metrics = free_port(), free_port(), free_port()
    log = root / "server.log"
    command = [
        sys.executable, "-m", "despina", "serve", f"--model-repository={builder.root}",
        f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}",
        "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1", "--allow-gpu-metrics=false",
        "--model-control-mode=explicit",
        *(f"--load-model={name}" for name in MODELS if name.startswith("type_fp32")),
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{http}")
        deadline = time.monotonic() + START_S
        while not _ready(client):
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.3)
        client.close()
        yield http, grpc, metrics
    finally:
        process.terminate()
        process.wait(60)


def _ready(client: object) -> bool:
    try:
        return bool(client.is_server_ready())  # type: ignore[attr-defined]
    except (OSError, tritonclient_http.InferenceServerException):
        return False


def _infer_http(
    http: int, model: str, array: np.ndarray, datatype: str
) -> tuple[np.ndarray, list[str]]:
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{http}")
    try:
        tensor = tritonclient_http.InferInput("IN", [4], datatype)
        tensor.set_data_from_numpy(array, binary_data=True)
        result = client.infer(model, [tensor])
        return result.as_numpy("OUT"), json.loads(result.as_numpy("LOADED")[0])
    finally:
        client.close()


def _infer_grpc(grpc: int, model: str, array: np.ndarray) -> tuple[np.ndarray, list[str]]:
    client = tritonclient_grpc.InferenceServerClient(f"127.0.0.1:{grpc}")
    try:
        tensor = tritonclient_grpc.InferInput("IN", [4], "FP32")
        tensor.set_data_from_numpy(array)
        result = client.infer(model, [tensor])
        return result.as_numpy("OUT"), json.loads(result.as_numpy("LOADED")[0])
    finally:
        client.close()


def test_a_server_without_bf16_tensors_holds_neither_ml_dtypes_nor_http_client_modules(
    server: tuple[int, int, int],
) -> None:
    http, grpc, metrics = server
    values = np.array([1.5, -2.0, 3.25, 0.0], np.float32)
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=30) as response:
        assert b"nv_inference_count" in response.read()
    for mode, watched in (("process", MODEL_WATCHED), ("in_process", SERVER_WATCHED)):
        out, loaded = _infer_http(http, f"type_fp32_{mode}", values, "FP32")
        assert out.tolist() == values.tolist()
        assert [m for m in loaded if m in watched] == [], mode
        out, loaded = _infer_grpc(grpc, f"type_fp32_{mode}", values)
        assert out.tolist() == values.tolist()
        assert [m for m in loaded if m in watched] == [], mode


def test_bf16_tensors_are_served_once_ml_dtypes_joins(server: tuple[int, int, int]) -> None:
    http, _, _ = server
    values = np.array([1.5, -2.0, 3.25, 0.0], ml_dtypes.bfloat16)
    client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{http}")
    try:
        for name in MODELS:
            if name.startswith("type_bf16"):
                client.load_model(name)
    finally:
        client.close()
    for mode in ("process", "in_process"):
        out, loaded = _infer_http(http, f"type_bf16_{mode}", values, "BF16")
        assert out.dtype == values.dtype and out.tolist() == values.tolist(), mode
        assert "ml_dtypes" in loaded, mode
