"""Model lifecycle as Triton's L0_lifecycle checks it (issue 40): start-up (``--load-model``
names, missing repositories, ports in use, flags), shutdown's in-flight log, version
policies, load retries and the load API's texts. Real servers, real tritonclient."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

pytest.importorskip("despina_backend_python")

Start = Callable[..., RunningServer]
ClientFactory = Callable[[RunningServer], Any]
PY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return []
"""
CONFIG = """
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
EXPLICIT = ["--model-control-mode=explicit", "--http-address=127.0.0.1", "--allow-metrics=false"]


@pytest.fixture
def repository(model_repository: RepositoryBuilder) -> RepositoryBuilder:
    model_repository.add("m", CONFIG, {"1/model.py": PY_MODEL})
    return model_repository


def test_wildcard_with_another_startup_model_stops_the_start(
    repository: RepositoryBuilder, despina_server: Start
) -> None:
    from despina.serving.server import StartupError

    text = "Wildcard model name '*' must be the ONLY startup model if specified at all."
    with pytest.raises(StartupError, match=text.replace("*", r"\*")):
        despina_server(repository.root, [*EXPLICIT, "--load-model=*", "--load-model=m"])


def test_missing_startup_model_is_logged_and_stops_the_start(
    repository: RepositoryBuilder, despina_server: Start, caplog: pytest.LogCaptureFixture
) -> None:
    from despina.serving.server import StartupError

    caplog.set_level(logging.ERROR)
    with pytest.raises(StartupError, match="does-not-exist"):
        despina_server(repository.root, [*EXPLICIT, "--load-model=does-not-exist"])
    assert (
        "failed to poll model 'does-not-exist': model not found in any model repository."
        in caplog.text
    )


def test_missing_startup_model_without_exit_on_error_serves_the_others(
    repository: RepositoryBuilder, despina_server: Start, http_client: ClientFactory
) -> None:
    args = [*EXPLICIT, "--exit-on-error=false", "--load-model=does-not-exist", "--load-model=m"]
    running = despina_server(repository.root, args)
    client = http_client(running)
    assert client.is_model_ready("m")
    assert not client.is_model_ready("does-not-exist")


def test_wildcard_given_twice_loads_everything(
    repository: RepositoryBuilder, despina_server: Start, http_client: ClientFactory
) -> None:
    running = despina_server(repository.root, [*EXPLICIT, "--load-model=*", "--load-model=*"])
    assert http_client(running).is_model_ready("m")


@pytest.mark.parametrize(
    ("service", "flag", "port"),
    [
        ("GRPC", "--grpc-port", "grpc_port"),
        ("HTTP", "--http-port", "http_port"),
        ("Metrics", "--metrics-port", "metrics_port"),
    ],
)
def test_port_in_use_stops_the_start_with_tritons_text(
    repository: RepositoryBuilder, despina_server: Start, service: str, flag: str, port: str
) -> None:
    """A second server on a port the first holds names the service and the socket."""
    from despina.serving.server import StartupError

    first = despina_server(repository.root, ["--http-address=127.0.0.1"])
    taken = getattr(first, port)
    text = f"failed to start {service} service: Unavailable - Socket '.*:{taken}' already in use"
    with pytest.raises(StartupError, match=f"^{text}$"):
        despina_server(repository.root, ["--http-address=127.0.0.1", f"{flag}={taken}"])


SLEEPY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(1)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


def test_stop_logs_each_models_in_flight_inferences(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    caplog: pytest.LogCaptureFixture,
    grpc_client: ClientFactory,
) -> None:
    """While a stop waits for accepted work, each second counts the requests not yet
    answered, as Triton's L0_lifecycle greps: 'Model 'm' (version 1) has N in-flight inferences'."""
    import numpy as np

    model_repository.add("slow", CONFIG, {"1/model.py": SLEEPY})
    running = despina_server(model_repository.root, ["--http-address=127.0.0.1"])
    client = grpc_client(running)
    infer = grpcclient.InferInput("INPUT0", [1], "FP32")
    infer.set_data_from_numpy(np.ones(1, dtype=np.float32))
    results: list[object] = []
    for _ in range(3):
        client.async_infer("slow", [infer], lambda result, error: results.append(error or result))
    deadline = time.monotonic() + 10
    while running.server.models.get("slow", "").scheduler.busy < 3:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    caplog.set_level(logging.INFO)
    running.stop()
    for count in (3, 2, 1):
        assert f"Model 'slow' (version 1) has {count} in-flight inferences" in caplog.text
    assert len(results) == 3
    client.close()


def test_missing_repository_stops_the_start(tmp_path: Path, despina_server: Start) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match=r"^Internal: failed to stat file /tmp/no-such-repo$"):
        despina_server(["/tmp/no-such-repo", tmp_path], ["--http-address=127.0.0.1"])


def test_missing_repository_without_exit_on_error_serves_not_live(
    tmp_path: Path, despina_server: Start, http_client: ClientFactory, grpc_client: ClientFactory
) -> None:
    """Triton's server that failed to initialize: not live, not ready, metadata served."""
    args = ["--http-address=127.0.0.1", "--exit-on-error=false", "--strict-readiness=false"]
    running = despina_server([tmp_path, Path("/tmp/no-such-repo")], args)
    for client in (
        http_client(running),
        grpc_client(running),
    ):
        assert not client.is_server_live()
        assert not client.is_server_ready()
        assert client.get_server_metadata() is not None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("-1:0.6", "expects device ID >= 0, got -1"),
        ("0:-0.4", "expects limit fraction to be in range [0.0, 1.0], got -0.400000"),
    ],
)
def test_invalid_model_load_gpu_limit_stops_the_start(
    tmp_path: Path, value: str, text: str
) -> None:
    import subprocess
    import sys

    command = [sys.executable, "-m", "despina", "serve", f"--model-repository={tmp_path}"]
    command += ["--http-address=127.0.0.1", "--model-load-gpu-limit", value]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert text in done.stderr


