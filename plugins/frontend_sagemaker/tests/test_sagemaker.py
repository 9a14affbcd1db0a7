"""The SageMaker API of a real ``despina serve`` (a subprocess, started the way a
SageMaker container starts: ``despina-sagemaker-serve`` reading ``SAGEMAKER_*``), called
as SageMaker calls a container: plain HTTP ``/ping``, ``POST /invocations`` (JSON and the
binary+json content type, the bodies boto3's ``invoke_endpoint`` carries; boto3 itself
too, its endpoint rewritten to the container), and the multi-model ``/models`` routes.
Models: the example ``add_sub`` (Python backend), copied."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.testing import free_port

pytest.importorskip("despina_backend_python")
requests = pytest.importorskip("requests")
httpclient = pytest.importorskip("tritonclient.http")

ROOT = Path(__file__).resolve().parents[3]
ADD_SUB = ROOT / "examples" / "model_repository" / "add_sub"
MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
A = [1.0, 2.0, 3.0, 4.0]
B = [10.0, 20.0, 30.0, 40.0]
BODY = {
    "inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": A},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": B},
    ]
}
SUM = [11.0, 22.0, 33.0, 44.0]
DIFF = [-9.0, -18.0, -27.0, -36.0]


@dataclass
class Serving:
    process: subprocess.Popen[str]
    url: str
    log: Path
    #: The multi-model root (``--sagemaker-mme-root``) when one was set.
    mme_root: Path = Path("/opt/ml/models")


def _add_sub(folder: Path, name: str | None = "add_sub") -> None:
    shutil.copytree(ADD_SUB, folder)
    if name is None:  # a config that names no model: SageMaker's archives carry none
        config = folder / "config.pbtxt"
        config.write_text(
            "\n".join(x for x in config.read_text().splitlines() if not x.startswith("name:"))
        )


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[object]:
    """Start a server: ``serve(command, env)``, ready on its SageMaker port (killed after)."""
    started: list[Serving] = []

    def start(
        command: list[str], env: Mapping[str, str], port: int, ready: str = "/ping"
    ) -> Serving:
        log = tmp_path / f"server{len(started)}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                command, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, text=True
            )
        serving = Serving(process, f"http://127.0.0.1:{port}", log)
        started.append(serving)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"server exited: {log.read_text()}")
            try:
                if requests.get(serving.url + ready, timeout=2).status_code == 200:
                    return serving
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready: {log.read_text()}")

    yield start
    for serving in started:
        if serving.process.poll() is None:
            serving.process.terminate()
            try:
                serving.process.wait(30)
            except subprocess.TimeoutExpired:
                serving.process.kill()
                serving.process.wait()


def _serve_script() -> list[str]:
    return [sys.executable, "-m", "despina_frontend_sagemaker.serve"]


@pytest.fixture
def single(serve: object, tmp_path: Path) -> Serving:
    """A single-model endpoint as SageMaker starts it: the serve command over a model
    folder holding add_sub alone, plus a multi-model root for the /models routes."""
    model_dir = tmp_path / "opt_ml_model"
    _add_sub(model_dir / "add_sub")
    mme_root = tmp_path / "opt_ml_models"
    mme_root.mkdir()
    port = free_port()
    env = {
        "DESPINA_SAGEMAKER_MODEL_REPO": str(model_dir),
        "SAGEMAKER_BIND_TO_PORT": str(port),
        "SAGEMAKER_TRITON_LOG_VERBOSE": "false",
        "SAGEMAKER_TRITON_ADDITIONAL_ARGS": f"--sagemaker-mme-root={mme_root} "
        "--sagemaker-address=127.0.0.1",
    }
    serving: Serving = serve(_serve_script(), env, port)  # type: ignore[operator]
    serving.mme_root = mme_root
    return serving


def _binary_request(binary_output: bool) -> tuple[bytes, int]:
    inputs = [
        httpclient.InferInput("INPUT0", [4], "FP32"),
        httpclient.InferInput("INPUT1", [4], "FP32"),
    ]
    inputs[0].set_data_from_numpy(np.array(A, dtype=np.float32), binary_data=True)
    inputs[1].set_data_from_numpy(np.array(B, dtype=np.float32), binary_data=False)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_output),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs
    )
    return body, int(header_length)


def test_ping_and_invocations_as_sagemaker_calls_them(single: Serving) -> None:
    url = single.url
    log = single.log.read_text()
    assert "Starting with the only existing model directory add_sub" in log
    assert requests.get(f"{url}/ping").status_code == 200
    answer = requests.post(f"{url}/ping")
    assert (answer.status_code, answer.json()) == (405, {"error": "Method Not Allowed"})

    answer = requests.post(
        f"{url}/invocations", data=json.dumps(BODY), headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [4], "data": SUM},
        {"name": "OUTPUT1", "datatype": "FP32", "shape": [4], "data": DIFF},
    ]

    # binary input: its JSON header's size in SageMaker's content type (the v2 header is
    # not read here), binary output: the same content type answers
    body, header_length = _binary_request(binary_output=True)
    answer = requests.post(
        f"{url}/invocations",
        data=body,
        headers={"Content-Type": f"{MIME}{header_length}", "Inference-Header-Content-Length": "3"},
    )
    assert answer.status_code == 200, answer.text
    content_type = answer.headers["Content-Type"]
    assert content_type.startswith(MIME)
    assert "Inference-Header-Content-Length" not in answer.headers
    result = httpclient.InferenceServerClient.parse_response_body(
        answer.content, header_length=int(content_type[len(MIME) :])
    )
    assert result.as_numpy("OUTPUT0").tolist() == SUM
    assert result.as_numpy("OUTPUT1").tolist() == DIFF


@pytest.mark.parametrize(
    ("content_type", "error"),
    [
        (f"x/{MIME}10", f"expect MIME type for binary data starts with '{MIME}', got: x/{MIME}10"),
        (f"{MIME}abc", "Unable to parse inference header size, got: abc"),
        (f"{MIME}-1", "inference header size should be in range (0, {size}), got: -1"),
        (f"{MIME}99999", "inference header size should be in range (0, {size}), got: 99999"),
    ],
)
def test_malformed_binary_content_types_are_400_with_tritons_texts(
    single: Serving, content_type: str, error: str
) -> None:
    body, _ = _binary_request(binary_output=False)
    answer = requests.post(
        f"{single.url}/invocations", data=body, headers={"Content-Type": content_type}
    )
    assert answer.status_code == 400
    assert answer.json() == {"error": error.format(size=len(body))}
    assert requests.get(f"{single.url}/ping").status_code == 200  # still serving


def test_bad_bodies_unknown_paths_and_methods(single: Serving) -> None:
    url = single.url
    answer = requests.post(f"{url}/invocations", data=b"{bad")
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("failed to parse the request JSON buffer")
    answer = requests.get(f"{url}/invocations")
    assert (answer.status_code, answer.json()) == (405, {"error": "Method Not Allowed"})
    for method, path in (("GET", "/foo"), ("GET", "/ping/"), ("PUT", "/models"), ("GET", "/v2")):
        answer = requests.request(method, url + path)
        assert (answer.status_code, answer.content) == (400, b""), (method, path)
    # gzip is not read: the body is taken as it came, as tritonserver's SageMaker server does
    answer = requests.post(
        f"{url}/invocations", data=json.dumps(BODY), headers={"Content-Encoding": "gzip"}
    )
    assert answer.status_code == 200
    answer = requests.post(
        f"{url}/invocations", data=json.dumps(BODY), headers={"Accept-Encoding": "gzip"}
    )
    assert "Content-Encoding" not in answer.headers


def test_multi_model_endpoint_load_list_invoke_unload(single: Serving) -> None:
    url = single.url
    root = single.mme_root
    _add_sub(root / "hash1" / "model", name=None)  # the archive's model at the url itself
    _add_sub(root / "hash2" / "model" / "inner")  # the archive's model one folder down
    assert requests.get(f"{url}/models").json() == {"models": []}

    load = {"model_name": "m1", "url": str(root / "hash1" / "model")}
    answer = requests.post(f"{url}/models", json=load)
    assert answer.status_code == 200, answer.text
    again = requests.post(f"{url}/models", json=load)
    assert again.status_code == 409
    assert again.json() == {
        "error": f"model repository '{root / 'hash1'}' has already been registered"
    }
    load2 = {"model_name": "m2", "url": str(root / "hash2" / "model")}
    answer = requests.post(
        f"{url}/models", json=load2, headers={"X-Amzn-SageMaker-Target-Model": "m2"}
    )
    assert answer.status_code == 200, answer.text
    listed = requests.get(f"{url}/models").json()["models"]
    assert sorted(listed, key=lambda m: m["modelName"]) == [
        {"modelName": "m1", "modelUrl": str(root / "hash1")},
        {"modelName": "m2", "modelUrl": str(root / "hash2" / "model")},
    ]
    assert requests.get(f"{url}/models/m1").json() == {
        "modelName": "m1",
        "modelUrl": str(root / "hash1"),
    }

    answer = requests.post(f"{url}/models/m1/invoke", data=json.dumps(BODY))
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_name"] == "m1"
    assert answer.json()["outputs"][0]["data"] == SUM
    body, header_length = _binary_request(binary_output=True)
    answer = requests.post(
        f"{url}/models/m2/invoke", data=body, headers={"Content-Type": f"{MIME}{header_length}"}
    )
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith(MIME)
    # an invocation's failure is 400, whatever its kind (tritonserver's SageMaker answers)
    answer = requests.post(
        f"{url}/models/m1/invoke",
        json={"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [1]}]},
    )
    assert answer.status_code == 400
    assert "'m1'" in answer.json()["error"], answer.text
    assert requests.post(f"{url}/models/nope/invoke", json=BODY).status_code == 404
    assert requests.get(f"{url}/models/nope").status_code == 404

    assert requests.delete(f"{url}/models/m1").status_code == 200
    assert requests.delete(f"{url}/models/m1").status_code == 404
    assert requests.post(f"{url}/models/m1/invoke", json=BODY).status_code == 404
    assert [m["modelName"] for m in requests.get(f"{url}/models").json()["models"]] == ["m2"]
    # the same archive loads again once unloaded (its folder was forgotten)
    assert requests.post(f"{url}/models", json=load).status_code == 200
    assert requests.delete(f"{url}/models/m1").status_code == 200
    assert requests.delete(f"{url}/models/m2").status_code == 200


def test_multi_model_load_refusals(single: Serving) -> None:
    url = single.url
    root = single.mme_root
    answer = requests.post(f"{url}/models", json={"model_name": "x", "url": "/tmp/elsewhere"})
    assert answer.status_code == 400
    assert answer.json() == {
        "error": f"Invalid \"url\" '/tmp/elsewhere': expected a path of the form "
        f"{root}/<hash>/model[/<subdir>]"
    }
    answer = requests.post(f"{url}/models", json={"model_name": "x", "url": "/proc/1/model"})
    assert (answer.status_code, answer.content) == (400, b"")
    answer = requests.post(f"{url}/models", data=b"{bad")
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("failed to parse the request JSON buffer")
    answer = requests.post(
        f"{url}/models", json={"model_name": "x", "url": str(root / "missing" / "model")}
    )
    assert answer.status_code == 400
    assert answer.json() == {
        "error": f"failed to register '{root / 'missing' / 'model'}', repository not found"
    }
    broken = root / "broken" / "model"
    _add_sub(broken, name=None)
    (broken / "1" / "model.py").write_text("raise MemoryError('out of memory here')\n")
    answer = requests.post(f"{url}/models", json={"model_name": "b", "url": str(broken)})
    assert answer.status_code == 507, answer.text  # an out-of-memory load failure
    assert requests.get(f"{url}/models").json() == {"models": []}
    assert requests.post(f"{url}/invocations", json=BODY).status_code == 200  # still serving


def test_invoke_endpoint_with_boto3(single: Serving) -> None:
    """boto3's ``sagemaker-runtime`` ``invoke_endpoint``, its request sent to the
    container's ``/invocations`` (what SageMaker's front does with it)."""
    boto3 = pytest.importorskip("boto3")
    client = boto3.client(
        "sagemaker-runtime",
        endpoint_url=single.url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )

    def to_container(request: Any, **_: object) -> None:
        assert request.url.endswith("/endpoints/despina/invocations")
        request.url = single.url + "/invocations"

    client.meta.events.register("before-send.sagemaker-runtime.InvokeEndpoint", to_container)
    answer = client.invoke_endpoint(
        EndpointName="despina", Body=json.dumps(BODY), ContentType="application/json"
    )
    assert answer["ContentType"] == "application/json"
    assert json.loads(answer["Body"].read())["outputs"][0]["data"] == SUM
    body, header_length = _binary_request(binary_output=True)
    answer = client.invoke_endpoint(
        EndpointName="despina", Body=body, ContentType=f"{MIME}{header_length}"
    )
    assert answer["ContentType"].startswith(MIME)
    result = httpclient.InferenceServerClient.parse_response_body(
        answer["Body"].read(), header_length=int(answer["ContentType"][len(MIME) :])
    )
    assert result.as_numpy("OUTPUT0").tolist() == SUM


def test_generate_stream_invocations_unknown_model_and_live_ping(
    serve: object, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    _add_sub(repo / "add_sub")
    port = free_port()
    base = [sys.executable, "-m", "despina", "serve", f"--model-repository={repo}"]
    flags = [
        "--allow-sagemaker=true",
        f"--sagemaker-port={port}",
        "--sagemaker-address=127.0.0.1",
        "--allow-http=false",
        "--allow-grpc=false",
        "--allow-metrics=false",
    ]
    env = {
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "add_sub",
        "SAGEMAKER_TRITON_INFERENCE_TYPE": "generate_stream",
        "SAGEMAKER_TRITON_PING_MODE": "live",
    }
    serving = serve(base + flags, env, port)  # type: ignore[operator]
    answer = requests.post(
        f"{serving.url}/invocations", json={"INPUT0": A, "INPUT1": B}, stream=True
    )
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    events = [line for line in answer.iter_lines() if line]
    assert len(events) == 1 and events[0].startswith(b"data: ")
    assert json.loads(events[0][6:])["OUTPUT0"] == SUM

    # without SAGEMAKER_TRITON_DEFAULT_MODEL_NAME: tritonserver's placeholder, unknown
    port = free_port()
    flags[1] = f"--sagemaker-port={port}"
    serving = serve(base + flags, {}, port)  # type: ignore[operator]
    answer = requests.post(f"{serving.url}/invocations", data=b"dummy")
    assert answer.status_code == 404
    assert answer.json() == {
        "error": "Request for unknown model: "
        "'unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME' is not found"
    }


def test_start_up_refusals(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _add_sub(repo / "add_sub")
    base = [sys.executable, "-m", "despina", "serve", f"--model-repository={repo}"]
    env = {**os.environ, "SAGEMAKER_TRITON_INFERENCE_TYPE": "wrong"}
    done = subprocess.run(
        [*base, "--allow-sagemaker=true", "--sagemaker-port=0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'wrong'" in done.stderr + done.stdout
    done = subprocess.run(
        [
            *base,
            "--allow-sagemaker=true",
            "--sagemaker-port=8080",
            "--sagemaker-safe-port-range=8081-9000",
            "--http-port=8000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert (
        "The server cannot listen to HTTP requests at port 8000, allowed port range is "
        "[8081, 9000]" in done.stderr + done.stdout
    )
    # the serve command's own checks
    model_dir = tmp_path / "two"
    _add_sub(model_dir / "a")
    _add_sub(model_dir / "b")
    done = subprocess.run(
        _serve_script(),
        env={**os.environ, "DESPINA_SAGEMAKER_MODEL_REPO": str(model_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "ERROR: More than 1 model directory found in model repository." in done.stdout
