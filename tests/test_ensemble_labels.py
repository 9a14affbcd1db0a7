"""Classification labels of an ensemble's outputs, over HTTP and gRPC on a real server,
as Triton's ``qa/L0_infer`` checks them (its ``simple_*`` ensembles have no label file):
an ensemble output whose config names no ``label_filename`` takes the labels of the
step's output written to it; one that names its own keeps those."""

from __future__ import annotations

from collections.abc import Callable

import ens_backend
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

DOUBLE = """
backend: "enstoy"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
"""


def _ensemble(label_file: str) -> str:
    """X -> double -> Y, with ``label_file`` as Y's ``label_filename`` ("" for none)."""
    labels = f' label_filename: "{label_file}"' if label_file else ""
    return (
        'platform: "ensemble"\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ]{labels} }} ]\n'
        'ensemble_scheduling { step [ { model_name: "double" model_version: -1 '
        'input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" } } ] }\n'
    )


@pytest.fixture
def running(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> RunningServer:
    step_labels = "".join(f"step{n}\n" for n in range(4))
    files: dict[str, str | bytes] = {"1/model.ens": '{"op": "double"}', "labels.txt": step_labels}
    model_repository.add("double", DOUBLE, files)
    model_repository.add("inherits", _ensemble(""))
    own_labels = "".join(f"own{n}\n" for n in range(4))
    model_repository.add("own", _ensemble("own.txt"), {"own.txt": own_labels})
    return despina_server(model_repository.root, plugins=[ens_backend])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(("model", "label"), [("inherits", "step"), ("own", "own")])
def test_ensemble_output_labels(
    running: RunningServer, protocol: str, model: str, label: str
) -> None:
    module = httpclient if protocol == "http" else grpcclient
    url = running.http_url if protocol == "http" else running.grpc_url
    tensor = module.InferInput("X", [4], "FP32")
    tensor.set_data_from_numpy(np.array([1, 4, 2, 3], np.float32))
    wanted = module.InferRequestedOutput("Y", class_count=2)
    with module.InferenceServerClient(url) as client:
        result = client.infer(model, [tensor], outputs=[wanted])
    assert [entry.decode() for entry in result.as_numpy("Y")] == [
        f"8.000000:1:{label}1",
        f"6.000000:3:{label}3",
    ]