def test_specific_versions_without_a_folder_are_left_out(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    caplog: pytest.LogCaptureFixture,
    http_client: ClientFactory,
) -> None:
    """As Triton (L0_lifecycle test_file_override): a ``specific`` policy naming versions
    1 and 3 with only folder 3 serves version 3, and logs that 1 is missing."""
    policy = "version_policy: { specific: { versions: [1, 3] } }"
    model_repository.add("m", CONFIG + policy, {"3/model.py": PY_MODEL, "2/model.py": PY_MODEL})
    caplog.set_level(logging.ERROR)
    running = despina_server(model_repository.root, ["--http-address=127.0.0.1"])
    client = http_client(running)
    assert client.is_model_ready("m", "3")
    assert not client.is_model_ready("m", "1")
    assert not client.is_model_ready("m", "2")
    text = "version 1 is specified for model 'm', but the version directory is not present"
    assert text in caplog.text


def test_a_repository_given_twice_is_one(
    repository: RepositoryBuilder, despina_server: Start, http_client: ClientFactory
) -> None:
    """As Triton (L0_lifecycle test_config_override): no model of it 'appears in more
    than one model repository'."""
    args = [*EXPLICIT, "--load-model=m"]
    running = despina_server([repository.root, repository.root], args)
    assert http_client(running).is_model_ready("m")


#: Fails its first initialize (it leaves a file behind), as L0_lifecycle's retry_model.
FAILS_ONCE = """
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], args["model_version"], "tried")
        if not os.path.exists(marker):
            open(marker, "x").close()
            raise Exception("failing first load attempt")

    def execute(self, requests):
        return []
"""


@pytest.mark.parametrize("retries", [0, 1])
def test_model_load_retry_count(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    retries: int,
    http_client: ClientFactory,
) -> None:
    from despina.serving.server import StartupError

    model_repository.add("m", CONFIG, {"1/model.py": FAILS_ONCE})
    args = ["--http-address=127.0.0.1", f"--model-load-retry-count={retries}"]
    if not retries:
        with pytest.raises(StartupError, match="failing first load attempt"):
            despina_server(model_repository.root, args)
        return
    running = despina_server(model_repository.root, args)
    assert http_client(running).is_model_ready("m")


def test_file_override_errors_begin_as_tritons(
    repository: RepositoryBuilder, despina_server: Start, http_client: ClientFactory
) -> None:
    """L0_lifecycle test_file_override(_security): files without a config, and a file
    path that leaves the model folder, fail with texts that begin as Triton's."""
    running = despina_server(repository.root, EXPLICIT)
    client = http_client(running)
    with pytest.raises(InferenceServerException) as failed:
        client.load_model("m", files={"file:1/model.py": PY_MODEL.encode()})
    assert "failed to load 'm', failed to poll from model repository" in failed.value.message()
    config = '{"backend": "python"}'
    with pytest.raises(InferenceServerException, match="failed to load 'new_model'"):
        client.load_model("new_model", config=config, files={"file:../../escape": b"x"})


ENSEMBLE = """
platform: "ensemble"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "m" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" }
} ] }
"""


def test_an_ensemble_whose_step_was_unloaded_keeps_the_server_ready(
    repository: RepositoryBuilder, despina_server: Start, http_client: ClientFactory
) -> None:
    """L0_lifecycle test_concurrent_model_load_unload: Triton unloads an ensemble whose
    composing model was unloaded, so under strict readiness the server stays ready; the
    ensemble serves again once the model is loaded again."""
    repository.add("ens", ENSEMBLE, {"1/.keep": ""})
    running = despina_server(repository.root, [*EXPLICIT, "--load-model=ens"])
    client = http_client(running)
    assert client.is_model_ready("ens")
    client.unload_model("m")
    assert not client.is_model_ready("ens")
    assert client.is_server_ready()
    client.load_model("m")
    assert client.is_model_ready("ens")
    assert client.is_server_ready()


def test_a_repeated_config_field_given_one_object(
    repository: RepositoryBuilder, despina_server: Start, http_client: ClientFactory
) -> None:
    """L0_lifecycle test_concurrent_model_instance_load_sanity loads with
    ``"instance_group": {...}``: Triton's JSON parser takes one object where the field is
    repeated as a list of one."""
    running = despina_server(repository.root, EXPLICIT)
    client = http_client(running)
    config = json.dumps(
        {
            "backend": "python",
            "input": {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]},
            "output": {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]},
            "instance_group": {"kind": "KIND_CPU", "count": 2},
        }
    )
    client.load_model("m", config=config)
    assert client.get_model_config("m")["instance_group"][0]["count"] == 2


SLOW_INIT = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(4)

    def execute(self, requests):
        return []
"""


def test_python_instances_are_created_at_once(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """As Triton's test_concurrent_model_instance_load_speedup: a Python model's instances
    start together (the backend's parallel instance loading), so two whose ``initialize``
    takes 4 s each load in about 4 s, not 8."""
    import tritonclient.http as httpclient

    model_repository.add("slow_init", CONFIG, {"1/model.py": SLOW_INIT})
    running = despina_server(model_repository.root, EXPLICIT)
    client = httpclient.InferenceServerClient(running.http_url)
    config = {"instance_group": [{"kind": "KIND_CPU", "count": 2}]}
    began = time.monotonic()
    client.load_model("slow_init", config=json.dumps(config))
    took = time.monotonic() - began
    assert client.is_model_ready("slow_init")
    assert 4.0 <= took < 7.5, took
    client.close()
