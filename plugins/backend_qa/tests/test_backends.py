"""The test backends on a real server through tritonclient: one model of each, served
as Triton's QA suites configure them."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder
from tritonclient.utils import InferenceServerException

IDENTITY = """
backend: "identity"
max_batch_size: 8
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "INPUT1" data_type: TYPE_STRING dims: [ 2 ] }},
  {{ name: "INPUT2" data_type: TYPE_INT32 dims: [ -1 ] optional: true }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_STRING dims: [ 2 ] }},
  {{ name: "OUTPUT2" data_type: TYPE_INT32 dims: [ -1 ] }}
]
parameters [{{ key: "execute_delay_ms" value: {{ string_value: "{delay}" }} }}]
"""

REPEAT = """
backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"""

SQUARE = """
backend: "square"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
parameters [{ key: "CUSTOM_FAIL_COUNT" value: { string_value: "1" } }]
"""

SEQUENCE = """
backend: "sequence"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] },
    { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }] }
  ]
}
input [{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
"""

Server = Callable[..., Any]


def _input(name: str, array: np.ndarray, module: Any = httpclient) -> Any:
    datatype = "BYTES" if array.dtype == np.object_ else str(array.dtype).upper()
    datatype = {"FLOAT32": "FP32"}.get(datatype, datatype)
    tensor = module.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def test_identity_copies_inputs_and_zeroes_a_missing_optional_one(
    model_repository: RepositoryBuilder, despina_server: Server, http_client: Server
) -> None:
    model_repository.add("identity", IDENTITY.format(delay=300), {"1/.keep": ""})
    client = http_client(despina_server(model_repository.root))
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    words = np.array([[b"a", b"bc"], [b"", b"d"]], dtype=np.object_)
    started = time.monotonic()
    result = client.infer("identity", [_input("INPUT0", values), _input("INPUT1", words)])
    assert time.monotonic() - started >= 0.3  # execute_delay_ms
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), words)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT2"), np.zeros((2, 1), np.int32))
    assert result.get_response()["parameters"] == {
        "param0": "an example string parameter",
        "param1": 42,
        "param2": False,
        "param3": 123.123,
    }


def test_identity_refuses_unpaired_tensors_with_tritons_text(
    model_repository: RepositoryBuilder, despina_server: Server, http_client: Server
) -> None:
    config = IDENTITY.format(delay=0).replace(
        '"OUTPUT1" data_type: TYPE_STRING', '"OUTPUT1" data_type: TYPE_FP32'
    )
    model_repository.add("identity", config, {"1/.keep": ""})
    client = http_client(
        despina_server(model_repository.root, args=["--model-control-mode=explicit"])
    )
    with pytest.raises(
        InferenceServerException,
        match="expected input and output datatype to match, got TYPE_STRING and TYPE_FP32",
    ):
        client.load_model("identity")


def _stream(client: Any, model: str, inputs: list[Any]) -> list[Any]:
    """Every response of one streamed request, up to its final flag."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    client.async_stream_infer(model, inputs, enable_empty_final_response=True)
    got = []
    while True:
        result, error = answers.get(timeout=30)
        if error is not None:
            got.append(error)
            continue
        response = result.get_response()
        if response.parameters["triton_final_response"].bool_param:
            break
        got.append(result)
    client.stop_stream()
    return got


def test_repeat_sends_each_value_with_its_index(
    model_repository: RepositoryBuilder, despina_server: Server, grpc_client: Server
) -> None:
    model_repository.add("repeat_int32", REPEAT, {"1/.keep": ""})
    client = grpc_client(despina_server(model_repository.root))
    values = np.array([4, 5, 6], np.int32)
    inputs = [
        _input("IN", values, grpcclient),
        _input("DELAY", np.array([10, 10, 10], np.uint32), grpcclient),
        _input("WAIT", np.array([0], np.uint32), grpcclient),
    ]
    got = _stream(client, "repeat_int32", inputs)
    assert [int(r.as_numpy("OUT")[0]) for r in got] == [4, 5, 6]
    assert [int(r.as_numpy("IDX")[0]) for r in got] == [0, 1, 2]


def test_square_sends_n_responses_the_last_failed_as_configured(
    model_repository: RepositoryBuilder, despina_server: Server, grpc_client: Server
) -> None:
    model_repository.add("square_int32", SQUARE, {"1/.keep": ""})
    client = grpc_client(despina_server(model_repository.root))
    got = _stream(client, "square_int32", [_input("IN", np.array([3], np.int32), grpcclient)])
    assert [int(r.as_numpy("OUT")[0]) for r in got[:2]] == [3, 3]
    assert isinstance(got[2], InferenceServerException)
    assert "simulated failure" in got[2].message()


def test_sequence_accumulates_per_sequence(
    model_repository: RepositoryBuilder, despina_server: Server, http_client: Server
) -> None:
    model_repository.add("sequence_int32", SEQUENCE, {"1/.keep": ""})
    client = http_client(despina_server(model_repository.root))
    sums = []
    for step, value in enumerate((5, 7, 11)):
        result = client.infer(
            "sequence_int32",
            [_input("INPUT", np.array([[value]], np.int32))],
            sequence_id=42,
            sequence_start=step == 0,
            sequence_end=step == 2,
        )
        sums.append(int(result.as_numpy("OUTPUT")[0, 0]))
    assert sums == [5, 12, 23]
