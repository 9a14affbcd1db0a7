"""Request parameters Triton reserves, over HTTP and gRPC on a real server: a body
parameter starting with ``triton_`` is refused (Triton's texts, per protocol; gRPC allows
``triton_enable_empty_final_response``), and so is a header the forward patterns would
turn into a reserved parameter (newer Triton, server #8763). The server keeps serving."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer, http_post

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

RESERVED = [
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "headers",
    "binary_data_output",
    "triton_enable_empty_final_response",
    "triton_injected_via_header",
]
BODY = {
    "inputs": [
        {"name": name, "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}
        for name in ("INPUT0", "INPUT1")
    ]
}
INFER = "/v2/models/toy/infer"


@pytest.fixture
def running(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> RunningServer:
    model_repository.add("toy", toy_backend.toy_config(), {"1/model.toy": ""})
    forward = ["--http-header-forward-pattern=.*", "--grpc-header-forward-pattern=.*"]
    return despina_server(model_repository.root, args=forward, plugins=[toy_backend])


def _grpc_infer(
    running: RunningServer, metadata: tuple[tuple[str, str], ...] = (), **params: Any
) -> Any:
    """A raw ModelInfer of the toy model with ``params`` as string parameters (the
    client library would refuse reserved ones itself)."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    message = service_pb2.ModelInferRequest(model_name="toy")
    for name in ("INPUT0", "INPUT1"):
        tensor = message.inputs.add(name=name, datatype="FP32", shape=[4])
        tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    for key, value in params.items():
        message.parameters[key].string_param = value
    with grpc.insecure_channel(running.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return stub.ModelInfer(message, metadata=metadata)


def test_body_parameters_starting_with_triton_are_refused(running: RunningServer) -> None:
    import grpc

    body = {**BODY, "parameters": {"triton_enable_empty_final_response": True}}
    status, _, answer = http_post(running.http_port, INFER, json.dumps(body))
    assert (status, json.loads(answer)) == (
        400,
        {
            "error": "parameter keys starting with 'triton_' are reserved for Triton usage "
            "and should not be specified."
        },
    )
    with pytest.raises(grpc.RpcError) as refused:
        _grpc_infer(running, triton_x="1")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == (
        "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
        "following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"
    )
    assert _grpc_infer(running, my_key="1").model_name == "toy"
    status, _, _ = http_post(
        running.http_port, INFER, json.dumps({**BODY, "parameters": {"my_key": 1}})
    )
    assert status == 200


def test_forwarded_headers_naming_reserved_keys_are_refused(
    running: RunningServer, http_client: Callable[..., Any], grpc_client: Callable[..., Any]
) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    clients = ((httpclient, http_client(running)), (grpcclient, grpc_client(running)))
    for key in RESERVED:
        for module, client in clients:
            inputs = [module.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.ones(4, np.float32))
            with pytest.raises(InferenceServerException) as refused:
                client.infer("toy", inputs, headers={key: "dummy-value"})
            text = f"Header '{key}' is reserved for Triton usage and cannot be forwarded."
            assert refused.value.message() == text, module.__name__
            expected = "400" if module is httpclient else "StatusCode.INVALID_ARGUMENT"
            assert refused.value.status() == expected, (key, module.__name__)
            result = client.infer("toy", inputs, headers={"my-header": "v"})
            assert result.as_numpy("OUTPUT0").tolist() == [2.0] * 4
