"""The Vertex AI routes of a real ``despina serve`` (a subprocess) started as Vertex AI
starts a container: ``AIP_MODE=PREDICTION``, ``AIP_HTTP_PORT``, ``AIP_PREDICT_ROUTE``,
``AIP_HEALTH_ROUTE`` and ``AIP_STORAGE_URI`` set, no flags; called with plain HTTP as
Vertex AI calls it (POST to the prediction route, GET the health route, the
``X-Vertex-Ai-Triton-Redirect`` header). Model: the example ``add_sub``, copied."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from despina.testing import free_port

pytest.importorskip("despina_backend_python")
requests = pytest.importorskip("requests")
httpclient = pytest.importorskip("tritonclient.http")

ROOT = Path(__file__).resolve().parents[3]
ADD_SUB = ROOT / "examples" / "model_repository" / "add_sub"
MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT = "X-Vertex-Ai-Triton-Redirect"
A = [1.0, 2.0, 3.0, 4.0]
B = [10.0, 20.0, 30.0, 40.0]
BODY = {
    "inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": A},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": B},
    ]
}
SUM = [11.0, 22.0, 33.0, 44.0]


def _env(repo: Path, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": str(port),
        "AIP_PREDICT_ROUTE": "/v1/endpoints/1/deployedModels/2:predict",
        "AIP_HEALTH_ROUTE": "/v1/endpoints/1/deployedModels/2",
        "AIP_STORAGE_URI": str(repo),
    }


@pytest.fixture
def vertex(tmp_path: Path) -> Iterator[tuple[str, str, int]]:
    """A server as Vertex AI starts it: (predict url, health url, the HTTP port asked for)."""
    repo = tmp_path / "repo"
    shutil.copytree(ADD_SUB, repo / "add_sub")
    port, http_port = free_port(), free_port()
    env = _env(repo, port)
    command = [
        *(sys.executable, "-m", "despina", "serve"),
        f"--http-port={http_port}",
        f"--metrics-port={free_port()}",
    ]
    log = tmp_path / "server.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    health = base + env["AIP_HEALTH_ROUTE"]
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                if requests.get(health, timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        yield base + env["AIP_PREDICT_ROUTE"], health, http_port
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_predict_and_health_as_vertex_ai_calls_them(vertex: tuple[str, str, int]) -> None:
    predict, health, http_port = vertex
    assert requests.get(health).status_code == 200
    answer = requests.post(health)
    assert (answer.status_code, answer.json()) == (405, {"error": "Method Not Allowed"})
    answer = requests.post(predict, json=BODY)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_name"] == "add_sub"
    assert answer.json()["outputs"][0]["data"] == SUM

    inputs = [
        httpclient.InferInput("INPUT0", [4], "FP32"),
        httpclient.InferInput("INPUT1", [4], "FP32"),
    ]
    inputs[0].set_data_from_numpy(np.array(A, dtype=np.float32), binary_data=True)
    inputs[1].set_data_from_numpy(np.array(B, dtype=np.float32), binary_data=True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs
    )
    answer = requests.post(predict, data=body, headers={"Content-Type": f"{MIME}{header_length}"})
    assert answer.status_code == 200, answer.text
    result = httpclient.InferenceServerClient.parse_response_body(
        answer.content, header_length=int(answer.headers["Inference-Header-Content-Length"])
    )
    assert result.as_numpy("OUTPUT0").tolist() == SUM
    for content_type, error in (
        (f"{MIME}abc", "Unable to parse inference header size, got: abc"),
        (f"{MIME}-1", f"inference header size should be in range (0, {len(body)}), got: -1"),
    ):
        answer = requests.post(predict, data=body, headers={"Content-Type": content_type})
        assert (answer.status_code, answer.json()) == (400, {"error": error})
    answer = requests.post(predict, data=b"{bad")
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("failed to parse the request JSON buffer")
    base = predict.rsplit("/v1/", 1)[0]
    assert (requests.get(base + "/v2/health/ready").status_code, requests.post(base).content) == (
        400,
        b"",
    )
    # under AIP_MODE=PREDICTION the HTTP port is off unless asked for
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2)


def test_redirects_to_the_read_only_v2_routes(vertex: tuple[str, str, int]) -> None:
    predict, _, _ = vertex

    def redirect(endpoint: str, body: object = None) -> requests.Response:
        data = json.dumps(body) if body is not None else None
        return requests.post(predict, data=data, headers={REDIRECT: endpoint})

    assert redirect("v2/health/ready").status_code == 200
    assert redirect("v2/health/live").status_code == 200
    assert redirect("v2").json()["name"] == "triton"
    assert redirect("v2/models/add_sub").json()["name"] == "add_sub"
    assert redirect("v2/models/add_sub/ready").status_code == 200
    assert redirect("v2/models/add_sub/config").json()["backend"] == "python"
    assert redirect("v2/models/add_sub/stats").json()["model_stats"][0]["name"] == "add_sub"
    assert redirect("v2/models/stats").status_code == 200
    assert redirect("v2/repository/index").json()[0]["name"] == "add_sub"
    assert redirect("v2/systemsharedmemory/status").json() == []
    assert "nv_inference_request_success" in redirect("metrics").text
    answer = redirect("v2/models/add_sub/infer", BODY)
    assert answer.json()["outputs"][0]["data"] == SUM
    answer = redirect("v2/models/add_sub/versions/1/infer", BODY)
    assert answer.json()["model_version"] == "1"
    # changes need the HTTP port: 403; routes not forwarded: 400, no body
    for endpoint in ("v2/repository/models/add_sub/unload", "v2/systemsharedmemory/register"):
        answer = redirect(endpoint)
        assert (answer.status_code, answer.content) == (403, b""), endpoint
    for endpoint in ("v2/models/add_sub/generate", "v2/logging", "nowhere"):
        answer = redirect(endpoint)
        assert (answer.status_code, answer.content) == (400, b""), endpoint
    answer = redirect("v2/models/nope/infer", BODY)
    assert (answer.status_code, answer.json()) == (
        404,
        {"error": "Request for unknown model: 'nope' is not found"},
    )
    answer = requests.get(predict, headers={REDIRECT: "v2"})
    assert (answer.status_code, answer.content) == (405, b"")
    assert requests.post(predict, json=BODY).status_code == 200  # still serving


def test_start_up_refusals(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ADD_SUB, repo / "add_sub")
    shutil.copytree(ADD_SUB, repo / "other")
    config = repo / "other" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "add_sub"', 'name: "other"'))

    def start(env: dict[str, str], *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "despina", "serve", "--allow-metrics=false", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0
        return done.stdout + done.stderr

    env = _env(repo, 0)
    assert "Expect the model repository contains only a single model if default model is " in start(
        env
    )
    assert "Expect the default model 'nope' is loaded" in start(
        env, "--vertex-ai-default-model=nope"
    )
    del env["AIP_PREDICT_ROUTE"]
    assert "API_PREDICT_ROUTE is not defined for Vertex AI endpoint" in start(env)
