"""A BLS request naming an input twice answers Triton's error response (Triton 2.51's
text, without its ``Model <name> - Error when running inference: `` prefix, as every
BLS error here), one naming an output twice newer Triton's; the model goes on serving."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .helpers import infer, pair
from .models import ADD_SUB, ADD_SUB_IO, REPEAT, REPEAT_IO, add

#: What the BLS call of each CASE answered: "ok" and the output names, or its error.
BLS_REPEATS = """
import numpy as np
import triton_python_backend_utils as pb_utils

def answer(responses):
    for response in responses:
        if response.has_error():
            return response.error().message()
    return "ok " + ",".join(t.name() for r in responses for t in r.output_tensors())

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            case = int(pb_utils.get_input_tensor_by_name(request, "CASE").as_numpy()[0])
            ones = np.ones(4, np.float32)
            inputs = [pb_utils.Tensor("INPUT0", ones), pb_utils.Tensor("INPUT1", ones)]
            names = ["OUTPUT0"]
            if case in (0, 1):
                inputs.insert(1, pb_utils.Tensor("INPUT0", ones * 2))
            if case == 2:
                names = ["OUTPUT0", "OUTPUT0"]
            if case == 3:
                one = pb_utils.Tensor("IN", np.array([1], np.int32))
                stream = pb_utils.InferenceRequest(
                    model_name="repeat", requested_output_names=["OUT"], inputs=[one, one]
                ).exec(decoupled=True)
                text = answer(list(stream))
            else:
                bls = pb_utils.InferenceRequest(
                    model_name="add_sub", requested_output_names=names, inputs=inputs,
                    request_id="b1" if case == 1 else "")
                text = answer([bls.exec()])
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("ANSWER", np.array([text.encode()], np.object_))]))
        return out
"""

BLS_REPEATS_IO = """
max_batch_size: 0
input [ { name: "CASE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "ANSWER" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

INPUT_TWICE = "[request id: <id_unknown>] input 'INPUT0' already exists in request"


@pytest.fixture(params=["process", "in-process"])
def client(
    request: pytest.FixtureRequest, model_repository: Any, despina_server: Any, http_client: Any
) -> Any:
    mode = str(request.param)
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, mode)
    add(model_repository, "repeat", REPEAT, REPEAT_IO, mode)
    add(model_repository, "bls_repeats", BLS_REPEATS, BLS_REPEATS_IO, mode)
    return http_client(despina_server(model_repository.root))


def test_bls_requests_naming_a_tensor_twice(client: Any) -> None:
    def answer(case: int) -> str:
        result = infer(client, "bls_repeats", {"CASE": np.array([case], np.int32)})
        return bytes(result.as_numpy("ANSWER")[0]).decode()

    assert answer(0) == INPUT_TWICE
    assert answer(1) == "[request id: b1] input 'INPUT0' already exists in request"
    assert answer(2) == "[request id: <id_unknown>] output 'OUTPUT0' already exists in request"
    # decoupled: one error response, as Triton answers it
    assert answer(3) == "[request id: <id_unknown>] input 'IN' already exists in request"
    assert answer(4) == "ok OUTPUT0"  # the same calls with each name once
    result = infer(client, "add_sub", pair())
    assert result.as_numpy("OUTPUT0").tolist() == [2.0, 3.0, 4.0, 5.0]
