"""Numbers are ASCII digits only (found by `make fuzz`: a gRPC model_version "³" answered
INTERNAL, since str.isdigit() accepts it and int() does not; "٣" read as version 3).
Real server, real tritonclient on both protocols."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.testing import RepositoryBuilder, RunningServer, http_post
from tritonclient.utils import InferenceServerException

pytest.importorskip("despina_backend_python")

Start = Callable[..., RunningServer]
Client = Callable[..., Any]
MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests
        ]
"""
CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


@pytest.fixture
def running(model_repository: RepositoryBuilder, despina_server: Start) -> RunningServer:
    model_repository.add("m", CONFIG, {"3/model.py": MODEL, "٤/model.py": MODEL})
    return despina_server(model_repository.root)


@pytest.mark.parametrize("version", ["³", "٣", "3\u0663"])
def test_grpc_version_in_other_digits_is_invalid_argument(
    running: RunningServer, grpc_client: Client, version: str
) -> None:
    client = grpc_client(running)
    x = grpcclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.ones(1, np.float32))
    with pytest.raises(InferenceServerException) as failed:
        client.infer("m", [x], model_version=version)
    assert failed.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "version should be an integral value > 0" in failed.value.message()
    assert client.infer("m", [x], model_version="3").as_numpy("Y")[0] == 1


@pytest.mark.parametrize("version", ["³", "٣"])
def test_http_version_in_other_digits_matches_no_route(
    running: RunningServer, version: str
) -> None:
    """HTTP routes take ``[0-9]+`` versions, as Triton's: any other is no such path."""
    body = '{"inputs":[{"name":"X","shape":[1],"datatype":"FP32","data":[1]}]}'
    path = f"/v2/models/m/versions/{quote(version)}/infer"
    assert http_post(running.http_port, path, body)[0] == 404
    ok = http_post(running.http_port, "/v2/models/m/versions/3/infer", body)
    assert ok[0] == 200 and json.loads(ok[2])["outputs"][0]["data"] == [1.0]


def test_version_folder_in_other_digits_is_not_a_version(
    running: RunningServer, http_client: Client
) -> None:
    client = http_client(running)
    assert client.get_model_metadata("m")["versions"] == ["3"]
