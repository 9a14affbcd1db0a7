"""The container image (deploy/container), built with build.sh and run with podman: it
runs as uid 1000, turns healthy, answers HTTP, gRPC and metrics, drains and exits 0 on
``podman stop``, and passes a tensor over 64 MB to a Python model with ``--shm-size=1g``
(without it, that request fails with Triton's error and the server serves on).

Runs with ``make image-test`` (``DESPINA_IMAGE_TEST=1``), never in ``make test``; skips
with the reason where podman cannot run containers.
"""

from __future__ import annotations

import contextlib
import os
import re
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from image_models import DRAIN_STARTED
from podman_kit import Container
from tritonclient.utils import InferenceServerException

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get("DESPINA_IMAGE_TEST"),
        reason="the container image test runs with `make image-test` (needs podman)",
    ),
    pytest.mark.timeout(1800),  # the first test builds the image (and its base if missing)
]

#: Elements of an FP32 tensor larger than a container's default 64 MB /dev/shm (68 MiB).
BIG = 17 << 20


def infer(
    protocol: str, container: Container, model: str, inputs: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Send FP32 ``inputs`` to ``model`` with tritonclient; every output of the model's
    config (``OUTPUT0``, and ``OUTPUT1`` for two inputs) as numpy."""
    outputs = [f"OUTPUT{i}" for i in range(len(inputs))]
    if protocol == "http":
        client = httpclient.InferenceServerClient(container.url(8000), network_timeout=120)
        options: dict[str, float] = {}
        wanted = [httpclient.InferRequestedOutput(name, binary_data=True) for name in outputs]
        tensors = [httpclient.InferInput(k, list(v.shape), "FP32") for k, v in inputs.items()]
    else:
        client = grpcclient.InferenceServerClient(container.url(8001))
        options = {"client_timeout": 120}
        wanted = [grpcclient.InferRequestedOutput(name) for name in outputs]
        tensors = [grpcclient.InferInput(k, list(v.shape), "FP32") for k, v in inputs.items()]
    for tensor, array in zip(tensors, inputs.values(), strict=True):
        tensor.set_data_from_numpy(array)
    with contextlib.closing(client):
        result = client.infer(model, tensors, outputs=wanted, **options)
        return {name: result.as_numpy(name) for name in outputs}


def assert_add_sub(
    container: Container, a: np.ndarray, b: np.ndarray, protocol: str, model: str = "add_sub"
) -> None:
    """``model`` (``add_sub`` or ``add_sub_onnx``) answers a + b and a - b."""
    out = infer(protocol, container, model, {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


def big_tensors() -> tuple[np.ndarray, np.ndarray]:
    """INPUT0 over 64 MB, INPUT1 one element (the model broadcasts it)."""
    return np.arange(BIG, dtype=np.float32), np.array([0.5], np.float32)


def test_the_server_runs_as_uid_1000(server: Container) -> None:
    assert server.inspect()["Config"]["User"] == "1000:1000"
    assert server.exec("id", "-u").stdout.strip() == "1000"
    status = server.exec("cat", "/proc/1/status").stdout  # PID 1: despina serve
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert uids == ["1000"] * 4, status  # real, effective, saved, filesystem


def test_the_healthcheck_turns_healthy(server: Container) -> None:
    healthcheck = server.inspect()["Config"]["Healthcheck"]["Test"]
    assert "/v2/health/ready" in " ".join(healthcheck)
    checked = server.podman("healthcheck", "run", server.name, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert server.inspect()["State"]["Health"]["Status"] == "healthy"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(("model", "shape"), [("add_sub", [5]), ("add_sub_onnx", [3, 4])])
def test_inference_gives_the_right_numbers(
    server: Container, protocol: str, model: str, shape: list[int]
) -> None:
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    assert_add_sub(server, a, b, protocol, model)


def test_metrics_answer_on_8002(server: Container) -> None:
    assert_add_sub(server, np.ones(3, np.float32), np.ones(3, np.float32), "http")
    with urllib.request.urlopen(f"http://{server.url(8002, '/metrics')}", timeout=10) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    success = r'^nv_inference_request_success\{model="add_sub",version="1"\} ([0-9.]+)$'
    counted = re.search(success, text, re.MULTILINE)
    assert counted is not None and float(counted[1]) >= 1, text[:2000]


def test_a_tensor_over_64_mb_reaches_a_python_model_with_shm_size_1g(server: Container) -> None:
    assert_add_sub(server, *big_tensors(), "http")


def test_without_shm_size_a_tensor_over_64_mb_fails_its_request_and_the_server_serves_on(
    launch: Callable[..., Container],
) -> None:
    container = launch("default-shm")
    shm_kib = int(container.exec("df", "-k", "/dev/shm").stdout.splitlines()[1].split()[1])
    assert shm_kib << 10 < BIG * 4  # podman's default /dev/shm (64 MB) has no room for it
    with pytest.raises(InferenceServerException) as refused:
        assert_add_sub(container, *big_tensors(), "http")
    assert "Failed to increase the shared memory pool size" in str(refused.value)
    assert "--shm-size" in str(refused.value)
    assert container.inspect()["State"]["Running"]
    for protocol in ("http", "grpc"):  # the same server and model process answer on
        assert_add_sub(container, np.arange(4, dtype=np.float32), np.ones(4, np.float32), protocol)


def test_podman_stop_drains_the_running_request_and_exits_0(
    launch: Callable[..., Container],
) -> None:
    container = launch("stop")
    data = np.arange(6, dtype=np.float32)
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(infer, "http", container, "drain", {"INPUT0": data})
        container.wait_for_file(DRAIN_STARTED, unless=answer.done)
        assert not answer.done(), answer.result()  # raises the request's error, if any
        # SIGTERM; SIGKILL (exit code 137) only if the server is still up 60 s later
        container.podman("stop", "--time", "60", container.name, timeout=120)
        np.testing.assert_array_equal(answer.result(timeout=60)["OUTPUT0"], data)
    state = container.inspect()["State"]
    assert (state["Status"], state["ExitCode"]) == ("exited", 0), state
    assert "shutting down" in container.logs()
