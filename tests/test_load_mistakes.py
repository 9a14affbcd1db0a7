"""The most common first mistakes in a model folder fail their load with a text that
names the cause and the fix (issue 29): no numeric version folder, a model file under
another name, a model file whose tensors the config does not list, an unknown platform
or backend. Real servers, real tritonclient (HTTP and gRPC); each case also checks that
applying the named fix makes the model load, where the fix is a file change."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

pytest.importorskip("despina_backend_onnx")
pytest.importorskip("despina_backend_python")

ROOT = Path(__file__).resolve().parents[1]
ONNX = (ROOT / "examples/model_repository/onnx_add_sub/1/model.onnx").read_bytes()
PY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return []
"""
IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
EXPLICIT = ["--model-control-mode=explicit", "--http-address=127.0.0.1", "--allow-metrics=false"]

Start = Callable[..., RunningServer]


@pytest.fixture
def server(model_repository: RepositoryBuilder, despina_server: Start) -> RunningServer:
    model_repository.root.mkdir(parents=True, exist_ok=True)
    return despina_server(model_repository.root, EXPLICIT)


def load_error(running: RunningServer, name: str) -> tuple[str, str]:
    """(HTTP status, text) of a load of ``name`` that must fail."""
    client = httpclient.InferenceServerClient(running.http_url)
    with pytest.raises(InferenceServerException) as failed:
        client.load_model(name)
    return str(failed.value.status()), failed.value.message()


def loads(running: RunningServer, name: str) -> bool:
    client = httpclient.InferenceServerClient(running.http_url)
    client.load_model(name)
    return bool(client.is_model_ready(name))


@pytest.mark.parametrize("config", [None, 'platform: "onnxruntime_onnx"'])
def test_model_file_beside_the_version_folder_names_the_move(
    model_repository: RepositoryBuilder, server: RunningServer, config: str | None
) -> None:
    """Triton's text first, then the fix. Without a config nothing names the backend,
    which Triton reports first (it looks at version folders only afterwards)."""
    folder = model_repository.add("m", config, {"model.onnx": ONNX})
    status, text = load_error(server, "m")
    assert status == "400"
    if config is None:
        assert "Invalid model name: Could not determine backend for model 'm'" in text
    else:
        assert (
            "at least one version must be available under the version policy of model 'm'" in text
        )
    assert "'model.onnx' lies directly in the model folder" in text
    assert "move it into a version folder, e.g. 'm/1/model.onnx'" in text
    (folder / "1").mkdir()
    (folder / "model.onnx").rename(folder / "1/model.onnx")
    assert loads(server, "m")


