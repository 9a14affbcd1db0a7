"""Decoupled models over the gRPC stream, and BLS (sync and async) in both modes."""

from __future__ import annotations

import queue
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from .helpers import infer, pair
from .models import (
    ADD_SUB,
    ADD_SUB_IO,
    BLS_ASYNC,
    BLS_IO,
    BLS_SYNC,
    REPEAT,
    REPEAT_IO,
    SOMETIMES_BLS,
    SOMETIMES_BLS_IO,
    add,
)


@pytest.fixture(params=["process", "in-process"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def stream(client: Any, model: str, values: list[int]) -> list[Any]:
    """Responses of one request on the gRPC stream, until the final flag."""
    results: queue.SimpleQueue[Any] = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
    tensor.set_data_from_numpy(np.array(values, np.int32))
    client.async_stream_infer(model, [tensor], enable_empty_final_response=True)
    out = []
    while True:
        result, error = results.get(timeout=30)
        assert error is None, error
        response = result.get_response()
        if response.parameters["triton_final_response"].bool_param:
            break
        out.append(result)
    client.stop_stream()
    return out


def test_decoupled_responses_stream(
    mode: str, model_repository: Any, despina_server: Any, grpc_client: Any
) -> None:
    add(model_repository, "repeat", REPEAT, REPEAT_IO, mode)
    client = grpc_client(despina_server(model_repository.root))
    results = stream(client, "repeat", [4, 5, 6])
    assert [int(r.as_numpy("OUT")[0]) for r in results] == [4, 5, 6]
    assert [int(r.as_numpy("IDX")[0]) for r in results] == [0, 1, 2]
    assert stream(client, "repeat", []) == []


def test_decoupled_model_on_the_http_infer_endpoint_is_refused(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "repeat", REPEAT, REPEAT_IO)
    client = http_client(despina_server(model_repository.root))
    with pytest.raises(InferenceServerException) as refused:
        infer(client, "repeat", {"IN": np.array([1, 2], np.int32)})
    assert refused.value.status() == "501"  # as Triton
    assert refused.value.message() == (
        "HTTP end point doesn't support models with decoupled transaction policy"
    )


@pytest.mark.parametrize("source", [BLS_SYNC, BLS_ASYNC], ids=["sync", "async"])
def test_bls(
    mode: str, source: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, mode)
    add(model_repository, "repeat", REPEAT, REPEAT_IO, mode)
    add(model_repository, "bls", source, BLS_IO, mode)
    client = http_client(despina_server(model_repository.root))
    result = infer(client, "bls", pair())
    expected = [2, 3, 4, 5] if source is BLS_SYNC else [4, 6, 8, 10]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)
    assert int(result.as_numpy("COUNT")[0]) == (3 if source is BLS_SYNC else 2)


def test_bls_from_a_model_running_inline(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    """A cheap synchronous in-process model moves inline on the loop (a 1 s budget, so a
    loaded host cannot keep it in the thread); its first BLS call there is re-run in a
    worker thread, where it and every later call then stay."""
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, "in-process")
    budget = 'parameters { key: "DESPINA_INLINE_EXECUTE_US" value { string_value: "1e6" } }'
    add(model_repository, "sometimes_bls", SOMETIMES_BLS, SOMETIMES_BLS_IO, "in-process", budget)
    client = http_client(despina_server(model_repository.root))
    placements = [
        bool(infer(client, "sometimes_bls", pair()).as_numpy("IN_THREAD")[0]) for _ in range(40)
    ]
    assert placements[0] and not placements[-1]  # started in the thread, then inline
    result = infer(client, "sometimes_bls", pair(101.0))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [102, 3, 4, 5])
    assert bool(result.as_numpy("IN_THREAD")[0])
    after = [infer(client, "sometimes_bls", pair()).as_numpy("IN_THREAD")[0] for _ in range(40)]
    assert all(after)
