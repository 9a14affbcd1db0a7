"""Ensembles over the wire: tritonclient HTTP and gRPC (streaming for a decoupled one)."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

import ens_backend
import numpy as np
import pytest
from despina.testing import RepositoryBuilder, RunningServer
from test_ensemble import BRANCH, add_models, ensemble, step

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

CHAIN = ensemble(
    [step("double", {"IN": "X"}, {"OUT": "t"}), step("check", {"IN": "t"}, {"OUT": "Y"})],
    ["X"],
    ["Y"],
)
FAN = ensemble(
    [step("split", {"IN": "X"}, {"OUT": "t"}), step("double", {"IN": "t"}, {"OUT": "Y"})],
    ["X"],
    ["Y"],
)
#: Two branches: X -> double -> t -> neg -> Y, and X -> check -> Z.
FORK = ensemble(
    [
        step("double", {"IN": "X"}, {"OUT": "t"}),
        step("neg", {"IN": "t"}, {"OUT": "Y"}),
        step("check", {"IN": "X"}, {"OUT": "Z"}),
    ],
    ["X"],
    ["Y", "Z"],
)


@pytest.fixture
def running(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> RunningServer:
    add_models(model_repository, {"branch": BRANCH, "chain": CHAIN, "fan": FAN, "fork": FORK})
    args = ("--model-control-mode=explicit", "--load-model=*")
    return despina_server(model_repository.root, args=args, plugins=[ens_backend])


def x_input(module: Any, values: list[float]) -> Any:
    tensor = module.InferInput("X", [len(values)], "FP32")
    tensor.set_data_from_numpy(np.array(values, np.float32))
    return tensor


def test_branch_error_and_readiness_over_http(running: RunningServer, http_client: Any) -> None:
    client = http_client(running)
    result = client.infer("branch", [x_input(httpclient, [1, 2])])
    parameters = result.get_response()["parameters"]
    assert parameters == {"sequence_id": 0, "sequence_start": False, "sequence_end": False}
    np.testing.assert_array_equal(result.as_numpy("Y"), np.array([1, 2], np.float32))
    np.testing.assert_array_equal(result.as_numpy("Z"), np.array([3, 6], np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("chain", [x_input(httpclient, [-1])])
    assert info.value.status() == "400"
    assert info.value.message() == "in ensemble 'chain', negative input"
    assert client.is_model_ready("branch")
    client.unload_model("neg")
    assert not client.is_model_ready("branch")
    client.load_model("neg")
    assert client.is_model_ready("branch")
    assert client.get_model_metadata("branch")["platform"] == "ensemble"


def test_decoupled_ensemble_over_grpc_stream(running: RunningServer, grpc_client: Any) -> None:
    client = grpc_client(running)
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "fan", [x_input(grpcclient, [1, 2, 3])], enable_empty_final_response=True
        )
        answers = []
        while True:
            result, error = results.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                break
            answers.append(result.as_numpy("Y").tolist())
    finally:
        client.stop_stream()
    assert sorted(answers) == [[2.0] * 4, [4.0] * 4, [6.0] * 4]
    with pytest.raises(InferenceServerException) as info:
        client.infer("chain", [x_input(grpcclient, [-2])])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == "in ensemble 'chain', negative input"


@pytest.mark.parametrize(
    ("wanted", "ran"),
    [(["Y"], ["double", "neg"]), (["Z"], ["check"]), ([], ["double", "neg", "check"])],
)
def test_steps_feeding_no_requested_output_do_not_run(
    running: RunningServer, http_client: Any, wanted: list[str], ran: list[str]
) -> None:
    """As Triton: a request asking for a subset of the outputs runs only the steps that
    feed them (a negative X would fail the step "check" had it run)."""
    ens_backend.EnsBackend.calls.clear()
    client = http_client(running)
    outputs = [httpclient.InferRequestedOutput(name) for name in wanted] or None
    values = [2.0] if "Z" in wanted or not wanted else [-2.0]
    result = client.infer("fork", [x_input(httpclient, values)], outputs=outputs)
    assert {o["name"] for o in result.get_response()["outputs"]} == set(wanted or ["Y", "Z"])
    assert sorted(model for model, _, _ in ens_backend.EnsBackend.calls) == sorted(ran)