def test_non_numeric_version_folder_names_the_rename(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    folder = model_repository.add("m", 'backend: "onnxruntime"', {"v1/model.onnx": ONNX})
    status, text = load_error(server, "m")
    assert status == "400"
    assert "at least one version must be available" in text
    assert "rename folder 'v1' to '1'" in text
    (folder / "v1").rename(folder / "1")
    assert loads(server, "m")


def test_no_config_and_no_version_folder_asks_for_the_backend(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    """qa/L0_model_config common/no_version: a config without backend or platform, in a
    folder without version folders, is refused for its name, as Triton refuses it."""
    model_repository.add("no_version", IO, {})
    _, text = load_error(server, "no_version")
    assert (
        "Invalid model name: Could not determine backend for model 'no_version' with no "
        "backend in model configuration. Expected model name of the form "
        "'model.<backend_name>'."
    ) in text


def test_backend_taken_from_the_model_name(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    """qa/L0_model_config custom/*: a model named ``<name>.<backend>`` whose config names
    no backend is served by that backend, with ``model.<backend>`` as its model file."""
    pytest.importorskip("despina_backend_qa")
    model_repository.add("m.identity", IO, {"1/.keep": ""})
    model_repository.add("m.foo_bar", IO, {"1/.keep": ""})
    assert loads(server, "m.identity")
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config("m.identity")
    assert (config["backend"], config["default_model_filename"]) == ("identity", "model.identity")
    _, text = load_error(server, "m.foo_bar")
    assert (
        "unable to find backend library for backend 'foo_bar', try specifying runtime on the "
        "model configuration"
    ) in text


def test_python_model_beside_an_empty_version_folder(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    model_repository.add("p", f'backend: "python"\n{IO}', {"model.py": PY_MODEL, "1/.keep": ""})
    _, text = load_error(server, "p")
    assert "Python model file not found in '1/model.py'" in text
    assert "'model.py' lies directly in the model folder: move it to 'p/1/model.py'" in text


def test_model_file_under_another_name_without_config(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    folder = model_repository.add("resnet", None, {"1/resnet.onnx": ONNX})
    status, text = load_error(server, "resnet")
    assert status == "400"
    assert "Could not determine backend for model 'resnet'" in text  # Triton's text
    assert (
        "version folder 1 holds 'resnet.onnx' but the onnxruntime backend looks for "
        "'model.onnx': rename it to 'model.onnx' or set default_model_filename: "
        '"resnet.onnx"'
    ) in text
    # The second fix named: default_model_filename alone (the backend is told by extension).
    (folder / "config.pbtxt").write_text('default_model_filename: "resnet.onnx"\n')
    assert loads(server, "resnet")


def test_model_file_under_another_name_with_config(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    folder = model_repository.add(
        "resnet", 'platform: "onnxruntime_onnx"\n', {"1/resnet.onnx": ONNX}
    )
    status, text = load_error(server, "resnet")
    assert status == "400"
    assert "model 'resnet': model file '1/model.onnx' not found" in text
    assert "version folder 1 holds 'resnet.onnx' but the onnxruntime backend looks for" in text
    assert "rename it to 'model.onnx'" in text
    (folder / "1/resnet.onnx").rename(folder / "1/model.onnx")
    assert loads(server, "resnet")


def test_python_model_under_another_name(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    model_repository.add("p", f'backend: "python"\n{IO}', {"1/mymodel.py": PY_MODEL})
    _, text = load_error(server, "p")
    assert "Python model file not found in '1/model.py'" in text
    assert "version folder 1 holds 'mymodel.py'" in text
    assert 'set default_model_filename: "mymodel.py"' in text


def test_no_config_and_no_auto_complete_loads_without_tensors(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    """As Triton's core: a config that lists no inputs or outputs loads (a Python model
    without ``auto_complete_config``); a request naming an input gets Triton's text."""
    model_repository.add("p", None, {"1/model.py": PY_MODEL})
    assert loads(server, "p")
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config("p")
    assert (config["input"], config["output"]) == ([], [])
    given = httpclient.InferInput("INPUT0", [16], "FP32")
    given.set_data_from_numpy(np.ones(16, np.float32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("p", [given])
    assert refused.value.status() == "400"
    assert refused.value.message() == "unexpected inference input 'INPUT0' for model 'p'"


def test_no_config_with_auto_complete_off(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """The backend refuses a model file whose tensors the config does not list."""
    model_repository.add("m", None, {"1/model.onnx": ONNX})
    running = despina_server(model_repository.root, [*EXPLICIT, "--strict-model-config=true"])
    _, text = load_error(running, "m")
    assert "configuration expects 0 inputs, model provides 2" in text


@pytest.mark.parametrize(
    ("platform", "fix"),
    [
        ("onnxruntime", 'write backend: "onnxruntime" (or platform: "onnxruntime_onnx")'),
        ("onnxruntime_onx", 'did you mean platform: "onnxruntime_onnx"?'),
        ("foo_bar", "known platforms: ensemble, onnxruntime_onnx, openvino, python"),
    ],
)
def test_unknown_platform_is_refused(
    model_repository: RepositoryBuilder, server: RunningServer, platform: str, fix: str
) -> None:
    model_repository.add("m", f'platform: "{platform}"\n{IO}', {"1/model.onnx": ONNX})
    status, text = load_error(server, "m")
    assert status == "400"
    assert f"unexpected platform type '{platform}' for m" in text  # Triton's text
    assert fix in text
    index = httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    (entry,) = [e for e in index if e["name"] == "m"]
    assert entry["state"] == "UNAVAILABLE"


def test_unknown_platform_over_grpc(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("m", f'platform: "foo_bar"\n{IO}', {"1/model.onnx": ONNX})
    running = despina_server(model_repository.root, ["--model-control-mode=explicit"])
    client = grpcclient.InferenceServerClient(running.grpc_url)
    with pytest.raises(InferenceServerException) as failed:
        client.load_model("m")
    assert failed.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected platform type 'foo_bar' for m" in failed.value.message()


def test_unknown_backend_names_the_installed_ones(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    model_repository.add("m", f'backend: "foo_bar"\n{IO}', {"1/model.onnx": ONNX})
    status, text = load_error(server, "m")
    assert status == "400"
    assert "unknown backend 'foo_bar'; installed backends: " in text
    assert "onnxruntime" in text and "python" in text
    assert "unable to find backend library for backend 'foo_bar'" in text  # Triton's words


def test_known_platform_without_its_backend(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    model_repository.add("m", f'platform: "tensorflow_graphdef"\n{IO}', {"1/model.graphdef": b""})
    _, text = load_error(server, "m")
    assert "platform 'tensorflow_graphdef' needs unknown backend 'tensorflow'" in text


def test_backend_wins_over_platform_as_in_triton(
    model_repository: RepositoryBuilder, server: RunningServer
) -> None:
    """Triton ignores ``platform`` when ``backend`` is set: a Python model whose config
    also says platform "foo_bar" (or "onnxruntime_onnx") loads on the Python backend."""
    model_repository.add(
        "p", f'backend: "python"\nplatform: "foo_bar"\n{IO}', {"1/model.py": PY_MODEL}
    )
    model_repository.add(
        "q", f'backend: "python"\nplatform: "onnxruntime_onnx"\n{IO}', {"1/model.py": PY_MODEL}
    )
    assert loads(server, "p")
    assert loads(server, "q")


def test_startup_reports_the_fix_in_the_index(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """At start-up (no explicit load) the repository index carries the same reason."""
    model_repository.add("m", None, {"v2/model.onnx": ONNX})
    model_repository.add("good", None, {"1/model.onnx": ONNX})
    running = despina_server(model_repository.root, ["--exit-on-error=false"])
    index = httpclient.InferenceServerClient(running.http_url).get_model_repository_index()
    reasons = {e["name"]: e.get("reason", "") for e in index}
    states = {e["name"]: e.get("state") for e in index}
    assert states["good"] == "READY"
    assert "rename folder 'v2' to '2'" in reasons["m"]
