"""Classification (top-k with labels) is done by the core: the same answer over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

LABELLED = """
backend: "toy"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def test_top_k_with_labels_over_both_protocols(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
    grpc_client: Callable[..., Any],
) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    model_repository.add(
        "labelled", LABELLED, {"1/model.toy": "", "labels.txt": "cat\ndog\nbird\nfish\n"}
    )
    running = despina_server(model_repository.root, plugins=[toy_backend])
    a = np.array([0.5, 3.0, 1.0, 2.0], np.float32)  # OUTPUT0 = a + 1
    expected = [b"4.000000:1:dog", b"3.000000:3:fish"]
    for module, client in ((httpclient, http_client(running)), (grpcclient, grpc_client(running))):
        inputs = [
            module.InferInput("INPUT0", [4], "FP32"),
            module.InferInput("INPUT1", [4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(np.ones(4, np.float32))
        outputs = [module.InferRequestedOutput("OUTPUT0", class_count=2)]
        result = client.infer("labelled", inputs, outputs=outputs)
        assert result.as_numpy("OUTPUT0").tolist() == expected, module.__name__


INTEGER = """
backend: "toy"
max_batch_size: 2
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] label_filename: "labels.txt" },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
"""


def test_integer_outputs_are_written_as_integers(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
    grpc_client: Callable[..., Any],
) -> None:
    """Triton writes a class's value as its data type: ``15:2``, not ``15.000000:2``."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    model_repository.add(
        "counts", INTEGER, {"1/model.toy": "", "labels.txt": "cat\ndog\nbird\nfish\n"}
    )
    running = despina_server(model_repository.root, plugins=[toy_backend])
    a = np.array([[3, 14, -7, 0], [1, 2, 3, 4]], np.int32)  # OUTPUT0 = a + 1, OUTPUT1 = a - 1
    expected0 = [[b"15:1:dog", b"4:0:cat"], [b"5:3:fish", b"4:2:bird"]]
    expected1 = [[b"13:1", b"2:0", b"-1:3"], [b"3:3", b"2:2", b"1:1"]]
    for module, client in ((httpclient, http_client(running)), (grpcclient, grpc_client(running))):
        inputs = [
            module.InferInput("INPUT0", [2, 4], "INT32"),
            module.InferInput("INPUT1", [2, 4], "INT32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(np.ones((2, 4), np.int32))
        outputs = [
            module.InferRequestedOutput("OUTPUT0", class_count=2),
            module.InferRequestedOutput("OUTPUT1", class_count=3),
        ]
        result = client.infer("counts", inputs, outputs=outputs)
        assert result.as_numpy("OUTPUT0").tolist() == expected0, module.__name__
        assert result.as_numpy("OUTPUT1").tolist() == expected1, module.__name__


WIDE = """
backend: "toy"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def test_an_output_over_a_million_elements_is_not_classified(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
    grpc_client: Callable[..., Any],
) -> None:
    """Newer Triton's bound (server #8603): at most 1,000,000 elements per batch row are
    classified; one more is the client's mistake (400 / INVALID_ARGUMENT), with its text.
    The server goes on serving."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    model_repository.add("wide", WIDE, {"1/model.toy": ""})
    running = despina_server(model_repository.root, plugins=[toy_backend])
    for module, client in ((httpclient, http_client(running)), (grpcclient, grpc_client(running))):
        with pytest.raises(InferenceServerException) as refused:
            _classify_arange(module, client, 1_000_001)
        assert refused.value.message() == "classification output tensor too large"
        expected = "400" if module is httpclient else "StatusCode.INVALID_ARGUMENT"
        assert refused.value.status() == expected, module.__name__
        top = _classify_arange(module, client, 1_000_000)
        assert top.tolist() == [b"999999.000000:999999"], module.__name__


def _classify_arange(module: Any, client: Any, count: int) -> Any:
    """The top class of ``OUTPUT0 = arange(count)`` of the model "wide"."""
    inputs = [
        module.InferInput("INPUT0", [count], "FP32"),
        module.InferInput("INPUT1", [count], "FP32"),
    ]
    inputs[0].set_data_from_numpy(np.arange(count, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.zeros(count, np.float32))
    outputs = [module.InferRequestedOutput("OUTPUT0", class_count=1)]
    return client.infer("wide", inputs, outputs=outputs).as_numpy("OUTPUT0")
