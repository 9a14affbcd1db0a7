"""Client-given model names and config fields naming files never reach outside the model
repository (the CVE-2025-23316 class): over HTTP (percent-encoded too) and gRPC, from the
repository and through load overrides. Each attack aims at a real Python model outside
the repository whose import would write a marker file; the marker must never appear."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from despina.testing import RepositoryBuilder, RunningServer, http_post

pytest.importorskip("despina_frontend_grpc")
pytest.importorskip("despina_backend_python")

LOCAL = ["--grpc-address=127.0.0.1", "--http-address=127.0.0.1", "--allow-metrics=false"]

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

#: A model whose import writes the marker named beside it: proof that it was imported.
PLANTED = """
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text("imported")
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())
        ]) for r in requests]
"""


class Setup:
    """A server in explicit mode over a repository, with a planted model folder outside."""

    def __init__(self, running: RunningServer, repository: Path, outside: Path) -> None:
        self.running = running
        self.repository = repository
        self.outside = outside

    def imported(self) -> list[Path]:
        """Every marker written by a planted model's import, anywhere under tmp."""
        return sorted(self.outside.parent.rglob("IMPORTED"))

    def http_load(self, quoted_name: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        """POST a load whose name is sent exactly as given (percent-encoding kept)."""
        assert self.running.http_port is not None
        status, _, raw = http_post(
            self.running.http_port,
            f"/v2/repository/models/{quoted_name}/load",
            json.dumps(body or {}),
        )
        return status, json.loads(raw)["error"] if status != 200 else ""


@pytest.fixture
def setup(
    tmp_path: Path,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
) -> Iterator[Setup]:
    outside = tmp_path / "outside"
    RepositoryBuilder(tmp_path).add("outside", CONFIG, {"1/model.py": PLANTED})
    (tmp_path / "evil.py").write_text(PLANTED)
    model_repository.add("inside", CONFIG, {"1/model.py": PLANTED.replace("IMPORTED", "OK")})
    running = despina_server(model_repository.root, args=[*LOCAL, "--model-control-mode=explicit"])
    yield Setup(running, model_repository.root, outside)


def override_body(config: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    parameters: dict[str, Any] = {"config": json.dumps(config)}
    for path, text in files.items():
        parameters[f"file:{path}"] = base64.b64encode(text.encode()).decode()
    return {"parameters": parameters}


def pb_config(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "backend": "python",
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        **fields,
    }


@pytest.mark.parametrize(
    "quoted",
    ["..%2Foutside", "%2E%2E%2Foutside", "%2E%2E", "..", "{outside_abs}", "%2F{outside_rel}"],
)
def test_http_load_names_do_not_leave_the_repository(setup: Setup, quoted: str) -> None:
    absolute = str(setup.outside).replace("/", "%2F")
    name = quoted.format(outside_abs=absolute, outside_rel=absolute.removeprefix("%2F"))
    status, error = setup.http_load(name)
    assert setup.imported() == []
    assert status == 400, error
    assert "must not contain path traversal characters" in error


@pytest.mark.parametrize("name", ["../outside", "{outside}", "..", ".", "", "  ", "a\x00b"])
def test_grpc_load_names_do_not_leave_the_repository(
    setup: Setup, grpc_client: Callable[..., Any], name: str
) -> None:
    from tritonclient.utils import InferenceServerException

    client = grpc_client(setup.running)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(name.format(outside=setup.outside))
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "model name" in caught.value.message().lower()
    assert setup.imported() == []


@pytest.mark.parametrize("length", [256, 300, 5000])
def test_overlong_names_are_refused_on_both_protocols(
    setup: Setup, grpc_client: Callable[..., Any], length: int
) -> None:
    from tritonclient.utils import InferenceServerException

    name = "m" * length
    status, error = setup.http_load(name)
    assert status == 400
    assert "at most 255 bytes long" in error
    assert len(error) < 300  # the name is quoted shortened
    with pytest.raises(InferenceServerException) as caught:
        grpc_client(setup.running).load_model(name)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_a_255_byte_name_is_looked_up(setup: Setup) -> None:
    status, error = setup.http_load("m" * 255)
    assert (status, error) == (
        404,
        f"failed to load '{'m' * 255}', failed to poll from model repository",
    )


@pytest.mark.parametrize("name", ["..", "/tmp", "../x", "x/y", ""])
def test_override_loads_with_bad_names_are_400(setup: Setup, name: str) -> None:
    body = override_body(pb_config("x"), {"1/model.py": PLANTED})
    status, error = setup.http_load(name.replace("/", "%2F") or "%20", body)
    assert status == 400, error
    assert "model name" in error.lower()
    assert setup.imported() == []


@pytest.mark.parametrize("field", ["{tmp}/evil.py", "../../evil.py", "../../outside/1/model.py"])
def test_default_model_filename_from_overrides_stays_in_the_version_folder(
    setup: Setup, field: str
) -> None:
    filename = field.format(tmp=setup.outside.parent)
    body = override_body(
        pb_config("fresh", default_model_filename=filename), {"1/model.py": PLANTED}
    )
    status, error = setup.http_load("fresh", body)
    assert status == 400, error
    assert "invalid default_model_filename" in error
    assert setup.imported() == []


@pytest.mark.parametrize("field", ["{tmp}/evil.py", "../../../evil.py"])
def test_default_model_filename_from_the_repository_stays_in_the_version_folder(
    setup: Setup, grpc_client: Callable[..., Any], field: str
) -> None:
    from tritonclient.utils import InferenceServerException

    filename = field.format(tmp=setup.outside.parent)
    folder = setup.repository / "escaping"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(f'{CONFIG}default_model_filename: "{filename}"\n')
    with pytest.raises(InferenceServerException) as caught:
        grpc_client(setup.running).load_model("escaping")
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "invalid default_model_filename" in caught.value.message()
    assert setup.imported() == []


def test_a_symlink_out_of_the_version_folder_is_refused(setup: Setup) -> None:
    folder = setup.repository / "linked"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG)
    (folder / "1" / "model.py").symlink_to(setup.outside / "1" / "model.py")
    status, error = setup.http_load("linked")
    assert status == 400, error
    assert "leads outside the folder it belongs to" in error
    assert setup.imported() == []


def test_a_model_folder_linked_out_of_the_repository_is_refused(setup: Setup) -> None:
    (setup.repository / "linked_folder").symlink_to(setup.outside)
    status, error = setup.http_load("linked_folder")
    assert status == 400, error
    assert "invalid model folder 'linked_folder'" in error
    assert setup.imported() == []


def test_models_inside_still_load_and_serve(setup: Setup, grpc_client: Callable[..., Any]) -> None:
    status, error = setup.http_load("inside")
    assert status == 200, error
    body = override_body(
        pb_config("fresh", default_model_filename="sub/m.py"), {"1/sub/m.py": PLANTED}
    )
    assert setup.http_load("fresh", body) == (200, "")
    assert grpc_client(setup.running).is_model_ready("fresh")
    assert (setup.repository / "inside" / "1" / "OK").exists()
    assert setup.imported() == []  # the override's copy writes its marker in its own folder
